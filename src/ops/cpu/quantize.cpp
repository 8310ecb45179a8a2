// FP8 activations on the CPU: the op's f32 result, then quantize_activation() (quant/fp8.h).
// The fused ops of the CUDA backend compute the same codes and scales in one pass.
//
// Rounding::bf16 follows the CUDA kernels: per-token and per-group fused quantization reads the
// op's fp32 values (ops/cuda/row_quant.cuh), so nothing is rounded; per-tensor scaling needs
// the amax of the whole output first, and CUDA stages that output in bf16 (cuda_ops.cpp
// rms_norm_quant, gated_quant), so the quantized values are the bf16-rounded ones.
#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "quant/fp8.h"

namespace fp8rl::ops::cpu {

void quantize(const TensorView& x, const QuantizedActivation& q, float static_scale) {
  if (q.act == ActScaling::static_tensor) q.scales.ptr<float>()[0] = static_scale;
  quantize_activation(x, q.act, q.codes, q.scales);
}

namespace {
// How a fused quantizer's input is staged: in bf16 on CUDA only for per-tensor scaling.
Rounding staged(Rounding r, const QuantizedActivation& q) {
  return q.act == ActScaling::tensor ? r : Rounding::none;
}
}  // namespace

void rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& w, float eps,
                    bool plus_one, const QuantizedActivation& q, Rounding r) {
  ArenaScope scope(scratch);
  TensorView h = scratch.alloc(x.shape, DType::f32);
  rms_norm(x, w, eps, plus_one, h, staged(r, q));
  quantize(h, q, 0.0f);
}

void add_rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one, const QuantizedActivation& q,
                        Rounding r) {
  add(x, delta, 1.0f, x, r);
  rms_norm_quant(scratch, x, w, eps, plus_one, q, r);
}

void gated_quant(Arena& scratch, const TensorView& gate, const TensorView& up, int act,
                 const QuantizedActivation& q, Rounding r) {
  ArenaScope scope(scratch);
  TensorView h = scratch.alloc(gate.shape, DType::f32);
  if (act == 0)
    silu_mul(gate, up, h, staged(r, q));
  else
    gelu_tanh_mul(gate, up, h, staged(r, q));
  quantize(h, q, 0.0f);
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
