// Element-wise ops on the CPU (the references of ops/cuda/elementwise.cu): the residual add and
// softcap. With Rounding::bf16 each output is rounded as the CUDA kernel stores it
// (__float2bfloat16_rn of the same fp32 expression).
#include <cmath>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

void add(const TensorView& a, const TensorView& b, float alpha, const TensorView& out, Rounding r) {
  const float* pa = a.ptr<float>();
  const float* pb = b.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t rows = a.dim(0), cols = a.numel() / rows;
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j)
      o[j] = round_as(r, std::fma(alpha, pb[j], pa[j]));
  });
}

void softcap(const TensorView& x, float cap, Output kind, Rounding r) {
  if (kind == Output::f32) r = Rounding::none;
  float* p = x.ptr<float>();
  const int64_t rows = x.dim(0), cols = x.numel() / rows;
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j)
      p[j] = round_as(r, cap * std::tanh(p[j] / cap));
  });
}

}  // namespace fp8rl::ops::cpu
