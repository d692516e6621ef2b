// Appended records that are on the disk before the call returns. Whole files are replaced with
// the library's amc::write_file_atomically and amc::rename_durably (amc/io/atomic_file.hpp),
// which this header brings in for the harness.
#pragma once

#include <amc/io/atomic_file.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace amc::eval {

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
