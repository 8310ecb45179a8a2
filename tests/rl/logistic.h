// The logistic formulas, in double, that the preference-loss tests compute their expectations
// with, and the comparison they make.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "tolerances.h"

namespace fp8rl::test {

// -log σ(x) = log(1 + e^-x).
inline double nls(double x) {
  return std::log1p(std::exp(-x));
}
// σ(x) = 1 / (1 + e^-x).
inline double sig(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
inline void expect_near(double got, double want, const char* what) {
  EXPECT_NEAR(got, want, kF64Formula * std::max(1.0, std::fabs(want))) << what;
}

}  // namespace fp8rl::test
