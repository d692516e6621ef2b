// Renamed amc/attention/registered_rule.hpp (one word, "rule", names the concept); this header
// remains for code that includes the old name.
#pragma once
#pragma message( \
    "amc/attention/selectors.hpp is deprecated: include amc/attention/registered_rule.hpp")

#include "amc/attention/registered_rule.hpp"
