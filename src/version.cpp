#include "amc/version.hpp"

namespace amc {

std::string_view version() { return AMC_VERSION_STRING; }

}  // namespace amc
