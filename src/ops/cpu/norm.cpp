// RMSNorm on the CPU (the reference of ops/cuda/norm.cu): rms_norm, add_rms_norm (the residual
// add x += delta, then the norm) and their fused FP8 quantizers, the op's f32 result then
// quantize(). With Rounding::bf16 each output is rounded as the CUDA kernel stores it.
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/fused_quant.h"
#include "ops/cpu/norm_row.h"

namespace fp8rl::ops::cpu {

std::vector<float> norm_weight(const TensorView& w, int64_t d, bool plus_one) {
  std::vector<float> weight(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) {
    const float v = load_as_f32(w.data, w.dtype, size_t(j));
    weight[size_t(j)] = plus_one ? 1.0f + v : v;
  }
  return weight;
}

void norm_row(const float* in, const float* weight, int64_t d, float eps, float* out, Rounding r) {
  float ss = 0.0f;
  for (int64_t j = 0; j < d; ++j) ss += in[j] * in[j];
  const float inv = 1.0f / std::sqrt(ss / float(d) + eps);
  for (int64_t j = 0; j < d; ++j) out[j] = round_as(r, (in[j] * inv) * weight[size_t(j)]);
}

void rms_norm(const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out, Rounding rd) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  const std::vector<float> weight = norm_weight(w, d, plus_one);
  const float* xi = x.ptr<float>();
  float* o = out.ptr<float>();
  parallel_for(0, rows,
               [&](int64_t r) { norm_row(xi + r * d, weight.data(), d, eps, o + r * d, rd); });
}

void add_rms_norm(const TensorView& x, const TensorView& delta, const TensorView& w, float eps,
                  bool plus_one, const TensorView& out, Rounding r) {
  add(x, delta, 1.0f, x, r);
  rms_norm(x, w, eps, plus_one, out, r);
}

void rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& w, float eps,
                    bool plus_one, const QuantizedActivation& q, Rounding r,
                    const TensorView& plain) {
  // Where the quantized values are the plain output's, one pass makes both.
  if (!plain.empty() && staged(r, q) == r) {
    rms_norm(x, w, eps, plus_one, plain, r);
    quantize(plain, q, 0.0f);
    return;
  }
  ArenaScope scope(scratch);
  TensorView h = scratch.alloc(x.shape, DType::f32);
  rms_norm(x, w, eps, plus_one, h, staged(r, q));
  quantize(h, q, 0.0f);
  if (!plain.empty()) rms_norm(x, w, eps, plus_one, plain, r);
}

void add_rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one, const QuantizedActivation& q,
                        Rounding r, const TensorView& plain) {
  add(x, delta, 1.0f, x, r);
  rms_norm_quant(scratch, x, w, eps, plus_one, q, r, plain);
}

}  // namespace fp8rl::ops::cpu
