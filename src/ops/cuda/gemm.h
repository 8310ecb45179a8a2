// GEMMs through cuBLASLt for the linear layers: Y[m,n] = X[m,k] W[n,k]^T, row-major, mapped
// onto cuBLASLt's column-major TN form: A = W (k x n, ld k, op T), B = X (k x m,
// ld k, op N), D = Y (n x m, ld n). bf16 operands, or e4m3 operands with one of the FP8 scaling
// modes; fp32 accumulation (FP8 fast accumulation off), bf16 or f32 output.
//
// The backward needs two more layouts of the same row-major operands (GemmLayout), an alpha,
// accumulation into Y (beta = 1) and fp32 operands (LoRA's fp32 master weights and gradients,
// CUBLAS_COMPUTE_32F: true fp32, no TF32).
//
// One plan (descriptors + the heuristic's algorithm) per shape, created on first use and
// cached; a fixed workspace, so calls are CUDA-graph capturable once planned.
//
// Batch-invariant mode (GRPO's on_policy_exact): the heuristic picks its algorithm per m, and
// a split-K algorithm sums a row's products in another order than an unsplit one, so a row's
// result would depend on how many rows share the call. In this mode every m of a (mode,
// layout, n, k) shape runs the one algorithm the heuristic picks at kInvariantM without
// split-K, so a token's row is bit-identical in a decode step and in a training pass.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace fp8rl::cuda {

enum class GemmScale {
  none,    // bf16 x bf16
  scalar,  // e4m3, SCALAR_32F both: w_scale[1], x_scale[1]
  outer,   // e4m3, OUTER_VEC_32F both: w_scale[n], x_scale[m]
  block,   // e4m3, W BLK128x128_32F [ceil(n/128), roundup(ceil(k/128),4)], X VEC128_32F
           // [ceil(k/128), m] token-fastest; m and n multiples of 4
};

// Which operand is transposed, in row-major terms (col-major cuBLASLt: D (n x m, ld n) =
// op(A) (n x k) op(B) (k x m)):
enum class GemmLayout {
  xwt,  // Y[m,n] = X[m,k] W[n,k]^T (the forward): A = W (k x n, ld k, op T), B = X (k x m, op N)
  xw,   // Y[m,n] = X[m,k] W[k,n] (an input gradient): A = W (n x k, ld n, op N), B = X (op N)
  xtw,  // Y[m,n] = X[k,m]^T W[k,n] (a weight gradient): A = W (op N), B = X (m x k, ld m, op T)
};

struct GemmArgs {
  GemmScale mode = GemmScale::none;
  GemmLayout layout = GemmLayout::xwt;
  bool f32_operands = false;  // X and W f32 (mode none, y_f32): an fp32 SGEMM
  float alpha = 1.0f;         // Y = alpha * (X W) (+ Y when accumulate)
  bool accumulate = false;
  int64_t m = 0, n = 0, k = 0;
  const void* w = nullptr;
  const void* x = nullptr;
  void* y = nullptr;
  bool y_f32 = false;
  bool y_f16 = false;  // fp16 output
  const float* w_scale = nullptr;
  const float* x_scale = nullptr;
  // Row strides (elements) of W and X in the xwt layout when they exceed k: the GEMM then reads
  // a column slice of wider matrices (one K slice of a split-K). 0: k.
  int64_t w_ld = 0, x_ld = 0;
};

class Gemm {
 public:
  Gemm(cublasLtHandle_t lt, void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Whether cuBLASLt has an algorithm for this mode and shape (pointers may be null: the
  // answer assumes 256-byte aligned operands).
  bool supported(const GemmArgs& a);
  // Workspace bytes the planned algorithm uses (0: it never touches the workspace, so calls
  // of such plans may run concurrently on different streams). a must be supported.
  size_t workspace_used(const GemmArgs& a);
  // Runs it on `stream`; raises when unsupported. k = 0 writes zeros (or leaves an accumulated
  // Y as it is).
  void run(const GemmArgs& a, cudaStream_t stream);

  void set_batch_invariant(bool on) { invariant_ = on; }
  bool batch_invariant() const { return invariant_; }
  static constexpr int64_t kInvariantM = 1024;

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
    bool ok = false;
  };
  // mode, layout, f32 operands, m, n, k, output type (out_code), alignment of w, x, y (bytes, up to
  // 256), batch-invariant, w_ld, x_ld
  using Key = std::tuple<int, int, bool, int64_t, int64_t, int64_t, int, int, int, int, bool,
                         int64_t, int64_t>;
  static int out_code(const GemmArgs& a) { return a.y_f32 ? 1 : a.y_f16 ? 2 : 0; }
  Plan& plan(const GemmArgs& a);
  // Descriptors and layouts of a's shape with m rows.
  void describe(const GemmArgs& a, int64_t m, Plan& p);
  // Up to `want` heuristic answers for p's shape with these operand alignments.
  int heuristic(const Plan& p, int aw, int ax, int ay, cublasLtMatmulHeuristicResult_t* res,
                int want);
  // The batch-invariant algorithm of a's shape (any m): found once, at kInvariantM.
  const cublasLtMatmulAlgo_t* invariant_algo(const GemmArgs& a);

  cublasLtHandle_t lt_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, Plan> plans_;
  bool invariant_ = false;
  std::map<Key, std::pair<bool, cublasLtMatmulAlgo_t>> invariant_algos_;  // key with m = 0
};

}  // namespace fp8rl::cuda
