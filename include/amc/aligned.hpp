// Cache-line-aligned storage for the buffers amc's kernels stream through.
//
// A 64-byte vector load that straddles two cache lines costs two loads. std::vector's memory is
// only 16-byte aligned (large blocks come from mmap at page + 16), so rows of f32 mean keys or
// widened keys in such a vector split on every load: the scoring kernel takes 8.0 ns per row
// instead of 5.0 for 7 heads at head_dim 64 (BM_ScoreRows, docs/performance.md). Buffers that
// kernels read row by row are therefore allocated on 64-byte boundaries.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace amc {

/// Bytes per cache line on the x86-64 and AArch64 machines amc targets.
inline constexpr std::size_t kCacheLine = 64;

/// Allocations of at least this many bytes are placed in transparent huge pages (see
/// CacheLineAllocator).
inline constexpr std::size_t kHugePageAllocation = std::size_t{1} << 20;

namespace detail {
/// A block of at least `bytes` (>= kHugePageAllocation) starting on a 2 MiB boundary, its size
/// rounded up to whole 2 MiB pages and advised for transparent huge pages where the platform
/// has them (src/huge_pages.cpp). Throws std::bad_alloc.
void* allocate_huge_pages(std::size_t bytes);
void free_huge_pages(void* block) noexcept;
}  // namespace detail

/// Whether allocations of kHugePageAllocation bytes and more are advised for transparent huge
/// pages: Linux with THP set to "always" or "madvise". Elsewhere they are ordinary memory.
bool large_allocations_advised_for_huge_pages();

/// std::allocator with every allocation aligned to a cache line, and those of 1 MiB and more
/// (KV caches, block summaries at long contexts) in transparent huge pages: at 128K positions a
/// KV head's summaries span 256-768 pages of 4 KiB that a cold selection walks, and in huge
/// pages the bound rules' step ran 9-12% faster (docs/performance.md, "Block summaries in huge
/// pages"). The rounding to whole 2 MiB pages costs at most 1 MiB per allocation.
template <class T>
struct CacheLineAllocator {
  using value_type = T;

  CacheLineAllocator() = default;
  template <class U>
  constexpr CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}  // NOLINT: rebinding

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    if (n * sizeof(T) >= kHugePageAllocation) {
      return static_cast<T*>(detail::allocate_huge_pages(n * sizeof(T)));
    }
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) >= kHugePageAllocation) return detail::free_huge_pages(p);
    ::operator delete (p, std::align_val_t{kCacheLine});
  }

  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

/// A std::vector whose data() starts on a cache line.
template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace amc
