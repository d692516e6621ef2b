// POSIX file I/O with fsync.
#include "durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "refuse.hpp"

namespace amc::eval {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* what) {
  refuse(path.string(), ": cannot ", what, ": ", std::strerror(errno));
}

void write_all(int fd, std::string_view bytes, const std::filesystem::path& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "write");
    }
    // write() returning 0 for a non-empty buffer makes no progress; treat it as the error it
    // is (ENOSPC-like) rather than loop forever.
    if (n == 0) {
      errno = ENOSPC;
      fail(path, "write");
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void sync_directory(const std::filesystem::path& file) {
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some file systems refuse to open directories
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) fail(to, "replace the file");
  sync_directory(to);
}

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(temporary, "create");
  try {
    write_all(fd, content, temporary);
    if (::fsync(fd) != 0) fail(temporary, "flush");
    if (::close(std::exchange(fd, -1)) != 0) fail(temporary, "close");
    rename_durably(temporary, path);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    // A failed write (a full disk) leaves the old PATH as it was and no PATH.tmp beside it.
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

AppendFile::AppendFile(const std::filesystem::path& path) : path_(path) {
  const bool existed = std::filesystem::exists(path);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path, "open for appending");
  if (!existed) sync_directory(path);  // the new name itself must survive a crash
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

void AppendFile::append(std::string_view bytes) {
  write_all(fd_, bytes, path_);
  if (::fdatasync(fd_) != 0) fail(path_, "flush");
}

}  // namespace amc::eval
