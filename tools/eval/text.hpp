// Numbers into text for the reports, without fixed-size buffers: a value wider than expected (a
// perplexity change of 1e30 %) is written in full, never cut short.
#pragma once

#include <string>

namespace amc::eval {

/// printf into a std::string of whatever length the result needs (GCC 12's library has no
/// std::format).
[[gnu::format(printf, 1, 2)]] std::string format(const char* pattern, ...);

/// `x` in as few significant digits as read back to the same double: "%g" where six digits
/// suffice (0.1, 6, 1e-05), more where they do not (0.1234567). For echoing settings into
/// outputs and messages, where "%g" or a stream would round 1.0000001 to "1".
std::string round_trip(double x);

}  // namespace amc::eval
