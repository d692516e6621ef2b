// HugePageBuffer: an anonymous mapping advised for transparent huge pages on Linux, an aligned
// heap block elsewhere.
#include "amc/huge_pages.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <system_error>
#include <utility>

#include "amc/error.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace amc {
namespace {

constexpr const char* kWhere = "amc::HugePageBuffer";

}  // namespace

HugePageBuffer::HugePageBuffer(std::size_t bytes) {
  AMC_CHECK(bytes > 0, kWhere, "bytes is 0; expected a positive size");
  // One extra huge page lets the block start on a huge-page boundary: the kernel maps huge
  // pages only over 2 MiB-aligned ranges of the address space.
  AMC_CHECK(bytes <= static_cast<std::size_t>(PTRDIFF_MAX) - kHugePage, kWhere, "bytes is ", bytes,
            ", more than an address space holds");
  const std::size_t mapped = bytes + kHugePage;
#if defined(__linux__)
  void* mapping =
      ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    detail::throw_error(kWhere, "cannot allocate ", bytes,
                        " bytes: ", std::error_code(errno, std::generic_category()).message());
  }
  auto start = (reinterpret_cast<std::uintptr_t>(mapping) + kHugePage - 1) & ~(kHugePage - 1);
  data_ = reinterpret_cast<std::byte*>(start);
  // EINVAL where the kernel has no THP (or it is set to "never"): the block stays in 4 KiB
  // pages, which is still correct memory.
  advised_ = ::madvise(data_, bytes, MADV_HUGEPAGE) == 0;
#else
  void* mapping = ::operator new(mapped, std::nothrow);
  if (mapping == nullptr) detail::throw_error(kWhere, "cannot allocate ", bytes, " bytes");
  std::memset(mapping, 0, mapped);
  auto start = (reinterpret_cast<std::uintptr_t>(mapping) + kHugePage - 1) & ~(kHugePage - 1);
  data_ = reinterpret_cast<std::byte*>(start);
#endif
  mapping_ = mapping;
  mapped_ = mapped;
  size_ = bytes;
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapped_(std::exchange(other.mapped_, 0)),
      advised_(std::exchange(other.advised_, false)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    advised_ = std::exchange(other.advised_, false);
  }
  return *this;
}

HugePageBuffer::~HugePageBuffer() { release(); }

void HugePageBuffer::release() noexcept {
  if (mapping_ == nullptr) return;
#if defined(__linux__)
  ::munmap(mapping_, mapped_);
#else
  ::operator delete(mapping_);
#endif
  mapping_ = nullptr;
  data_ = nullptr;
  size_ = mapped_ = 0;
  advised_ = false;
}

}  // namespace amc
