// Gated MLP activations on the CPU (the reference of ops/cuda/activation.cu): act(gate) * up
// with act = SiLU (silu_mul) or GELU-tanh (gelu_tanh_mul), plain or fused with the FP8
// quantization of the product (gated_quant). With Rounding::bf16 each output is rounded as the
// CUDA kernel stores it.
#include <cmath>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/fused_quant.h"

namespace fp8rl::ops::cpu {

namespace {
template <typename Act>
void gated(const TensorView& gate, const TensorView& up, const TensorView& out, Rounding r,
           Act act) {
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t rows = gate.dim(0), cols = gate.numel() / rows;
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j) o[j] = round_as(r, act(g[j]) * u[j]);
  });
}
}  // namespace

void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out, Rounding r) {
  gated(gate, up, out, r, [](float x) { return x / (1.0f + std::exp(-x)); });
}

void gelu_tanh_mul(const TensorView& gate, const TensorView& up, const TensorView& out,
                   Rounding r) {
  gated(gate, up, out, r, [](float x) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  });
}

void gated_quant(Arena& scratch, const TensorView& gate, const TensorView& up, int act,
                 const QuantizedActivation& q, Rounding r, const TensorView& plain) {
  auto product = [&](const TensorView& out, Rounding rounding) {
    if (act == 0)
      silu_mul(gate, up, out, rounding);
    else
      gelu_tanh_mul(gate, up, out, rounding);
  };
  // Where the quantized values are the plain output's, one pass makes both.
  if (!plain.empty() && staged(r, q) == r) {
    product(plain, r);
    quantize(plain, q, 0.0f);
    return;
  }
  ArenaScope scope(scratch);
  TensorView h = scratch.alloc(gate.shape, DType::f32);
  product(h, staged(r, q));
  quantize(h, q, 0.0f);
  if (!plain.empty()) product(plain, r);  // last: plain may be gate or up itself
}

}  // namespace fp8rl::ops::cpu
