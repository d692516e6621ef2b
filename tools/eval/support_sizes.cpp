// Support size to block count, with the nearest valid sizes named on refusal.
#include "support_sizes.hpp"

#include <string>

#include "refuse.hpp"

namespace amc::eval {

std::vector<SupportSize> map_supports(const std::vector<std::int64_t>& supports,
                                      std::int64_t block_size, std::int64_t sinks,
                                      std::int64_t window) {
  if (block_size <= 0) refuse("--block-size must be positive, got ", block_size);
  if (sinks < 0) refuse("--sinks must be >= 0, got ", sinks);
  if (window < 0) refuse("--window must be >= 0, got ", window);
  const std::int64_t base = sinks + window;  // the support with k = 0
  const std::string settings = "(block size " + std::to_string(block_size) + ", sinks " +
                               std::to_string(sinks) + ", window " + std::to_string(window) + ")";
  std::vector<SupportSize> out;
  for (const std::int64_t s : supports) {
    if (s < base) {
      refuse("--supports ", s, " is smaller than sinks + window ", settings,
             ": the smallest valid size is ", base, " (k = 0)");
    }
    const std::int64_t below = base + (s - base) / block_size * block_size;
    if (below != s) {
      refuse("--supports ", s, " does not map to whole blocks ", settings,
             ": nearest valid sizes are ", below, " and ", below + block_size);
    }
    out.push_back({s, (s - base) / block_size});
  }
  return out;
}

}  // namespace amc::eval
