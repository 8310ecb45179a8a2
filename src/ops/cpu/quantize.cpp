// FP8 activations on the CPU (the reference of ops/cuda/quantize.cu): quantize() is
// quantize_activation() (quant/fp8.h) on an f32 tensor, and dequantize() its inverse. The fused
// quantizers are with their ops (norm.cpp rms_norm_quant, activation.cpp gated_quant).
#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "quant/fp8.h"

namespace fp8rl::ops::cpu {

void quantize(const TensorView& x, const QuantizedActivation& q, float static_scale) {
  if (q.act == ActScaling::static_tensor) q.scales.ptr<float>()[0] = static_scale;
  quantize_activation(x, q.act, q.codes, q.scales);
}

// Rounding::bf16: CUDA's dequantize kernel writes bf16(code * scale).
void dequantize(const QuantizedActivation& q, const TensorView& out, Rounding r) {
  const int64_t m = q.rows, k = q.cols, groups = (k + kFp8Block - 1) / kFp8Block;
  const uint8_t* codes = q.codes.ptr<uint8_t>();
  const float* s = q.scales.ptr<float>();
  float* o = out.ptr<float>();
  parallel_for(0, m, [&](int64_t i) {
    for (int64_t c = 0; c < k; ++c) {
      float sc;
      switch (q.act) {
        case ActScaling::token:
          sc = s[i];
          break;
        case ActScaling::group:
          sc = s[i * groups + c / kFp8Block];
          break;
        default:
          sc = s[0];
          break;
      }
      o[i * k + c] = round_as(r, e4m3_to_f32(codes[i * k + c]) * sc);
    }
  });
}

}  // namespace fp8rl::ops::cpu
