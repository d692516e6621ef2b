// Refusing bad input: an amc::error whose message is exactly the line amc-eval prints (after
// "amc-eval: "), without the "function: " prefix library errors carry, because for a user the
// flag or file is the place to name.
#pragma once

#include <amc/error.hpp>

#include <sstream>
#include <utility>

namespace amc::eval {

template <class... Parts>
[[noreturn]] void refuse(Parts&&... parts) {
  std::ostringstream message;
  (message << ... << std::forward<Parts>(parts));
  throw amc::error(message.str());
}

}  // namespace amc::eval
