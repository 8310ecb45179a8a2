// The linear layer on the CPU: the dequantized fp32 activation and, block by block, the
// dequantized fp32 weight, through one batch-invariant GEMM (gemm.h).
//
// This is the FP8 recipe's dequantized semantics taken literally: x_hat = xq * sx and
// w_hat = wq * sw are each one exact-product rounding away from the fp32 values, and the sum
// over K is an fp32 fma chain. Unquantized bf16/f16 weights are widened to fp32 the same way.
//
// Rounding::bf16 mirrors ops/cuda/linear.cpp: unquantized weights are the bf16 copies
// Model::to_device uploads; where CUDA has no native FP8 GEMM for the pair (fp8_gemm_native,
// and weight-only FP8) it dequantizes the weight, and the activation, to bf16 first; the
// result (+ bias, added in fp32) is rounded to bf16 once, unless it is an Output::f32.
#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/gemm.h"
#include "quant/fp8.h"

namespace fp8rl::ops::cpu {

namespace {

// Whether CUDA runs this weight on bf16 operands: an unquantized weight (bf16 on the device),
// a weight-only FP8 one, or an FP8 pair without a native GEMM (both dequantized to bf16).
bool bf16_operands(const LinearWeight& w) {
  return !w.is_fp8() || w.act == ActScaling::none || !fp8_gemm_native(w, w.act);
}

// Rows [n0, n1) of the fp32 weight w_hat: FP8 codes times their scales, or widened bf16/f16;
// rounded to bf16 where `r` says so.
void dequantize_rows(const LinearWeight& w, int64_t n0, int64_t n1, float* dst, Rounding r) {
  const int64_t k = w.in_features();
  if (w.is_fp8()) {
    dequantize_weight_rows(w.weight, w.scheme, w.scales, n0, n1, dst);
  } else {
    const size_t es = dtype_size(w.weight.dtype);
    convert(static_cast<const char*>(w.weight.data) + size_t(n0 * k) * es, w.weight.dtype, dst,
            DType::f32, size_t((n1 - n0) * k));
    if (w.weight.dtype == DType::bf16) return;  // already bf16 values
  }
  if (r == Rounding::bf16)
    for (int64_t i = 0; i < (n1 - n0) * k; ++i) dst[i] = round_to_bf16(dst[i]);
}

// out[M,N] = xf[M,K] w_hat^T (+ b) for an fp32 (or dequantized) input. `operands`: round w_hat
// to bf16; `result`: round the output to bf16.
void linear_f32(Arena& scratch, const float* xf, int64_t m, const LinearWeight& w,
                const TensorView& out, Rounding operands, Rounding result) {
  const int64_t k = w.in_features(), n = w.out_features();
  gemm_batch_invariant(
      scratch, xf, m, k, n,
      [&](int64_t n0, int64_t n1, float* dst) { dequantize_rows(w, n0, n1, dst, operands); },
      out.ptr<float>());
  float* o = out.ptr<float>();
  if (!w.bias.empty()) {
    parallel_for(0, m, [&](int64_t r) {
      for (int64_t j = 0; j < n; ++j)
        o[r * n + j] += load_as_f32(w.bias.data, w.bias.dtype, size_t(j));
    });
  }
  if (result == Rounding::bf16)
    parallel_for(0, m, [&](int64_t r) {
      for (int64_t j = r * n; j < (r + 1) * n; ++j) o[j] = round_to_bf16(o[j]);
    });
}

}  // namespace

void linear(Arena& scratch, const TensorView& x, const LinearWeight& w, const TensorView& out,
            Output kind, Rounding r) {
  const int64_t m = x.dim(0), k = x.dim(1);
  if (m == 0) return;
  ArenaScope scope(scratch);
  const float* xf = x.ptr<float>();
  const Rounding operands = bf16_operands(w) ? r : Rounding::none;
  if (w.act != ActScaling::none) {
    // x_hat[M,K] = dequantize(quantize(x)) with the activation scaling of the weight.
    QuantizedActivation q;
    q.act = w.act;
    q.rows = q.padded_rows = m;
    q.cols = k;
    q.codes = scratch.alloc({m, k}, DType::f8e4m3);
    q.scales = scratch.alloc(act_scale_shape(w.act, m, k), DType::f32);
    quantize(x, q, w.input_scale);
    TensorView x_hat = scratch.alloc({m, k}, DType::f32);
    dequantize(q, x_hat, operands);
    xf = x_hat.ptr<float>();
  }
  linear_f32(scratch, xf, m, w, out, operands, kind == Output::f32 ? Rounding::none : r);
}

void linear_accumulate(Arena& scratch, const TensorView& x, const LinearWeight& w, float alpha,
                       const TensorView& out, Rounding r) {
  if (x.dim(0) == 0) return;
  ArenaScope scope(scratch);
  const TensorView y = scratch.alloc(out.shape, DType::f32);
  linear(scratch, x, w, y, Output::f32, r);
  add(out, y, alpha, out, r);
}

void linear(Arena& scratch, const QuantizedActivation& x, const LinearWeight& w,
            const TensorView& out, Output kind, Rounding r) {
  if (x.rows == 0) return;
  ArenaScope scope(scratch);
  const Rounding operands = bf16_operands(w) ? r : Rounding::none;
  TensorView x_hat = scratch.alloc({x.rows, x.cols}, DType::f32);
  dequantize(x, x_hat, operands);
  linear_f32(scratch, x_hat.ptr<float>(), x.rows, w, out, operands,
             kind == Output::f32 ? Rounding::none : r);
}

}  // namespace fp8rl::ops::cpu
