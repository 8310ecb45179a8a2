// Helpers shared by the tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/tensor.h"

namespace fp8rl::test {

// Whether two views hold the same bytes (bitwise equality, NaNs included).
inline bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

// A chat template prefix in the way of Qwen3's thinking switch: "<x>nothink\n" when the
// template variable enable_thinking is given and false, nothing otherwise.
inline const std::string kThinkingSwitch =
    "{% if enable_thinking is defined and not enable_thinking %}{{ '<x>nothink\\n' }}"
    "{% endif %}";

inline std::string golden_dir(const std::string& arch) {
  return std::string(FP8RL_TEST_DATA) + "/goldens/" + arch;
}

// max |a - b| / max |ref| of two f32 tensors; NaN anywhere, or a shape or dtype mismatch,
// gives infinity.
inline double rel_max_diff(const TensorView& a, const TensorView& ref) {
  // Different shapes (or non-f32 data) are no match at all: infinity fails every bound.
  if (!(a.shape == ref.shape) || a.dtype != DType::f32 || ref.dtype != DType::f32) {
    std::fprintf(stderr, "rel_max_diff: comparing %s %s with %s %s\n", a.shape.str().c_str(),
                 std::string(dtype_name(a.dtype)).c_str(), ref.shape.str().c_str(),
                 std::string(dtype_name(ref.dtype)).c_str());
    return INFINITY;
  }
  double diff = 0.0, scale = 0.0;
  const float* pa = a.ptr<float>();
  const float* pr = ref.ptr<float>();
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (std::isnan(pa[i]) || std::isnan(pr[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(pa[i]) - double(pr[i])));
    scale = std::max(scale, std::fabs(double(pr[i])));
  }
  return scale == 0.0 ? diff : diff / scale;
}

// Fraction of rows whose argmax agrees.
inline double top1_agreement(const TensorView& a, const TensorView& b) {
  const int64_t rows = a.dim(0), cols = a.dim(1);
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* pa = a.ptr<float>() + r * cols;
    const float* pb = b.ptr<float>() + r * cols;
    same += (std::max_element(pa, pa + cols) - pa) == (std::max_element(pb, pb + cols) - pb);
  }
  return double(same) / double(rows);
}

}  // namespace fp8rl::test
