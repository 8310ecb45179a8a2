// FP8 activations on the CPU: the op's f32 result, then quantize_activation() (quant/fp8.h).
// The fused ops of the CUDA backend compute the same codes and scales in one pass.
#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "quant/fp8.h"

namespace fp8rl::ops::cpu {

void quantize(const TensorView& x, const QuantizedActivation& q, float static_scale) {
  if (q.act == ActScaling::static_tensor) q.scales.ptr<float>()[0] = static_scale;
  quantize_activation(x, q.act, q.codes, q.scales);
}

void rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& w, float eps,
                    bool plus_one, const QuantizedActivation& q) {
  ArenaScope scope(scratch);
  TensorView h = scratch.alloc(x.shape, DType::f32);
  rms_norm(x, w, eps, plus_one, h);
  quantize(h, q, 0.0f);
}

void add_rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one,
                        const QuantizedActivation& q) {
  add(x, delta, x);
  rms_norm_quant(scratch, x, w, eps, plus_one, q);
}

void gated_quant(Arena& scratch, const TensorView& gate, const TensorView& up, int act,
                 const QuantizedActivation& q) {
  ArenaScope scope(scratch);
  TensorView h = scratch.alloc(gate.shape, DType::f32);
  if (act == 0)
    silu_mul(gate, up, h);
  else
    gelu_tanh_mul(gate, up, h);
  quantize(h, q, 0.0f);
}

void dequantize(const QuantizedActivation& q, const TensorView& out) {
  const int64_t m = q.rows, k = q.cols, groups = (k + kFp8Block - 1) / kFp8Block;
  const uint8_t* codes = q.codes.ptr<uint8_t>();
  const float* s = q.scales.ptr<float>();
  float* o = out.ptr<float>();
  parallel_for(0, m, [&](int64_t r) {
    for (int64_t c = 0; c < k; ++c) {
      float sc;
      switch (q.act) {
        case ActScaling::token:
          sc = s[r];
          break;
        case ActScaling::group:
          sc = s[r * groups + c / kFp8Block];
          break;
        default:
          sc = s[0];
          break;
      }
      o[r * k + c] = e4m3_to_f32(codes[r * k + c]) * sc;
    }
  });
}

}  // namespace fp8rl::ops::cpu
