// The linear layer on the CPU: materialize the dequantized fp32 operands, one batch-invariant
// GEMM (gemm.h).
//
// This is the FP8 recipe's dequantized semantics taken literally: x_hat = xq * sx and
// w_hat = wq * sw are each one exact-product rounding away from the fp32 values, and the sum
// over K is an fp32 fma chain. Unquantized bf16/f16 weights are widened to fp32 the same way.
#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#include "quant/fp8.h"

namespace fp8rl::ops::cpu {

namespace {

// wt[K,N] = the fp32 value of weight element (n, k), scales applied.
void materialize_transposed_weight(const LinearWeight& w, float* wt) {
  const int64_t n = w.out_features(), k = w.in_features();
  const float* s = w.is_fp8() ? w.scales.ptr<float>() : nullptr;
  const uint8_t* codes = w.weight.ptr<uint8_t>();
  // Parallel over k: each thread writes whole rows of wt.
  parallel_for(0, k, [&](int64_t kk) {
    float* row = wt + kk * n;
    if (w.is_fp8()) {
      for (int64_t r = 0; r < n; ++r)
        row[r] = e4m3_to_f32(codes[r * k + kk]) * weight_scale_at(w.scheme, s, r, kk, k);
    } else {
      for (int64_t r = 0; r < n; ++r)
        row[r] = load_as_f32(w.weight.data, w.weight.dtype, size_t(r * k + kk));
    }
  });
}

// x_hat[M,K] = dequantize(quantize(x)) with the activation scaling of the weight.
void fake_quantize_activation(Arena& scratch, const TensorView& x, const LinearWeight& w,
                              float* x_hat) {
  const int64_t m = x.dim(0), k = x.dim(1);
  TensorView codes = scratch.alloc({m, k}, DType::f8e4m3);
  TensorView scales = scratch.alloc(act_scale_shape(w.act, m, k), DType::f32);
  if (w.act == ActScaling::static_tensor) scales.ptr<float>()[0] = w.input_scale;
  quantize_activation(x, w.act, codes, scales);
  const uint8_t* q = codes.ptr<uint8_t>();
  const float* s = scales.ptr<float>();
  const int64_t groups = (k + kFp8Block - 1) / kFp8Block;
  parallel_for(0, m, [&](int64_t r) {
    for (int64_t c = 0; c < k; ++c) {
      float sc;
      switch (w.act) {
        case ActScaling::token: sc = s[r]; break;
        case ActScaling::group: sc = s[r * groups + c / kFp8Block]; break;
        default: sc = s[0]; break;
      }
      x_hat[r * k + c] = e4m3_to_f32(q[r * k + c]) * sc;
    }
  });
}

}  // namespace

void linear(Arena& scratch, const TensorView& x, const LinearWeight& w, const TensorView& out) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.out_features();
  if (m == 0) return;
  ArenaScope scope(scratch);
  TensorView wt = scratch.alloc({k, n}, DType::f32);
  materialize_transposed_weight(w, wt.ptr<float>());
  const float* xf = x.ptr<float>();
  if (w.act != ActScaling::none) {
    TensorView x_hat = scratch.alloc({m, k}, DType::f32);
    fake_quantize_activation(scratch, x, w, x_hat.ptr<float>());
    xf = x_hat.ptr<float>();
  }
  gemm_batch_invariant(xf, wt.ptr<float>(), out.ptr<float>(), m, n, k);
  if (!w.bias.empty()) {
    float* o = out.ptr<float>();
    parallel_for(0, m, [&](int64_t r) {
      for (int64_t j = 0; j < n; ++j)
        o[r * n + j] += load_as_f32(w.bias.data, w.bias.dtype, size_t(j));
    });
  }
}

}  // namespace fp8rl::ops::cpu
