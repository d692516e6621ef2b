// A support: the set of cache positions a sparse decode step reads, as sorted disjoint ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "amc/error.hpp"

namespace amc {

/// Half-open range of cache positions [begin, end).
struct PositionRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;

  constexpr std::int64_t size() const { return end - begin; }
  constexpr bool contains(std::int64_t position) const {
    return begin <= position && position < end;
  }
  friend constexpr bool operator==(const PositionRange&, const PositionRange&) = default;
};

/// Sorted, disjoint, non-adjacent position ranges (adjacent ranges are merged), so every
/// position appears at most once and in increasing order. Built by adding ranges in any order
/// and calling `normalize()`; the operators do that for you.
class Support {
 public:
  Support() = default;

  /// Adds [begin, end) clipped to [0, limit); empty ranges are ignored. Call normalize() after.
  void add(std::int64_t begin, std::int64_t end, std::int64_t limit) {
    begin = std::max<std::int64_t>(begin, 0);
    end = std::min(end, limit);
    if (begin < end) ranges_.push_back({begin, end});
  }

  /// Sorts and merges overlapping or adjacent ranges.
  void normalize() {
    std::sort(ranges_.begin(), ranges_.end(),
              [](const PositionRange& a, const PositionRange& b) { return a.begin < b.begin; });
    std::size_t out = 0;
    for (const PositionRange& range : ranges_) {
      if (out > 0 && range.begin <= ranges_[out - 1].end) {
        ranges_[out - 1].end = std::max(ranges_[out - 1].end, range.end);
      } else {
        ranges_[out++] = range;
      }
    }
    ranges_.resize(out);
  }

  void clear() { ranges_.clear(); }

  std::span<const PositionRange> ranges() const { return ranges_; }

  /// Number of distinct positions (requires a normalized support).
  std::int64_t size() const {
    std::int64_t total = 0;
    for (const PositionRange& range : ranges_) total += range.size();
    return total;
  }

  /// Binary search; requires a normalized support.
  bool contains(std::int64_t position) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), position,
                               [](std::int64_t p, const PositionRange& r) { return p < r.end; });
    return it != ranges_.end() && it->contains(position);
  }

  /// Every position, in increasing order.
  std::vector<std::int64_t> positions() const {
    std::vector<std::int64_t> out;
    out.reserve(static_cast<std::size_t>(size()));
    for (const PositionRange& range : ranges_)
      for (std::int64_t p = range.begin; p < range.end; ++p) out.push_back(p);
    return out;
  }

  /// Largest position + 1, or 0 when empty.
  std::int64_t end() const { return ranges_.empty() ? 0 : ranges_.back().end; }

 private:
  std::vector<PositionRange> ranges_;
};

}  // namespace amc
