// The frozen linear's input gradient on CUDA (ops::linear_backward_input): the FP8 path for
// row-scaled FP8 weights and the bf16 reference path for every weight.
#include <algorithm>

#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/fp8_gradient.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/kernels.h"

namespace fp8rl::cuda {

// dX[M,K] (+)= dY[M,N] W_hat[N,K], the frozen weight's input gradient. Two paths:
//
// FP8 (row-scaled FP8 weights, Capabilities::fp8_input_gradient): W_hat = diag(s) Q, so
// dX = (dY diag(s)) Q. dY times the row scales is quantized per token to e4m3 (the recipe's
// activation scaling, torchao's rowwise recipe for the gradient), Q is transposed into arena
// scratch for this call (exact: Hopper's FP8 MMA reads K-major operands only, and the
// reduction runs over N here), and one OUTER_VEC_32F GEMM with the token scales and unit
// weight scales writes the fp32 dX (beta = 1 when accumulating). dY's e4m3 rounding
// (<= 2^-4 relative per value) is its error (tests/tolerances.h kCudaFp8GradientGemm).
//
// Reference (every other weight, or fp8_input_gradient off): W_hat dequantized to bf16 (FP8:
// codes times their scales, as the forward's fallback forms it; bf16 weights as they are)
// into arena scratch for this call, dY rounded to bf16, and one bf16 cuBLASLt GEMM in the xw
// layout with fp32 accumulation and an fp32 output. Both operand roundings are 2^-9
// relative (kCudaBf16OperandGemm).
namespace {

bool fp8_input_gradient(Backend& b, const LinearWeight& w) {
  const int64_t n = w.out_features(), k = w.in_features();
  return b.caps().fp8_input_gradient && b.caps().fp8_outer && w.scheme == Fp8Scheme::row &&
         n % 16 == 0 && k % 16 == 0;
}

// Rows of dY quantized at a time: at most K, so that a chunk's codes and the transposed codes
// take no more scratch than the reference path's bf16 weight (2 N K bytes).
int64_t fp8_gradient_rows(int64_t m, int64_t k) {
  return std::max<int64_t>(1, std::min(m, k));
}

// The FP8 path, its operands in the arena (the caller's scope). False, with nothing written,
// when cuBLASLt has no algorithm for its GEMMs.
bool run_fp8_input_gradient(Backend& b, const TensorView& dy, const LinearWeight& w,
                            const TensorView& dx, bool accumulate) {
  const int64_t m = dy.dim(0), n = w.out_features(), k = w.in_features();
  const int64_t rows = fp8_gradient_rows(m, k);
  TensorView qt = b.arena().alloc({k, n}, DType::f8e4m3);        // [K, N] codes, transposed
  TensorView codes = b.arena().alloc({rows, n}, DType::f8e4m3);  // [rows, N] e4m3(dY diag(s) / a)
  TensorView scales = b.arena().alloc({rows}, DType::f32);       // [rows] a: per-token scales
  TensorView ones = b.arena().alloc({k}, DType::f32);            // [K] unit scales of Q^T's rows
  GemmArgs g;
  g.mode = GemmScale::outer;
  g.n = k;
  g.k = n;
  g.w = qt.data;
  g.x = codes.data;
  g.y_f32 = true;
  g.accumulate = accumulate;
  g.w_scale = static_cast<const float*>(ones.data);
  g.x_scale = static_cast<const float*>(scales.data);
  auto args = [&](int64_t r0, int64_t r1) {
    GemmArgs c = g;
    c.m = r1 - r0;
    c.y = static_cast<float*>(dx.data) + r0 * k;
    return c;
  };
  const int64_t tail = m % rows;  // the last chunk's rows, when fewer
  if (!b.gemm().supported(args(0, rows)) || (tail > 0 && !b.gemm().supported(args(m - tail, m))))
    return false;
  launch_transpose_codes(static_cast<const uint8_t*>(w.weight.data), n, k,
                         static_cast<uint8_t*>(qt.data), b.stream());
  launch_fill_f32(static_cast<float*>(ones.data), k, 1.0f, b.stream());
  const size_t dy_row = size_t(n) * dtype_size(dy.dtype);
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r1 = std::min(m, r0 + rows);
    launch_quantize_scaled_rows(static_cast<const char*>(dy.data) + size_t(r0) * dy_row,
                                dy.dtype == DType::f32, static_cast<const float*>(w.scales.data),
                                r1 - r0, n, static_cast<uint8_t*>(codes.data),
                                static_cast<float*>(scales.data), b.stream());
    b.gemm().run(args(r0, r1), b.stream());
  }
  return true;
}

}  // namespace

size_t linear_backward_input_scratch_bytes(const LinearWeight& w, int64_t m, bool dy_f32) {
  const int64_t n = w.out_features(), k = w.in_features();
  const size_t reference =
      (w.is_fp8() ? arena_aligned(size_t(n * k) * 2) : 0) + (dy_f32 ? arena_aligned(size_t(m * n) * 2) : 0);
  const int64_t rows = fp8_gradient_rows(m, k);
  const size_t fp8 = w.scheme == Fp8Scheme::row
                         ? arena_aligned(size_t(n * k)) + arena_aligned(size_t(rows * n)) +
                               arena_aligned(size_t(rows) * 4) + arena_aligned(size_t(k) * 4)
                         : 0;
  return std::max(reference, fp8);
}

void linear_backward_input(Backend& b, const TensorView& dy, const LinearWeight& w,
                           const TensorView& dx, bool accumulate) {
  CHECK(w.is_fp8() || w.weight.dtype == DType::bf16,
        "CUDA linear_backward_input: unquantized weights must be bf16 on the device, got {}",
        dtype_name(w.weight.dtype));
  const int64_t m = dy.dim(0), n = w.out_features(), k = w.in_features();
  const size_t mark = b.arena().mark();
  if (fp8_input_gradient(b, w) && run_fp8_input_gradient(b, dy, w, dx, accumulate)) {
    b.arena().rewind(mark);
    return;
  }
  b.arena().rewind(mark);
  const void* wd = w.is_fp8() ? dequantized_weight(b, w).data : w.weight.data;  // [N,K] bf16
  const void* dy_bf = bf16_gradient(b, dy);                                     // [M,N] bf16
  GemmArgs g;
  g.layout = GemmLayout::xw;
  g.m = m;
  g.n = k;
  g.k = n;
  g.x = dy_bf;
  g.w = wd;
  g.y = dx.data;
  g.y_f32 = true;
  g.accumulate = accumulate;
  b.gemm().run(g, b.stream());
  b.arena().rewind(mark);
}

}  // namespace fp8rl::cuda
