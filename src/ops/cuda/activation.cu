// Gated MLP activations: act(gate) * up with act = SiLU (Llama, Qwen, Mistral) or GELU-tanh
// (Gemma), plain or fused with the FP8 quantization of the product for the down projection.
// The formulas are the CPU reference's (ops/cpu/activation.cpp) in fp32, SiLU with the SFU's
// exp and reciprocal.
//
// The plain op is flat over rows * cols (for_chunk_pairs: kFlatUnroll chunks of 8 values of
// gate and up in flight per thread, 16-byte loads and stores). The fused op reads gate and up
// once: the row's products wait for their scale in shared memory (gated_quant_staged_kernel,
// rows of 520..16384 values), other rows in registers (a row kernel of row_quant.cuh).
#include "ops/cuda/row_quant.cuh"

namespace fp8rl::cuda {

namespace {

template <int ACT>
__device__ __forceinline__ float activate(float x) {
  if constexpr (ACT == 0) {
    // SiLU on the SFU (ex2 and rcp approximations, ~1e-6 relative for |x| < 20; the CPU's
    // expf and IEEE division would cost ~20 instructions a value, more than the fused kernel's
    // memory time): far below the bf16 rounding of the plain op's output, and a rounding flip
    // of the fused op's e4m3 codes only within ~1e-6 of a midpoint (kFp8FusedFlips).
    // Saturates correctly: exp(-x) = inf gives x * 0.
    return __fdividef(x, 1.0f + __expf(-x));
  } else {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  }
}

// act(gate) * up of one chunk from raw bf16 bits.
template <int ACT>
__device__ __forceinline__ void gated_chunk(const uint4& g, const uint4& u, float (&v)[8]) {
  float up[8];
  unpack(g, v);
  unpack(u, up);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = activate<ACT>(v[i]) * up[i];
}

// Flat over n = rows * cols elements. out may alias gate or up (each chunk is read, then
// written, by one thread). amax (if set) gets max |out| of the bf16 outputs.
template <int ACT, bool VEC>
__global__ void __launch_bounds__(256)
    gated_kernel(const bf16* gate, const bf16* up, int64_t n, bf16* out, float* amax) {
  __shared__ float shm[256 / kWarp];
  float mx = 0.0f;
  for_chunk_pairs<VEC>(gate, up, n, [&](int64_t j, const uint4& rg, const uint4& ru) {
    float v[8];
    gated_chunk<ACT>(rg, ru, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = round_bf16(v[i]);
    mx = fmaxf(mx, chunk_amax(v));  // zeros past n
    store_chunk<VEC>(out, j, n, v);
  });
  if (amax != nullptr) {
    mx = block_max(mx, shm);
    if (threadIdx.x == 0) atomic_max_nonneg(amax, mx);
  }
}

template <int ACT, int NCH, bool WARP, bool MULTI, bool VEC>
__global__ void __launch_bounds__(kMaxRowThreads)
    gated_quant_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up, int64_t rows,
                       int64_t cols, QuantOut q) {
  __shared__ float shm[kWarp];
  const RowThreads<WARP> g;
  if (!quantized_data_row(g, rows, cols, q)) return;
  const bf16* gr = gate + g.row * cols;
  const bf16* ur = up + g.row * cols;
  float v[NCH][8];
  const int nseg = MULTI ? g.template segments<NCH>(cols) : 1;
  quantize_row<NCH, VEC>(g, nseg, cols, q, shm, v, [&](int s, float(&vv)[NCH][8]) {
    uint4 rg[NCH], ru[NCH];
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const int64_t j = g.template col<NCH>(s, k);
      rg[k] = ru[k] = make_uint4(0, 0, 0, 0);  // act(0) * 0 = 0 past the row
      if (j < cols) {
        rg[k] = load_raw<VEC>(gr, j, cols);
        ru[k] = load_raw<VEC>(ur, j, cols);
      }
    }
#pragma unroll
    for (int k = 0; k < NCH; ++k) gated_chunk<ACT>(rg[k], ru[k], vv[k]);
  });
}

// act(gate) * up -> FP8 with the row's fp32 products staged in shared memory rather than
// registers: a block holds one row (12288 values: 48 KB) and needs few registers, so four
// blocks share an SM and one block's loads overlap another's SiLU and quantization. (Holding
// the row in registers, as gated_quant_kernel does, takes ~100 registers a thread and leaves
// the SM with two blocks that alternate between waiting for memory and computing.) Token
// scaling waits for the row's amax; 1x128 groups are 16 consecutive chunks, held by a
// half-warp in the second pass (the block's chunk stride, 256, is a multiple of 16), so their
// amax is a 4-step shuffle. The stage is [8][chunks]: element i of chunk c at i * chunks + c,
// so that consecutive threads touch consecutive banks. Needs cols % 8 == 0 and 16-byte aligned
// rows.
constexpr int kStagedThreads = 256;
constexpr int kStagedUnroll = 3;           // chunk loads of gate and up in flight per thread
constexpr int64_t kStagedMaxCols = 16384;  // 64 KB of stage: three blocks per SM

template <int ACT>
__global__ void __launch_bounds__(kStagedThreads, 3)
    gated_quant_staged_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up,
                              int64_t rows, int64_t cols, QuantOut q) {
  extern __shared__ float stage[];  // [8][chunks]
  __shared__ float shm[kStagedThreads / kWarp];
  const RowThreads<false> g;
  if (!quantized_data_row(g, rows, cols, q)) return;
  const int chunks = int(cols / kChunk);
  const bf16* gr = gate + g.row * cols;
  const bf16* ur = up + g.row * cols;
  float a = 0.0f;
  for (int c0 = g.lane; c0 < chunks; c0 += kStagedUnroll * g.n) {
    uint4 rg[kStagedUnroll], ru[kStagedUnroll];
#pragma unroll
    for (int u = 0; u < kStagedUnroll; ++u) {
      const int c = c0 + u * g.n;
      if (c < chunks) {
        rg[u] = load_raw<true>(gr, int64_t(c) * kChunk, cols);
        ru[u] = load_raw<true>(ur, int64_t(c) * kChunk, cols);
      }
    }
#pragma unroll
    for (int u = 0; u < kStagedUnroll; ++u) {
      const int c = c0 + u * g.n;
      if (c < chunks) {
        float v[8];
        gated_chunk<ACT>(rg[u], ru[u], v);
        a = fmaxf(a, chunk_amax(v));
#pragma unroll
        for (int i = 0; i < 8; ++i) stage[i * chunks + c] = v[i];
      }
    }
  }
  // The reduction's barrier also makes every thread's stage writes visible (group scaling
  // needs only that).
  a = g.max(a, shm);
  uint8_t* codes = q.codes + g.row * cols;
  bf16* plain = q.plain != nullptr ? q.plain + g.row * cols : nullptr;
  if (!q.group) {
    const float row_scale = fp8_scale(a);
    const Fp8Divisor row_div = fp8_divisor(row_scale);
    for (int c = g.lane; c < chunks; c += g.n) {
      float v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = stage[i * chunks + c];
      store_codes<true>(codes, int64_t(c) * kChunk, cols, v, row_div);
      if (plain != nullptr) store_chunk<true>(plain, int64_t(c) * kChunk, cols, v);
    }
    if (g.lane == 0) q.scales[g.row] = row_scale;
    return;
  }
  // Whole half-warps per iteration (the group shuffles): chunks past the row count as zeros.
  for (int c0 = 0; c0 < chunks; c0 += g.n) {
    const int c = c0 + g.lane;
    float v[8] = {};
    if (c < chunks)
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = stage[i * chunks + c];
    float ga = chunk_amax(v);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) ga = fmaxf(ga, __shfl_xor_sync(0xffffffffu, ga, o));
    const float scale = fp8_scale(ga);
    if (c < chunks) {
      store_codes<true>(codes, int64_t(c) * kChunk, cols, v, fp8_divisor(scale));
      if (plain != nullptr) store_chunk<true>(plain, int64_t(c) * kChunk, cols, v);
      if (c % 16 == 0) q.scales[int64_t(c / 16) * q.padded_rows + g.row] = scale;
    }
  }
}

}  // namespace

cudaError_t gated_init() {
  const int bytes = int(kStagedMaxCols * sizeof(float));
  cudaError_t e = cudaFuncSetAttribute(gated_quant_staged_kernel<0>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(gated_quant_staged_kernel<1>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  return e;
}

void launch_gated(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int act, bf16* out,
                  float* amax, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const bool vec = n % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(out);
  const unsigned grid = grid_for(n, 256 * kChunk * kFlatUnroll);
  if (act == 0) {
    if (vec)
      gated_kernel<0, true><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
    else
      gated_kernel<0, false><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
  } else {
    if (vec)
      gated_kernel<1, true><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
    else
      gated_kernel<1, false><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
  }
  FP8RL_LAUNCH_CHECK("gated");
}

void launch_gated_quant(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int act,
                        const QuantOut& q, cudaStream_t s) {
  if (q.padded_rows == 0) return;
  const bool vec = cols % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(q.codes) &&
                   (q.plain == nullptr || aligned16(q.plain));
  if (vec && cols > 2 * kWarp * kChunk && cols <= kStagedMaxCols) {
    const size_t bytes = size_t(cols) * sizeof(float);
    const unsigned grid = unsigned(q.padded_rows);
    if (act == 0)
      gated_quant_staged_kernel<0><<<grid, kStagedThreads, bytes, s>>>(gate, up, rows, cols, q);
    else
      gated_quant_staged_kernel<1><<<grid, kStagedThreads, bytes, s>>>(gate, up, rows, cols, q);
    FP8RL_LAUNCH_CHECK("gated_quant_staged");
    return;
  }
  const RowPlan p = plan_rows(q.padded_rows, cols);
  dispatch_rows(p, vec, [&](auto nch, auto warp, auto multi, auto v) {
    constexpr int kNch = decltype(nch)::value;
    constexpr bool kWarpRows = decltype(warp)::value, kMulti = decltype(multi)::value,
                   kVec = decltype(v)::value;
    if (act == 0)
      gated_quant_kernel<0, kNch, kWarpRows, kMulti, kVec>
          <<<p.grid, p.threads, 0, s>>>(gate, up, rows, cols, q);
    else
      gated_quant_kernel<1, kNch, kWarpRows, kMulti, kVec>
          <<<p.grid, p.threads, 0, s>>>(gate, up, rows, cols, q);
  });
  FP8RL_LAUNCH_CHECK("gated_quant");
  // The scalar kernels do not write plain (row_quant.cuh quantize_row); after them, since
  // plain may be gate or up.
  if (!vec && q.plain != nullptr) launch_gated(gate, up, rows, cols, act, q.plain, nullptr, s);
}

}  // namespace fp8rl::cuda
