// Writing files so that an interruption never leaves a half-written one: the bytes go to a
// temporary file in the target's directory, which is flushed to the disk and then renamed over
// the target (rename is atomic within a file system), and the directory is flushed so that the
// new name survives a crash too. Readers see the old file or the new one, never a mixture.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

namespace amc {

/// A file that appears at `target` whole or not at all. The constructor creates a temporary
/// file next to the target (".NAME.tmp-PID-N-STAMP", created exclusively, so concurrent
/// writers never share one); write() appends to it; commit() fsyncs and closes it, renames it
/// over the target and fsyncs the directory (best effort: the data are already safe). Until
/// commit() succeeds the target is untouched, and the destructor removes the temporary file.
///
/// Errors throw amc::error "<where>: <path>: <what failed>: <errno text>", `where` naming the
/// public function the caller reports as (by default "amc::AtomicFile").
class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& target, const char* where = "amc::AtomicFile");
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  /// Appends `bytes` (retrying short writes and interrupted calls).
  void write(std::span<const std::byte> bytes);
  void write(std::string_view text) { write(std::as_bytes(std::span(text.data(), text.size()))); }

  /// Makes the written bytes the target's content. Call at most once.
  void commit();

  const std::filesystem::path& target() const { return target_; }
  /// The temporary file's path (it no longer exists after commit or destruction).
  const std::filesystem::path& temporary() const { return temporary_; }

 private:
  [[noreturn]] void fail(const char* operation, int error_number) const;

  const char* where_;
  std::filesystem::path target_;
  std::filesystem::path temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Replaces `path` with `content` atomically (AtomicFile). On failure `path` is as it was and
/// no temporary file is left; the amc::error names `where`, the file and the errno text.
void write_file_atomically(const std::filesystem::path& path, std::string_view content,
                           const char* where = "amc::write_file_atomically");

/// Renames `from` over `to` (atomic within a file system), then fsyncs the directory of `to`
/// (best effort). For a file some other program wrote under a temporary name.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to,
                    const char* where = "amc::rename_durably");

/// The building blocks, for callers that keep a descriptor of their own (an append-only log):
/// writes all of `bytes` to `fd`, retrying short writes and EINTR; a failure, or a write that
/// makes no progress, throws amc::error "<where>: <path>: write failed: <errno text>".
void write_all(int fd, std::span<const std::byte> bytes, const std::filesystem::path& path,
               const char* where);

/// fsyncs the directory that holds `path` (its parent, or "." for a bare name), so that a
/// newly created or renamed name survives a crash. Best effort: some file systems refuse to
/// open or flush directories, and then nothing more can be done.
void sync_directory_of(const std::filesystem::path& path) noexcept;

}  // namespace amc
