// The linear layer on the CPU: materialize the dequantized fp32 operands, one OpenBLAS sgemm.
//
// This is the FP8 recipe's dequantized semantics taken literally: x_hat = xq * sx and
// w_hat = wq * sw are each one exact-product rounding away from the fp32 values, and the sum
// over K is an fp32 GEMM. Unquantized bf16/f16 weights are widened to fp32 the same way.
#include <cblas.h>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "quant/fp8.h"

namespace fp8rl::ops::cpu {

namespace {
// x_hat[M,K] = dequantize(quantize(x)) with the activation scaling of the weight.
void fake_quantize_activation(Arena& scratch, const TensorView& x, const LinearWeight& w,
                              const TensorView& x_hat) {
  const int64_t m = x.dim(0), k = x.dim(1);
  TensorView codes = scratch.alloc({m, k}, DType::f8e4m3);
  TensorView scales = scratch.alloc(act_scale_shape(w.act, m, k), DType::f32);
  if (w.act == ActScaling::static_tensor) scales.ptr<float>()[0] = w.input_scale;
  quantize_activation(x, w.act, codes, scales);
  const uint8_t* q = codes.ptr<uint8_t>();
  const float* s = scales.ptr<float>();
  float* out = x_hat.ptr<float>();
  const int64_t groups = (k + kFp8Block - 1) / kFp8Block;
  parallel_for(0, m, [&](int64_t r) {
    for (int64_t c = 0; c < k; ++c) {
      float sc;
      switch (w.act) {
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
      out[r * k + c] = e4m3_to_f32(q[r * k + c]) * sc;
    }
  });
}
}  // namespace

void linear(Arena& scratch, const TensorView& x, const LinearWeight& w, const TensorView& out) {
  const int64_t m = x.dim(0), k = x.dim(1), n = w.out_features();
  ArenaScope scope(scratch);
  const float* wf = nullptr;
  if (w.weight.dtype == DType::f32) {
    wf = w.weight.ptr<float>();
  } else {
    TensorView w_hat = scratch.alloc({n, k}, DType::f32);
    if (w.is_fp8()) {
      dequantize_weight(w.weight, w.scheme, w.scales, w_hat);
    } else {
      parallel_for(0, n, [&](int64_t r) {
        convert(
            static_cast<const char*>(w.weight.data) + size_t(r * k) * dtype_size(w.weight.dtype),
            w.weight.dtype, w_hat.ptr<float>() + r * k, DType::f32, size_t(k));
      });
    }
    wf = w_hat.ptr<float>();
  }
  const float* xf = x.ptr<float>();
  if (w.act != ActScaling::none && m > 0) {
    TensorView x_hat = scratch.alloc({m, k}, DType::f32);
    fake_quantize_activation(scratch, x, w, x_hat);
    xf = x_hat.ptr<float>();
  }
  if (m > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, xf, int(k),
                wf, int(k), 0.0f, out.ptr<float>(), int(n));
  }
  if (!w.bias.empty()) {
    float* o = out.ptr<float>();
    parallel_for(0, m, [&](int64_t r) {
      for (int64_t j = 0; j < n; ++j)
        o[r * n + j] += load_as_f32(w.bias.data, w.bias.dtype, size_t(j));
    });
  }
}

}  // namespace fp8rl::ops::cpu
