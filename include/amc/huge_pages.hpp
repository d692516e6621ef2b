// Large read-mostly buffers (model weights, caches) in transparent huge pages where the
// platform offers them.
//
// A decode step streams every weight matrix once: about 1 GB for Qwen2-0.5B in bf16, so 241K
// pages of 4 KiB, each a TLB miss (and on a VM a two-level page walk). On the project's VM the
// decode ran 1.18-1.77x faster with the weights copied into 2 MiB pages than read in place from
// the file's page cache, and a copy into 4 KiB pages gained nothing (docs/performance.md,
// "Weights in huge pages").
#pragma once

#include <cstddef>

namespace amc {

/// A zero-initialised, 2 MiB-aligned block of memory that the kernel is asked to back with
/// transparent huge pages (Linux: an anonymous mapping advised with MADV_HUGEPAGE). Elsewhere,
/// or where the kernel has no THP or has it set to "never", it is the same block in normal
/// pages: huge_pages_advised() says which. Move-only (a moved-from buffer is empty); frees the block on
/// destruction.
class HugePageBuffer {
 public:
  /// The size and alignment of a transparent huge page on x86-64 and AArch64 (4 KiB granule).
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;

  HugePageBuffer() = default;
  /// Allocates `bytes` (> 0). Throws amc::error "amc::HugePageBuffer: cannot allocate N bytes:
  /// <reason>" when the operating system refuses the memory.
  explicit HugePageBuffer(std::size_t bytes);
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;
  ~HugePageBuffer();

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// Whether the kernel accepted the huge-page advice for the whole block and its THP setting
  /// ("always" or "madvise") lets it act on it. It says nothing about how many huge pages it
  /// could actually find (/proc/self/smaps AnonHugePages does).
  bool huge_pages_advised() const { return advised_; }

 private:
  void release() noexcept;

  std::byte* data_ = nullptr;  // kHugePage-aligned start of the block
  std::size_t size_ = 0;       // bytes asked for
  void* mapping_ = nullptr;    // what the allocation returned (data_ lies inside it)
  std::size_t mapped_ = 0;     // bytes of that allocation
  bool advised_ = false;
};

}  // namespace amc
