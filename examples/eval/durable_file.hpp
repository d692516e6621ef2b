// Writing outputs so that an interruption never leaves a half-written file: whole files go to a
// temporary file in the same directory that is then renamed over the target (rename is atomic
// within a file system), and appended records are flushed to the disk before the call returns.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace amc::eval {

/// Replaces `path` with `content` atomically: PATH.tmp is written, fsynced and renamed over
/// PATH, then the directory is fsynced. Throws amc::error naming the file on failure, leaving
/// PATH as it was and removing PATH.tmp.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

/// Renames `from` over `to` and fsyncs the directory of `to`.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

/// An append-only file whose every append() is on the disk when it returns (write + fsync).
class AppendFile {
 public:
  /// Opens (creating when missing) `path` for appending. Throws amc::error on failure.
  explicit AppendFile(const std::filesystem::path& path);
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  ~AppendFile();

  void append(std::string_view bytes);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace amc::eval
