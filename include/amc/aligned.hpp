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

/// std::allocator with every allocation aligned to a cache line.
template <class T>
struct CacheLineAllocator {
  using value_type = T;

  CacheLineAllocator() = default;
  template <class U>
  constexpr CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}  // NOLINT: rebinding

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, std::size_t) noexcept {
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
