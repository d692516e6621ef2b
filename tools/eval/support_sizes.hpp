// Support sizes of the study and the block counts they stand for.
//
// A block-sparse step reads the first `sinks` positions, the last `window` positions and k
// blocks of `block_size` positions, so the study's support sizes (97, 193, 385, 769 with block
// 16, one sink and a window of 64) name k = (support - sinks - window) / block_size. Sizes that
// do not map to a whole, non-negative k are refused rather than rounded: a table labelled 100
// must not silently measure 97.
#pragma once

#include <cstdint>
#include <vector>

namespace amc::eval {

struct SupportSize {
  std::int64_t support = 0;  ///< nominal positions read: sinks + window + k * block_size
  std::int64_t k = 0;        ///< selected blocks
};

/// Maps each support size to k. Throws amc::error for the first size that does not map,
/// naming it and the nearest valid sizes, e.g. "--supports 100 does not map to whole blocks
/// (block size 16, sinks 1, window 64): nearest valid sizes are 97 and 113".
/// Requires block_size > 0, sinks >= 0, window >= 0 (checked).
std::vector<SupportSize> map_supports(const std::vector<std::int64_t>& supports,
                                      std::int64_t block_size, std::int64_t sinks,
                                      std::int64_t window);

}  // namespace amc::eval
