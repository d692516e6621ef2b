// POSIX appends with fdatasync, on the library's write and directory-sync helpers.
#include "durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>
#include <utility>

#include "refuse.hpp"

namespace amc::eval {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* what) {
  refuse(path.string(), ": cannot ", what, ": ", std::strerror(errno));
}

}  // namespace

AppendFile::AppendFile(const std::filesystem::path& path) : path_(path) {
  const bool existed = std::filesystem::exists(path);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(path, "open for appending");
  if (!existed) sync_directory_of(path);  // the new name itself must survive a crash
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
  write_all(fd_, std::as_bytes(std::span(bytes.data(), bytes.size())), path_,
            "amc::eval::AppendFile::append");
  if (::fdatasync(fd_) != 0) fail(path_, "flush");
}

}  // namespace amc::eval
