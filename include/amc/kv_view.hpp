// Non-owning views of one KV head of an engine's cache: contiguous (with a row stride) or paged.
//
// Shapes, outermost first: keys and values of one KV head are [positions, head_dim], row p at
// `row_stride` elements after row p - 1. For an engine whose cache is [positions, kv_heads,
// head_dim], the view of KV head h starts at element h * head_dim with row stride
// kv_heads * head_dim. A paged cache is a pool of [pool_rows, head_dim] rows cut into pages of
// `page_size` rows; a page table lists, in position order, which pool page holds each page of
// the sequence; the last page may be partly filled.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "amc/error.hpp"
#include "amc/storage.hpp"

namespace amc {

namespace detail {

/// Keeps loads whose values only feed `seen` (a read-ahead that touches cache lines) from being
/// optimised away.
inline void keep_loads(unsigned seen) {
#if defined(__GNUC__)
  asm volatile("" : : "r"(seen));
#else
  thread_local volatile unsigned sink;
  sink = seen;
#endif
}

}  // namespace detail

/// Contiguous KV head: rows of keys and values with independent row strides.
template <KvStorage T>
class KvView {
 public:
  using value_type = T;

  KvView() = default;

  /// \param keys       [positions, key_stride], first row of the keys of this head
  /// \param values     [positions, value_stride], first row of the values of this head
  /// \param positions  number of cached positions (0 allowed)
  /// \param head_dim   channels per row
  /// \param key_stride elements between consecutive key rows (>= head_dim); 0 means head_dim
  /// \param value_stride elements between consecutive value rows; 0 means key_stride
  KvView(const T* keys, const T* values, std::int64_t positions, std::int64_t head_dim,
         std::ptrdiff_t key_stride = 0, std::ptrdiff_t value_stride = 0)
      : keys_(keys),
        values_(values),
        positions_(positions),
        head_dim_(head_dim),
        key_stride_(key_stride == 0 ? head_dim : key_stride),
        value_stride_(value_stride == 0 ? key_stride_ : value_stride) {
    constexpr const char* where = "amc::KvView";
    AMC_CHECK(head_dim > 0, where, "head_dim must be positive, got ", head_dim);
    AMC_CHECK(positions >= 0, where, "positions must be >= 0, got ", positions);
    AMC_CHECK(key_stride_ >= head_dim, where, "key_stride ", key_stride_, " is below head_dim ",
              head_dim);
    AMC_CHECK(value_stride_ >= head_dim, where, "value_stride ", value_stride_,
              " is below head_dim ", head_dim);
    AMC_CHECK(positions == 0 || (keys != nullptr && values != nullptr), where,
              "keys and values must be non-null for ", positions, " positions");
  }

  std::int64_t positions() const { return positions_; }
  std::int64_t head_dim() const { return head_dim_; }
  std::ptrdiff_t key_stride() const { return key_stride_; }
  std::ptrdiff_t value_stride() const { return value_stride_; }
  const T* key(std::int64_t position) const { return keys_ + position * key_stride_; }
  const T* value(std::int64_t position) const { return values_ + position * value_stride_; }

  /// Calls fn(first_key_row, first_value_row, first_position, rows) for maximal runs of rows
  /// that are contiguous in memory within [begin, end); here, one run.
  template <class Fn>
  void for_each_run(std::int64_t begin, std::int64_t end, Fn&& fn) const {
    AMC_DASSERT(0 <= begin && begin <= end && end <= positions_);
    if (begin < end) fn(key(begin), value(begin), begin, end - begin);
  }

 private:
  const T* keys_ = nullptr;
  const T* values_ = nullptr;
  std::int64_t positions_ = 0;
  std::int64_t head_dim_ = 1;
  std::ptrdiff_t key_stride_ = 1;
  std::ptrdiff_t value_stride_ = 1;
};

/// Paged KV head: the sequence's pages live anywhere in a pool, in the order of a page table.
/// Selection blocks may coincide with pages (block_size == page_size) but need not.
template <KvStorage T>
class PagedKvView {
 public:
  using value_type = T;

  /// \param key_pool     [pool_rows, key_stride]: all pages of the key pool, page i at row
  ///                     i * page_size
  /// \param value_pool   [pool_rows, value_stride]
  /// \param pool_rows    rows in each pool (a multiple of page_size is typical, not required)
  /// \param head_dim     channels per row
  /// \param page_table   [pages]: pool page of sequence page 0, 1, ...; the view keeps this span,
  ///                     so the table must outlive the view
  /// \param page_size    rows per page
  /// \param last_page_length rows used in the last page, 1..page_size (ignored when no pages)
  /// \param key_stride, value_stride as for KvView (0: head_dim, resp. key_stride)
  PagedKvView(const T* key_pool, const T* value_pool, std::int64_t pool_rows, std::int64_t head_dim,
              std::span<const std::int32_t> page_table, std::int64_t page_size,
              std::int64_t last_page_length, std::ptrdiff_t key_stride = 0,
              std::ptrdiff_t value_stride = 0)
      : keys_(key_pool),
        values_(value_pool),
        pool_rows_(pool_rows),
        head_dim_(head_dim),
        key_stride_(key_stride == 0 ? head_dim : key_stride),
        value_stride_(value_stride == 0 ? key_stride_ : value_stride),
        page_table_(page_table),
        page_size_(page_size),
        last_page_length_(last_page_length) {
    constexpr const char* where = "amc::PagedKvView";
    AMC_CHECK(head_dim > 0, where, "head_dim must be positive, got ", head_dim);
    AMC_CHECK(page_size > 0, where, "page_size must be positive, got ", page_size);
    AMC_CHECK(pool_rows >= 0, where, "pool_rows must be >= 0, got ", pool_rows);
    AMC_CHECK(key_stride_ >= head_dim, where, "key_stride ", key_stride_, " is below head_dim ",
              head_dim);
    AMC_CHECK(value_stride_ >= head_dim, where, "value_stride ", value_stride_,
              " is below head_dim ", head_dim);
    if (page_table.empty()) {
      positions_ = 0;
      return;
    }
    AMC_CHECK(last_page_length >= 1 && last_page_length <= page_size, where,
              "last_page_length must be in 1..page_size (", page_size, "), got ", last_page_length);
    AMC_CHECK(key_pool != nullptr && value_pool != nullptr, where,
              "key_pool and value_pool must be non-null");
    for (std::size_t i = 0; i < page_table.size(); ++i) {
      const std::int64_t page = page_table[i];
      AMC_CHECK(page >= 0 && (page + 1) * page_size <= pool_rows, where, "page_table[", i,
                "] = ", page,
                " is out of range: (index + 1) * page_size = ", (page + 1) * page_size,
                " exceeds pool_rows ", pool_rows);
    }
    positions_ = static_cast<std::int64_t>(page_table.size() - 1) * page_size + last_page_length;
  }

  std::int64_t positions() const { return positions_; }
  std::int64_t head_dim() const { return head_dim_; }
  std::int64_t page_size() const { return page_size_; }
  std::span<const std::int32_t> page_table() const { return page_table_; }
  std::ptrdiff_t key_stride() const { return key_stride_; }
  std::ptrdiff_t value_stride() const { return value_stride_; }

  std::int64_t pool_row(std::int64_t position) const {
    return static_cast<std::int64_t>(page_table_[static_cast<std::size_t>(position / page_size_)]) *
               page_size_ +
           position % page_size_;
  }
  const T* key(std::int64_t position) const { return keys_ + pool_row(position) * key_stride_; }
  const T* value(std::int64_t position) const {
    return values_ + pool_row(position) * value_stride_;
  }

  /// Calls fn(first_key_row, first_value_row, first_position, rows) once per page touched by
  /// [begin, end): rows within one page are contiguous in the pool.
  template <class Fn>
  void for_each_run(std::int64_t begin, std::int64_t end, Fn&& fn) const {
    AMC_DASSERT(0 <= begin && begin <= end && end <= positions_);
    while (begin < end) {
      const std::int64_t page_end = (begin / page_size_ + 1) * page_size_;
      const std::int64_t run_end = page_end < end ? page_end : end;
      fn(key(begin), value(begin), begin, run_end - begin);
      begin = run_end;
    }
  }

 private:
  const T* keys_ = nullptr;
  const T* values_ = nullptr;
  std::int64_t pool_rows_ = 0;
  std::int64_t head_dim_ = 1;
  std::ptrdiff_t key_stride_ = 1;
  std::ptrdiff_t value_stride_ = 1;
  std::span<const std::int32_t> page_table_;
  std::int64_t page_size_ = 1;
  std::int64_t last_page_length_ = 0;
  std::int64_t positions_ = 0;
};

/// What operators and rules need of a KV view: its storage type, its extent, random access
/// to rows and iteration over memory-contiguous runs of rows.
template <class V>
concept KvViewLike = requires(const V& view, std::int64_t position) {
  typename V::value_type;
  requires KvStorage<typename V::value_type>;
  { view.positions() } -> std::convertible_to<std::int64_t>;
  { view.head_dim() } -> std::convertible_to<std::int64_t>;
  { view.key(position) } -> std::same_as<const typename V::value_type*>;
  { view.value(position) } -> std::same_as<const typename V::value_type*>;
  { view.key_stride() } -> std::convertible_to<std::ptrdiff_t>;
  { view.value_stride() } -> std::convertible_to<std::ptrdiff_t>;
};

}  // namespace amc
