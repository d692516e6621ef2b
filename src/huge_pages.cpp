// HugePageBuffer: an anonymous mapping advised for transparent huge pages on Linux, an aligned
// heap block elsewhere.
#include "amc/huge_pages.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <system_error>
#include <utility>

#include "amc/aligned.hpp"
#include "amc/error.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace amc {
namespace {

constexpr const char* kWhere = "amc::HugePageBuffer";

#if defined(__linux__)
/// Whether the kernel's THP setting lets advised memory get huge pages ("always" or
/// "madvise" selected in /sys/kernel/mm/transparent_hugepage/enabled); read once.
bool thp_enabled() {
  static const bool enabled = [] {
    std::ifstream setting("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    return setting && std::getline(setting, line) &&
           (line.find("[always]") != std::string::npos ||
            line.find("[madvise]") != std::string::npos);
  }();
  return enabled;
}
#endif

}  // namespace

namespace detail {

void* allocate_huge_pages(std::size_t bytes) {
  constexpr std::size_t huge = HugePageBuffer::kHugePage;
  if (bytes > static_cast<std::size_t>(PTRDIFF_MAX) - huge) throw std::bad_alloc();
  // Whole huge pages: the kernel maps one only over a 2 MiB-aligned range the block fills.
  const std::size_t rounded = (bytes + huge - 1) / huge * huge;
  void* block = std::aligned_alloc(huge, rounded);
  if (block == nullptr) throw std::bad_alloc();
#if defined(__linux__)
  // A hint: where it fails or THP is off the block is ordinary memory, as correct.
  if (thp_enabled()) ::madvise(block, rounded, MADV_HUGEPAGE);
#endif
  return block;
}

void free_huge_pages(void* block) noexcept { std::free(block); }

}  // namespace detail

bool large_allocations_advised_for_huge_pages() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  return thp_enabled();
#else
  return false;
#endif
}

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
#else
  void* mapping = ::operator new(mapped, std::nothrow);
  if (mapping == nullptr) detail::throw_error(kWhere, "cannot allocate ", bytes, " bytes");
  std::memset(mapping, 0, mapped);
#endif
  const auto start = (reinterpret_cast<std::uintptr_t>(mapping) + kHugePage - 1) & ~(kHugePage - 1);
  data_ = reinterpret_cast<std::byte*>(start);
#if defined(__linux__)
  // madvise fails (EINVAL) only on a kernel built without THP; with THP set to "never" it
  // succeeds and the kernel still maps 4 KiB pages, hence the setting is read too. Either way
  // the block is correct memory.
  advised_ = thp_enabled() && ::madvise(data_, bytes, MADV_HUGEPAGE) == 0;
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
