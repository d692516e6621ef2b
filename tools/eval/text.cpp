// vsnprintf twice: once for the length, once into a string of that length.
#include "text.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace amc::eval {

std::string format(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  va_list copy;
  va_copy(copy, args);
  const int size = std::vsnprintf(nullptr, 0, pattern, copy);
  va_end(copy);
  std::string out(static_cast<std::size_t>(size > 0 ? size : 0), '\0');
  std::vsnprintf(out.data(), out.size() + 1, pattern, args);
  va_end(args);
  return out;
}

std::string round_trip(double x) {
  for (int digits = 6; digits < 17; ++digits) {
    std::string text = format("%.*g", digits, x);
    if (std::strtod(text.c_str(), nullptr) == x) return text;
  }
  return format("%.17g", x);  // 17 significant digits identify every double
}

}  // namespace amc::eval
