// gemm_sweep M N K [--fp8 | --bf16] [--top T] [--splitk S] [--f32-out | --f16-out]
// [--halves-on-streams] [--scales outer|vec128|block|scalar] [--fast-accum]: times
// every cuBLASLt algorithm configuration it can build for one linear-layer GEMM (Y[M,N] = X[M,K]
// W[N,K]^T, the project's TN mapping: A = W, B = X), with FP8 e4m3 operands and OUTER_VEC_32F
// scales (the FP8-row recipe) or bf16, and prints the heuristic's first choice beside the fastest
// configurations. Evidence for how far cuBLASLt can take a decode step's GEMMs (M = a few hundred
// tokens), where the heuristic's pick leaves most SMs idle. An experiment, built on demand:
//
//   cmake --build build-cuda --target gemm_sweep && build-cuda/tools/experiments/gemm_sweep 256
//   4096 4096
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace {

void cuda_ok(cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gemm_sweep:%d: %s: %s\n", line, what, cudaGetErrorString(e));
  std::exit(1);
}
void lt_ok(cublasStatus_t s, const char* what, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "gemm_sweep:%d: %s: cuBLAS status %d\n", line, what, int(s));
  std::exit(1);
}
#define CUDA_OK(e) cuda_ok((e), #e, __LINE__)
#define LT_OK(e) lt_ok((e), #e, __LINE__)

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, bool fp8) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float v = (float(h & 0xffff) / 65535.0f - 0.5f);
    if (fp8) {
      p[i] = __nv_fp8_e4m3(v * 8.0f).__x;
    } else if (i % 2 == 0) {
      const __nv_bfloat16 b = __float2bfloat16(v * 0.1f);
      std::memcpy(p + i, &b, 2);
    }
  }
}

__global__ void fill_floats(float* p, int64_t n, float v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

struct Config {
  int id = 0;
  uint32_t tile = 0, stages = 0, splitk = 1, reduction = 0;
  int32_t cluster = 0;
  float us = 0;
  size_t workspace = 0;
};

template <typename T>
std::vector<T> cap_array(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t a) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, a, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return {};
  std::vector<T> v(bytes / sizeof(T));
  size_t got = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, a, v.data(), bytes, &got) != CUBLAS_STATUS_SUCCESS)
    return {};
  return v;
}

// One scalar attribute of an algorithm: a capability (Cap) or its configuration (Config).
template <typename T, typename Attr>
T attribute(const cublasLtMatmulAlgo_t& algo, Attr a) {
  T v{};
  size_t got = 0;
  if constexpr (std::is_same_v<Attr, cublasLtMatmulAlgoCapAttributes_t>)
    cublasLtMatmulAlgoCapGetAttribute(&algo, a, &v, sizeof(v), &got);
  else
    cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &v, sizeof(v), &got);
  return v;
}

template <typename T>
void set_config(cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t a, T v) {
  cublasLtMatmulAlgoConfigSetAttribute(&algo, a, &v, sizeof(v));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: gemm_sweep M N K [--fp8 | --bf16] [--top T] [--splitk S] [--f32-out] "
                 "[--halves-on-streams]\n");
    return 2;
  }
  const int64_t m = std::atoll(argv[1]), n = std::atoll(argv[2]), k = std::atoll(argv[3]);
  bool fp8 = true;
  int top = 12;
  // --splitk S: K cut into S slices run as one strided batch (S partial outputs, summed by the
  // caller), the split-K that OUTER_VEC_32F's single configuration lacks; needs --f32-out for
  // exact partials.
  int splits = 1;
  bool f32_out = false;
  bool f16_out = false;  // fp16 output (a raw SCALAR product for a consumer that scales it)
  bool halves_on_streams = false;  // with --splitk 2: time the halves as two GEMMs on 2 streams
  // --scales outer|vec128|block|scalar: the FP8 scaling mode. Row scales are expressible as
  // VEC128 x VEC128 too (each row's scale repeated over its K/128 blocks), which reaches
  // cuBLASLt's blockwise kernels; block = the 128x128 weight grid; scalar = one scale each.
  std::string scales = "outer";
  bool fast_accum = false;  // FP8 without cuBLASLt's fp32 promotion every 128 K
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bf16")
      fp8 = false;
    else if (a == "--fp8")
      fp8 = true;
    else if (a == "--top" && i + 1 < argc)
      top = std::atoi(argv[++i]);
    else if (a == "--splitk" && i + 1 < argc)
      splits = std::atoi(argv[++i]);
    else if (a == "--f32-out")
      f32_out = true;
    else if (a == "--f16-out")
      f16_out = true;
    else if (a == "--halves-on-streams")
      halves_on_streams = true;
    else if (a == "--scales" && i + 1 < argc)
      scales = argv[++i];
    else if (a == "--fast-accum")
      fast_accum = true;
  }
  if (scales != "outer" && scales != "vec128" && scales != "block" && scales != "scalar") {
    std::fprintf(stderr, "gemm_sweep: --scales must be outer, vec128, block or scalar\n");
    return 2;
  }
  if (splits < 1 || k % splits != 0) {
    std::fprintf(stderr, "gemm_sweep: --splitk must divide K\n");
    return 2;
  }
  const size_t esize = fp8 ? 1 : 2, ws_bytes = size_t(32) << 20;
  void *w, *x, *y, *ws;
  float *ws_scale, *xs_scale;
  CUDA_OK(cudaMalloc(&w, size_t(n * k) * esize));
  CUDA_OK(cudaMalloc(&x, size_t(m * k) * esize));
  CUDA_OK(cudaMalloc(&y, size_t(m * n) * size_t(splits) * (f32_out ? 4 : 2)));
  CUDA_OK(cudaMalloc(&ws, ws_bytes));
  // Room for the largest scale layout: VEC128 [rows x ceil(K/128)] (BLK128x128 is smaller).
  const int64_t kblocks = (k + 127) / 128 + 4;
  CUDA_OK(cudaMalloc(&ws_scale, size_t(n * kblocks) * 4));
  CUDA_OK(cudaMalloc(&xs_scale, size_t(m * kblocks) * 4));
  fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(w), size_t(n * k) * esize, 1, fp8);
  fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(x), size_t(m * k) * esize, 2, fp8);
  fill_floats<<<64, 256>>>(ws_scale, n * kblocks, 0.01f);
  fill_floats<<<64, 256>>>(xs_scale, m * kblocks, 0.02f);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());

  cublasLtHandle_t lt;
  LT_OK(cublasLtCreate(&lt));
  const cudaDataType_t ab = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF, out = f32_out   ? CUDA_R_32F
                                                                      : f16_out ? CUDA_R_16F
                                                                                : CUDA_R_16BF;
  cublasLtMatmulDesc_t op;
  LT_OK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (fp8) {
    const int8_t fast = fast_accum ? 1 : 0;
    int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, b_mode = a_mode;
    if (scales == "vec128") a_mode = b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if (scales == "block") {
      a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    }
    if (scales == "scalar") a_mode = b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, 1));
    LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, 4));
    LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, 4));
    const void* a_scale = ws_scale;
    const void* b_scale = xs_scale;
    LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                         sizeof(a_scale)));
    LT_OK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                         sizeof(b_scale)));
  }
  cublasLtMatrixLayout_t la, lb, lc;
  const int64_t ks = k / splits;
  LT_OK(cublasLtMatrixLayoutCreate(&la, ab, uint64_t(ks), uint64_t(n), k));
  LT_OK(cublasLtMatrixLayoutCreate(&lb, ab, uint64_t(ks), uint64_t(m), k));
  LT_OK(cublasLtMatrixLayoutCreate(&lc, out, uint64_t(n), uint64_t(m), n));
  if (splits > 1) {
    const int32_t count = splits;
    const int64_t step_ab = ks, step_c = m * n;
    for (cublasLtMatrixLayout_t l : {la, lb, lc})
      LT_OK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                             sizeof(count)));
    for (cublasLtMatrixLayout_t l : {la, lb})
      LT_OK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                             &step_ab, sizeof(step_ab)));
    LT_OK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &step_c,
                                           sizeof(step_c)));
  }

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  cudaEvent_t e0, e1;
  CUDA_OK(cudaEventCreate(&e0));
  CUDA_OK(cudaEventCreate(&e1));
  const float alpha = 1, beta = 0;
  auto time_us = [&](const cublasLtMatmulAlgo_t& algo) -> float {
    auto once = [&] {
      return cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &algo, ws, ws_bytes,
                            stream);
    };
    for (int i = 0; i < 3; ++i)
      if (once() != CUBLAS_STATUS_SUCCESS) return -1;
    constexpr int kIters = 30;
    CUDA_OK(cudaEventRecord(e0, stream));
    for (int i = 0; i < kIters; ++i) once();
    CUDA_OK(cudaEventRecord(e1, stream));
    if (cudaEventSynchronize(e1) != cudaSuccess) return -1;
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1000.0f / kIters;
  };
  auto describe = [](const Config& c) {
    char b[160];
    std::snprintf(b, sizeof(b), "algo %3d tile %3u stages %3u splitK %u reduction %u cluster %d",
                  c.id, c.tile, c.stages, c.splitk, c.reduction, c.cluster);
    return std::string(b);
  };
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const double bytes =
      double(n * k + m * k) * double(esize) + double(m * n) * double(splits) * (f32_out ? 4 : 2);

  // The heuristic's first choice (what the project's Gemm runs).
  cublasLtMatmulPreference_t pref;
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws64 = ws_bytes;
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws64,
                                             sizeof(ws64)));
  cublasLtMatmulHeuristicResult_t heur[16]{};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, heur, &found) !=
      CUBLAS_STATUS_SUCCESS)
    found = 0;
  std::printf(
      "gemm_sweep M=%lld N=%lld K=%lld %s split-K %d (batched) %s out: %.2f GFLOP, %.1f MB moved "
      "at least; %d heuristic answers\n",
      (long long)m, (long long)n, (long long)k,
      fp8 ? ("fp8 e4m3 scales " + scales).c_str() : "bf16", splits,
      f32_out   ? "f32"
      : f16_out ? "f16"
                : "bf16",
      flops * 1e-9, bytes * 1e-6, found);
  for (int i = 0; i < found; ++i) {
    Config c;
    c.id = attribute<int32_t>(heur[i].algo, CUBLASLT_ALGO_CONFIG_ID);
    c.tile = attribute<uint32_t>(heur[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
    c.stages = attribute<uint32_t>(heur[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
    c.splitk = attribute<uint32_t>(heur[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
    c.reduction = attribute<uint32_t>(heur[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
    c.cluster = attribute<int32_t>(heur[i].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
    const float us = time_us(heur[i].algo);
    std::printf("heuristic #%-2d %s: %8.2f us  %7.1f TFLOP/s  %6.2f TB/s\n", i, describe(c).c_str(),
                us, flops / us * 1e-6, bytes / us * 1e-6);
  }

  // Microseconds a call of body, captured 30 times in a CUDA graph and replayed: how the
  // engine's decode steps run GEMMs (a fork and join are graph edges, not event calls).
  auto graph_us = [&](auto&& body) {
    constexpr int kIters = 30;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kIters; ++i) body();
    CUDA_OK(cudaStreamEndCapture(stream, &g));
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    CUDA_OK(cudaGraphLaunch(ge, stream));
    CUDA_OK(cudaEventRecord(e0, stream));
    CUDA_OK(cudaGraphLaunch(ge, stream));
    CUDA_OK(cudaEventRecord(e1, stream));
    CUDA_OK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms * 1000.0f / kIters;
  };
  if (found > 0)  // the pick as the engine runs it
    std::printf("heuristic #0 in a CUDA graph: %.2f us\n", graph_us([&] {
                  LT_OK(cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc,
                                       &heur[0].algo, ws, ws_bytes, stream));
                }));

  if (splits == 2 && halves_on_streams) {
    // The two K halves as two GEMMs (the batched form has no algorithm) on two streams, the
    // way ops/cuda/linear.cpp runs them, against the same two one after the other.
    // Unbatched layouts over `rows` of K (row stride k) and the heuristic's pick for them.
    struct Unbatched {
      cublasLtMatrixLayout_t a, b, c;
      cublasLtMatmulHeuristicResult_t pick{};
    };
    auto unbatched = [&](int64_t rows) {
      Unbatched u;
      LT_OK(cublasLtMatrixLayoutCreate(&u.a, ab, uint64_t(rows), uint64_t(n), k));
      LT_OK(cublasLtMatrixLayoutCreate(&u.b, ab, uint64_t(rows), uint64_t(m), k));
      LT_OK(cublasLtMatrixLayoutCreate(&u.c, out, uint64_t(n), uint64_t(m), n));
      int got = 0;
      LT_OK(cublasLtMatmulAlgoGetHeuristic(lt, op, u.a, u.b, u.c, u.c, pref, 1, &u.pick, &got));
      return u;
    };
    const Unbatched half = unbatched(ks), full = unbatched(k);
    cudaStream_t side;
    cudaEvent_t fork, join;
    CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CUDA_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    const size_t eo = f32_out ? 4 : 2;
    auto halves = [&](bool concurrent) {
      const uint8_t* w8 = static_cast<const uint8_t*>(w);
      const uint8_t* x8 = static_cast<const uint8_t*>(x);
      const size_t step = size_t(ks) * esize;
      uint8_t* y8 = static_cast<uint8_t*>(y);
      cudaStream_t s2 = concurrent ? side : stream;
      if (concurrent) {
        CUDA_OK(cudaEventRecord(fork, stream));
        CUDA_OK(cudaStreamWaitEvent(side, fork, 0));
      }
      LT_OK(cublasLtMatmul(lt, op, &alpha, w8 + step, half.a, x8 + step, half.b, &beta,
                           y8 + size_t(m * n) * eo, half.c, y8 + size_t(m * n) * eo, half.c,
                           &half.pick.algo, nullptr, 0, s2));
      LT_OK(cublasLtMatmul(lt, op, &alpha, w8, half.a, x8, half.b, &beta, y8, half.c, y8, half.c,
                           &half.pick.algo, nullptr, 0, stream));
      if (concurrent) {
        CUDA_OK(cudaEventRecord(join, side));
        CUDA_OK(cudaStreamWaitEvent(stream, join, 0));
      }
    };
    const float whole = graph_us([&] {
      LT_OK(cublasLtMatmul(lt, op, &alpha, w, full.a, x, full.b, &beta, y, full.c, y, full.c,
                           &full.pick.algo, nullptr, 0, stream));
    });
    std::printf(
        "in a CUDA graph: whole %.2f us, halves one after the other %.2f us, on two "
        "streams %.2f us\n",
        whole, graph_us([&] { halves(false); }), graph_us([&] { halves(true); }));
    for (bool conc : {false, true}) {
      for (int i = 0; i < 3; ++i) halves(conc);
      constexpr int kIters = 30;
      CUDA_OK(cudaEventRecord(e0, stream));
      for (int i = 0; i < kIters; ++i) halves(conc);
      CUDA_OK(cudaEventRecord(e1, stream));
      CUDA_OK(cudaEventSynchronize(e1));
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
      std::printf("two K halves %s (workspace %zu): %8.2f us\n",
                  conc ? "on two streams" : "one after the other", half.pick.workspaceSize,
                  ms * 1000.0f / kIters);
    }
  }
  if (top == 0) return 0;  // --top 0: the heuristic's answers only
  // Every configuration the algorithms' capabilities allow (tile x split-K x reduction scheme,
  // stages and cluster shape left to the library).
  int ids[512];
  int nids = 0;
  LT_OK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, ab, ab, out, out, 512, ids,
                                 &nids));
  std::vector<Config> results;
  int checked = 0;
  for (int a = 0; a < nids; ++a) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, ab, ab, out, out, ids[a],
                               &algo) != CUBLAS_STATUS_SUCCESS)
      continue;
    std::vector<uint32_t> tiles = cap_array<uint32_t>(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
    if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    std::vector<uint32_t> stages = cap_array<uint32_t>(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
    stages.insert(stages.begin(), CUBLASLT_MATMUL_STAGES_UNDEFINED);
    const int32_t splitk_ok = attribute<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT);
    const uint32_t reductions = attribute<uint32_t>(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
    for (uint32_t tile : tiles) {
      for (uint32_t splitk : {1u, 2u, 3u, 4u, 6u, 8u}) {
        if (splitk > 1 && !splitk_ok) break;
        for (uint32_t red : {uint32_t(CUBLASLT_REDUCTION_SCHEME_NONE),
                             uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
                             uint32_t(CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE),
                             uint32_t(CUBLASLT_REDUCTION_SCHEME_INPLACE)}) {
          if ((splitk == 1) != (red == CUBLASLT_REDUCTION_SCHEME_NONE)) continue;
          if (red != CUBLASLT_REDUCTION_SCHEME_NONE && !(reductions & red)) continue;
          // The first stage count the library accepts for this tile.
          for (uint32_t st : stages) {
            cublasLtMatmulAlgo_t c = algo;
            set_config(c, CUBLASLT_ALGO_CONFIG_TILE_ID, tile);
            set_config(c, CUBLASLT_ALGO_CONFIG_STAGES_ID, st);
            set_config(c, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splitk);
            set_config(c, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, red);
            cublasLtMatmulHeuristicResult_t r{};
            ++checked;
            if (cublasLtMatmulAlgoCheck(lt, op, la, lb, lc, lc, &c, &r) != CUBLAS_STATUS_SUCCESS ||
                r.workspaceSize > ws_bytes)
              continue;
            Config cf;
            cf.id = ids[a];
            cf.tile = tile;
            cf.stages = st;
            cf.splitk = splitk;
            cf.reduction = red;
            cf.workspace = r.workspaceSize;
            cf.us = time_us(c);
            if (cf.us > 0) results.push_back(cf);
            break;
          }
        }
      }
    }
  }
  std::sort(results.begin(), results.end(),
            [](const Config& p, const Config& q) { return p.us < q.us; });
  std::printf("%d algorithms, %d configurations checked, %zu ran\n", nids, checked, results.size());
  for (size_t i = 0; i < results.size() && int(i) < top; ++i)
    std::printf("fastest #%-2zu %s: %8.2f us  %7.1f TFLOP/s  %6.2f TB/s  workspace %zu\n", i,
                describe(results[i]).c_str(), results[i].us, flops / results[i].us * 1e-6,
                bytes / results[i].us * 1e-6, results[i].workspace);
  return 0;
}
