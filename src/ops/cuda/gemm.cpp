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

void release(cublasLtMatmulDesc_t& op, cublasLtMatrixLayout_t& a, cublasLtMatrixLayout_t& b,
             cublasLtMatrixLayout_t& c) {
  if (op) cublasLtMatmulDescDestroy(op);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (c) cublasLtMatrixLayoutDestroy(c);
  op = nullptr;
  a = b = c = nullptr;
}

}  // namespace

Gemm::Gemm(cublasLtHandle_t lt, void* workspace, size_t workspace_bytes)
    : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) release(p.op, p.a, p.b, p.c);
}

void Gemm::describe(const GemmArgs& g, int64_t m, Plan& p) {
  const bool fp8 = g.mode != GemmScale::none;
  CHECK(!g.f32_operands || (!fp8 && g.y_f32), "GEMM: fp32 operands need mode none and f32 output");
  const cudaDataType_t ab = fp8 ? CUDA_R_8F_E4M3 : g.f32_operands ? CUDA_R_32F : CUDA_R_16BF;
  CHECK(!(g.y_f32 && g.y_f16), "GEMM: f32 or f16 output, not both");
  const cudaDataType_t out = g.y_f32 ? CUDA_R_32F : g.y_f16 ? CUDA_R_16F : CUDA_R_16BF;
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
  CHECK((g.w_ld == 0 && g.x_ld == 0) || g.layout == GemmLayout::xwt,
        "GEMM: row strides are for the xwt layout");
  const int64_t w_ld = g.w_ld > 0 ? g.w_ld : g.k, x_ld = g.x_ld > 0 ? g.x_ld : g.k;
  CHECK(w_ld >= g.k && x_ld >= g.k, "GEMM: row strides {} {} below k = {}", w_ld, x_ld, g.k);
  if (a_t)
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, uint64_t(g.k), uint64_t(g.n), w_ld));
  else
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ab, uint64_t(g.n), uint64_t(g.k), g.n));
  if (b_t)
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, uint64_t(m), uint64_t(g.k), m));
  else
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ab, uint64_t(g.k), uint64_t(m), x_ld));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out, uint64_t(g.n), uint64_t(m), g.n));
}

int Gemm::heuristic(const Plan& p, int aw, int ax, int ay, cublasLtMatmulHeuristicResult_t* res,
                    int want) {
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
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.c, p.c, pref, want, res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  return st == CUBLAS_STATUS_SUCCESS ? found : 0;
}

const cublasLtMatmulAlgo_t* Gemm::invariant_algo(const GemmArgs& g) {
  const Key key{int(g.mode), int(g.layout), g.f32_operands, 0,     g.n, g.k, out_code(g), 16, 16,
                16,          true,          g.w_ld,         g.x_ld};
  auto it = invariant_algos_.find(key);
  if (it == invariant_algos_.end()) {
    Plan probe;
    describe(g, kInvariantM, probe);
    constexpr int kWant = 16;
    cublasLtMatmulHeuristicResult_t res[kWant] = {};
    const int found = heuristic(probe, 16, 16, 16, res, kWant);
    // The best answer without split-K; else the best with split-K switched off, if cuBLASLt
    // accepts that configuration (skinny shapes such as LoRA's x A^T get split-K answers only).
    std::pair<bool, cublasLtMatmulAlgo_t> pick{false, {}};
    for (int pass = 0; pass < 2 && !pick.first; ++pass)
      for (int i = 0; i < found && !pick.first; ++i) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
        cublasLtMatmulAlgo_t algo = res[i].algo;
        int32_t splits = 1;
        size_t written = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                             sizeof(splits), &written);
        if (splits <= 1) {
          if (pass == 0) pick = {true, algo};
          continue;
        }
        if (pass == 0) continue;
        const int32_t one = 1;
        const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one,
                                                 sizeof(one)) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                 &none, sizeof(none)) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulAlgoCheck(lt_, probe.op, probe.a, probe.b, probe.c, probe.c, &algo,
                                    &check) == CUBLAS_STATUS_SUCCESS &&
            check.workspaceSize <= workspace_bytes_)
          pick = {true, algo};
      }
    release(probe.op, probe.a, probe.b, probe.c);
    it = invariant_algos_.emplace(key, pick).first;
  }
  return it->second.first ? &it->second.second : nullptr;
}

Gemm::Plan& Gemm::plan(const GemmArgs& g) {
  const int aw = alignment_of(g.w), ax = alignment_of(g.x), ay = alignment_of(g.y);
  const Key key{int(g.mode), int(g.layout), g.f32_operands, g.m,   g.n, g.k, out_code(g), aw, ax,
                ay,          invariant_,    g.w_ld,         g.x_ld};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan& p = plans_[key];
  describe(g, g.m, p);
  if (invariant_) {
    // One algorithm for every m, checked against this m; operands need the 16 bytes it was
    // chosen for. Without one the shape is unsupported in this mode (callers fall back, run()
    // raises).
    const cublasLtMatmulAlgo_t* algo = invariant_algo(g);
    cublasLtMatmulHeuristicResult_t check{};
    p.ok = algo != nullptr && aw >= 16 && ax >= 16 && ay >= 16 &&
           cublasLtMatmulAlgoCheck(lt_, p.op, p.a, p.b, p.c, p.c, algo, &check) ==
               CUBLAS_STATUS_SUCCESS &&
           check.workspaceSize <= workspace_bytes_;
    if (p.ok) {
      p.algo = *algo;
      p.workspace = check.workspaceSize;
    }
    return p;
  }
  cublasLtMatmulHeuristicResult_t res{};
  // No algorithm (or NOT_SUPPORTED) means this mode/shape is unsupported: callers fall back.
  p.ok = heuristic(p, aw, ax, ay, &res, 1) > 0 && res.state == CUBLAS_STATUS_SUCCESS;
  if (p.ok) {
    p.algo = res.algo;
    p.workspace = res.workspaceSize;
  }
  return p;
}

bool Gemm::supported(const GemmArgs& a) {
  return plan(a).ok;
}

size_t Gemm::workspace_used(const GemmArgs& a) {
  const Plan& p = plan(a);
  CHECK(p.ok, "GEMM: workspace_used of an unsupported shape m={} n={} k={}", a.m, a.n, a.k);
  return p.workspace;
}

void Gemm::run(const GemmArgs& g, cudaStream_t stream) {
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) {  // an empty sum (cuBLASLt takes no k = 0)
    if (!g.accumulate)
      CUDA_CHECK(cudaMemsetAsync(g.y, 0, size_t(g.m * g.n) * (g.y_f32 ? 4 : 2), stream));
    return;
  }
  Plan& p = plan(g);
  CHECK(p.ok, "cuBLASLt has no algorithm{} for GEMM mode {} m={} n={} k={}",
        invariant_ ? " without split-K for 16-byte aligned operands (batch-invariant mode)" : "",
        int(g.mode), g.m, g.n, g.k);
  if (g.mode != GemmScale::none) {
    set_desc(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.w_scale));
    set_desc(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.x_scale));
  }
  const float alpha = g.alpha, beta = g.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(lt_, p.op, &alpha, g.w, p.a, g.x, p.b, &beta, g.y, p.c, g.y, p.c,
                              &p.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace fp8rl::cuda
