// Error policy of amc: bad input at the public boundary throws amc::error, never exits.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace amc {

/// The one exception type amc throws for bad arguments, malformed files and violated
/// preconditions at its public boundary. The message names the function, the offending
/// argument or field, and its value.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

/// Builds "where: what" from streamable parts; kept out of line of the hot path by callers.
template <class... Parts>
[[noreturn]] void throw_error(const char* where, Parts&&... parts) {
  std::ostringstream message;
  message << where << ": ";
  (message << ... << std::forward<Parts>(parts));
  throw error(message.str());
}

}  // namespace detail
}  // namespace amc

/// Throws amc::error("<where>: <message parts...>") unless `condition` holds.
/// `where` names the public function, e.g. "amc::DenseDecode::decode"; the parts name the
/// argument or field and its value. Use at the API boundary for anything a caller can get wrong.
#define AMC_CHECK(condition, where, ...)              \
  do {                                                \
    if (!(condition)) [[unlikely]] {                  \
      ::amc::detail::throw_error(where, __VA_ARGS__); \
    }                                                 \
  } while (false)

/// Debug-only invariant inside kernels; compiled out with NDEBUG.
#ifdef NDEBUG
#define AMC_DASSERT(condition) ((void)0)
#else
#include <cassert>
#define AMC_DASSERT(condition) assert(condition)
#endif
