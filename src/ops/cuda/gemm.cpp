#include "ops/cuda/gemm.h"

#include "ops/cuda/backend.h"

namespace fp8rl::cuda {

namespace {

// Largest power of two up to 256 that divides the address (256 for null: a probe).
int alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  if (v == 0) return 256;
  int a = 1;
  while (a < 256 && (v & uintptr_t(a)) == 0) a <<= 1;
  return a;
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

}  // namespace

Gemm::Gemm(cublasLtHandle_t lt, void* workspace, size_t workspace_bytes)
    : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) {
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  }
}

Gemm::Plan& Gemm::plan(const GemmArgs& g) {
  const int aw = alignment_of(g.w), ax = alignment_of(g.x), ay = alignment_of(g.y);
  const Key key{int(g.mode), int(g.layout), g.f32_operands, g.m, g.n, g.k, g.y_f32, aw, ax, ay};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& p = plans_[key];

  const bool fp8 = g.mode != GemmScale::none;
  CHECK(!g.f32_operands || (!fp8 && g.y_f32), "GEMM: fp32 operands need mode none and f32 output");
  const cudaDataType_t ab = fp8 ? CUDA_R_8F_E4M3 : g.f32_operands ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t out = g.y_f32 ? CUDA_R_32F : CUDA_R_16BF;
  const bool a_t = g.layout == GemmLayout::xwt, b_t = g.layout == GemmLayout::xtw;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(p.op, CUBLASLT_MATMUL_DESC_TRANSA, a_t ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(p.op, CUBLASLT_MATMUL_DESC_TRANSB, b_t ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (fp8) {
    set_desc(p.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, int8_t(0));
    int32_t am = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, bm = am;
    if (g.mode == GemmScale::outer) am = bm = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (g.mode == GemmScale::block) {
      am = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      bm = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    }
    set_desc(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, am);
    set_desc(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, bm);
    // The heuristic may look at the scale pointers; any aligned device address does for it.
    set_desc(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(workspace_));
    set_desc(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(workspace_));
  }
  // The stored (row-major) operands read as column-major: rows of the layout = ld.
  if (a_t)
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, uint64_t(g.k), uint64_t(g.n), g.k));
  else
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, uint64_t(g.n), uint64_t(g.k), g.n));
  if (b_t)
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, uint64_t(g.m), uint64_t(g.k), g.m));
  else
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, uint64_t(g.k), uint64_t(g.m), g.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out, uint64_t(g.n), uint64_t(g.m), g.n));

  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  const uint32_t align_a = uint32_t(aw), align_b = uint32_t(ax), align_c = uint32_t(ay);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                       sizeof(align_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                       sizeof(align_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                       sizeof(align_c));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                       sizeof(align_c));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // No algorithm (or NOT_SUPPORTED) means this mode/shape is unsupported: callers fall back.
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS;
  if (p.ok) p.algo = res.algo;
  return p;
}

bool Gemm::supported(const GemmArgs& a) {
  return plan(a).ok;
}

void Gemm::run(const GemmArgs& g, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {  // an empty sum (cuBLASLt takes no k = 0)
    if (!g.accumulate)
      CUDA_CHECK(cudaMemsetAsync(g.y, 0, size_t(g.m * g.n) * (g.y_f32 ? 4 : 2), stream));
    return;
  }
  Plan& p = plan(g);
  CHECK(p.ok, "cuBLASLt has no algorithm for GEMM mode {} m={} n={} k={}", int(g.mode), g.m, g.n,
        g.k);
  if (g.mode != GemmScale::none) {
    set_desc(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.w_scale));
    set_desc(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.x_scale));
  }
  const float alpha = g.alpha, beta = g.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(lt_, p.op, &alpha, g.w, p.a, g.x, p.b, &beta, g.y, p.c, g.y, p.c,
                              &p.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace fp8rl::cuda
