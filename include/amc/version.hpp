// Library version, as built.
#pragma once

#include <string_view>

namespace amc {

/// "major.minor.patch" of the compiled library.
std::string_view version();

}  // namespace amc
