// The value of a statistic over nothing (a mean of no tokens, the spread of no rewards): NaN, as
// TRL logs it.
#pragma once

#include <limits>

namespace fp8rl {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace fp8rl
