// THE FP8 recipe: the one definition of how fp8rl quantizes weights and
// activations. The CPU ops call these functions; the CUDA kernels implement the same formulas
// and are tested bit-for-bit against them.
//
//   e4m3fn, round to nearest even, saturating at +-448 (core/dtype.h f32_to_e4m3).
//   scale = amax / 448 over the group, computed in fp32; a group whose amax is 0 gets scale 1.
//   q = e4m3(x / scale), an IEEE fp32 division (not a multiplication by 1/scale).
//   Weight groups [N,K]: the tensor, each output row, or 128x128 blocks (edge blocks use the
//   amax of their valid part). Scales: [1], [N], [ceil(N/128), ceil(K/128)] row-major.
//   Activation groups [M,K]: the tensor, each token (row), or 1x128 groups along K. Scales:
//   [1], [M], [M, ceil(K/128)] row-major. A static scale (checkpoint input_scale) is used as is.
//   Dequantized semantics of the linear: y[m,n] = sum_k (xq[m,k]*sx) * (wq[n,k]*sw), fp32.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "formats/quant_config.h"

namespace fp8rl {

inline float fp8_scale_from_amax(float amax) {
  return amax == 0.0f ? 1.0f : amax / kE4m3Max;
}

// Shape of the fp32 scale tensor of an [N,K] weight.
Shape weight_scale_shape(Fp8Scheme scheme, int64_t n, int64_t k);
// Shape of the fp32 scale tensor of an [M,K] activation (none/static: [1]).
Shape act_scale_shape(ActScaling scaling, int64_t m, int64_t k);

// w [N,K] (f32, bf16 or f16) -> q [N,K] f8e4m3 codes and scales (f32, weight_scale_shape).
void quantize_weight(const TensorView& w, Fp8Scheme scheme, const TensorView& q,
                     const TensorView& scales);

// x [M,K] f32 -> q [M,K] f8e4m3 codes and scales (f32, act_scale_shape). For static_tensor,
// `scales` holds the input scale on entry and is left unchanged.
void quantize_activation(const TensorView& x, ActScaling scaling, const TensorView& q,
                         const TensorView& scales);

// The scale of weight element (n, k) of an [N,K] weight quantized with `scheme`.
inline float weight_scale_at(Fp8Scheme scheme, const float* s, int64_t n, int64_t k, int64_t K) {
  switch (scheme) {
    case Fp8Scheme::tensor:
      return s[0];
    case Fp8Scheme::row:
      return s[n];
    case Fp8Scheme::block:
      return s[(n / kFp8Block) * ((K + kFp8Block - 1) / kFp8Block) + k / kFp8Block];
    case Fp8Scheme::off:
      return 1.0f;
  }
  return 1.0f;
}

// Rows [n0, n1) of the dequantized weight, w_hat = e4m3 codes * scales, into dst
// ([n1 - n0, K] f32) — the CPU linear streams the weight through this block by block.
void dequantize_weight_rows(const TensorView& q, Fp8Scheme scheme, const TensorView& scales,
                            int64_t n0, int64_t n1, float* dst);

// w_hat[N,K] f32 = e4m3 codes * scales: the whole dequantized weight.
void dequantize_weight(const TensorView& q, Fp8Scheme scheme, const TensorView& scales,
                       const TensorView& out);

}  // namespace fp8rl
