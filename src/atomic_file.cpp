// Atomic file replacement with POSIX calls: exclusive temporary file, fsync, rename, directory
// fsync.
#include "amc/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <sstream>
#include <system_error>
#include <utility>

#include "amc/error.hpp"

namespace amc {
namespace {

std::string errno_message(int error_number) {
  return std::error_code(error_number, std::generic_category()).message();
}

std::filesystem::path directory_of(const std::filesystem::path& path) {
  return path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
}

}  // namespace

void write_all(int fd, std::span<const std::byte> bytes, const std::filesystem::path& path,
               const char* where) {
  while (!bytes.empty()) {
    const ::ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    // write() returning 0 for a non-empty buffer makes no progress; treat it as the error it
    // is (ENOSPC-like) rather than loop forever.
    const int error_number = written < 0 ? errno : ENOSPC;
    if (written <= 0) {
      detail::throw_error(where, path.string(), ": write failed: ", errno_message(error_number));
    }
    bytes = bytes.subspan(static_cast<std::size_t>(written));
  }
}

void sync_directory_of(const std::filesystem::path& path) noexcept {
  const int fd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  static_cast<void>(::fsync(fd));
  ::close(fd);
}

void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to,
                    const char* where) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int error_number = errno;
    detail::throw_error(where, to.string(), ": cannot rename ", from.string(),
                        " over it: ", errno_message(error_number));
  }
  sync_directory_of(to);
}

AtomicFile::AtomicFile(const std::filesystem::path& target, const char* where)
    : where_(where), target_(target) {
  const std::filesystem::path directory = directory_of(target);
  static std::atomic<std::uint64_t> counter{0};
  const auto stamp =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  // O_EXCL with a name unique per process, call and time; retry the rare collision.
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::ostringstream name;
    name << '.' << target.filename().string() << ".tmp-" << ::getpid() << '-'
         << counter.fetch_add(1) << '-' << std::hex << (stamp + static_cast<unsigned>(attempt));
    temporary_ = directory / name.str();
    // 0666 so that the final file gets the caller's umask like any newly created file.
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    const int error_number = errno;
    if (error_number != EEXIST) {
      detail::throw_error(where_, target.string(), ": cannot create temporary file ",
                          temporary_.string(), ": ", errno_message(error_number));
    }
  }
  detail::throw_error(where_, target.string(), ": cannot find a free temporary file name in ",
                      directory.string());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temporary_.c_str());
}

void AtomicFile::write(std::span<const std::byte> bytes) {
  AMC_CHECK(fd_ >= 0, where_, temporary_.string(), ": written after commit");
  write_all(fd_, bytes, temporary_, where_);
}

void AtomicFile::commit() {
  AMC_CHECK(fd_ >= 0, where_, temporary_.string(), ": committed twice");
  if (::fsync(fd_) != 0) fail("fsync", errno);
  if (::close(std::exchange(fd_, -1)) != 0) fail("close", errno);
  rename_durably(temporary_, target_, where_);
  committed_ = true;
}

void AtomicFile::fail(const char* operation, int error_number) const {
  detail::throw_error(where_, temporary_.string(), ": ", operation,
                      " failed: ", errno_message(error_number));
}

void write_file_atomically(const std::filesystem::path& path, std::string_view content,
                           const char* where) {
  AtomicFile file(path, where);
  file.write(content);
  file.commit();
}

}  // namespace amc
