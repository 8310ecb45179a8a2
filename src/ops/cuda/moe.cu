// Mixture-of-experts kernels (moe_launch.h): the router's top-k, the permutation of the
// (token, slot) pairs by expert, the experts' input rows (gathered, FP8-quantized), the
// grouped GEMM over all experts and the weighted, ordered combine.
//
// The grouped GEMM: a block computes a 64 x 64 output tile of one expert's permuted rows.
// Its grid is fixed by T k and E (rows / 64 + min(E, rows) row tiles: every expert adds at
// most one partial tile), and each block finds its expert and rows in the device's tile
// prefix (MoePermutation::tile_first); blocks past the tiles used exit. Operands go through
// shared memory by cp.async (two stages of 128 K bytes), then ldmatrix into mma.sync:
// m16n8k16 bf16 for unquantized experts, m16n8k32 e4m3 on the FP8 codes of both operands for
// FP8 experts. Both take the same registers of the same bytes (a 16 x 32-byte A fragment, an
// 8 x 32-byte B fragment), so one kernel body serves both. An FP8 stage is one 128-wide K
// block: its fp32 partial sums are scaled by s_x s_w of that block (block scales, group
// scaling) or of the row (row and tensor scales, token and tensor scaling) and added to the
// accumulator, the dense FP8 recipe's y = sum_k (xq sx)(wq sw) in fp32.
#include "ops/cuda/common.cuh"
#include "ops/cuda/moe_launch.h"

namespace fp8rl::cuda {

namespace {

// ---- shared-memory movement and the tensor-core steps

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill, the source is not read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint8_t* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();  // FP8 experts need sm_89 or later (moe.cpp refuses them before)
#endif
}

// ---- routing

// (value, index): the larger probability, the lower index on ties; index -1 loses.
__device__ __forceinline__ bool beats(float v, int i, float bv, int bi) {
  return i >= 0 && (bi < 0 || v > bv || (v == bv && i < bi));
}

// One warp per token: p = softmax(logits) in fp32 (in shared memory), the top-k by k rounds
// of an argmax over the row, the replayed ids' probabilities, renormalization and the bf16
// rounding of the weights by lane 0 in slot order, as the CPU reference does them.
__global__ void __launch_bounds__(kWarp) moe_route_kernel(const MoeRouteArgs a) {
  extern __shared__ float prob[];  // [e]
  const int64_t i = blockIdx.x;
  const int lane = threadIdx.x;
  const int e = int(a.e), k = int(a.k);
  const bf16* logits = a.logits + i * a.e;
  float m = -INFINITY;
  for (int j = lane; j < e; j += kWarp) {
    prob[j] = __bfloat162float(logits[j]);
    m = fmaxf(m, prob[j]);
  }
  m = warp_max(m);
  float sum = 0.0f;
  for (int j = lane; j < e; j += kWarp) {
    prob[j] = expf(prob[j] - m);
    sum += prob[j];
  }
  sum = warp_sum(sum);
  for (int j = lane; j < e; j += kWarp) prob[j] = __fdiv_rn(prob[j], sum);
  __syncwarp();
  int32_t* ids = a.experts + i * a.k;
  float* w = a.weights + i * a.k;
  const bool replayed = a.replay && ids[0] >= 0;
  if (replayed && lane == 0)
    for (int s = 0; s < k; ++s) {
      const int x = ids[s];
      // Ids are checked where they come from the host; a bad one weighs nothing here.
      w[s] = x >= 0 && x < e ? prob[x] : 0.0f;
    }
  __syncwarp();
  int32_t* own = replayed ? (a.chosen != nullptr ? a.chosen + i * a.k : nullptr) : ids;
  if (own != nullptr)
    for (int s = 0; s < k; ++s) {
      float bv = 0.0f;
      int bi = -1;
      for (int j = lane; j < e; j += kWarp) {
        const float v = prob[j];
        if (!(v < 0.0f) && beats(v, j, bv, bi)) bv = v, bi = j;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (beats(ov, oi, bv, bi)) bv = ov, bi = oi;
      }
      if (lane == 0) {
        if (!replayed) w[s] = bv;
        own[s] = bi;
        if (bi >= 0) prob[bi] = -1.0f;  // chosen: out of the next rounds
      }
      __syncwarp();
    }
  if (lane != 0) return;
  if (a.replay && !replayed && a.chosen != nullptr)
    for (int s = 0; s < k; ++s) a.chosen[i * a.k + s] = ids[s];
  if (a.normalize) {
    float total = 0.0f;
    for (int s = 0; s < k; ++s) total += w[s];
    for (int s = 0; s < k; ++s) w[s] = __fdiv_rn(w[s], total);
  }
  for (int s = 0; s < k; ++s) w[s] = round_bf16(w[s]);
}

// ---- the permutation

// Pairs per expert (a shared-memory histogram), then the prefix sums of rows and of row
// tiles by one thread (E is at most a few hundred). Pairs with an id outside [0, e) get no row.
__global__ void __launch_bounds__(1024)
    moe_count_kernel(const int32_t* ids, int64_t pairs, int e, const MoePermutation p) {
  extern __shared__ int count[];  // [e]
  for (int x = threadIdx.x; x < e; x += blockDim.x) count[x] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int x = ids[i];
    if (x >= 0 && x < e)
      atomicAdd(&count[x], 1);
    else
      p.row_of_pair[i] = -1;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  int rows = 0, tiles = 0;
  for (int x = 0; x < e; ++x) {
    p.offsets[x] = rows;
    p.tile_first[x] = tiles;
    rows += count[x];
    tiles += (count[x] + kMoeTileRows - 1) / kMoeTileRows;
  }
  p.offsets[e] = rows;
  p.tile_first[e] = tiles;
}

// A warp per expert walks the pairs 32 at a time: a ballot of those routed to it gives each
// its row, in pair order (so the permutation, and everything after it, is deterministic).
constexpr int kPlaceWarps = 4;
__global__ void __launch_bounds__(kPlaceWarps* kWarp)
    moe_place_kernel(const int32_t* ids, int64_t pairs, int e, const MoePermutation p) {
  const int x = blockIdx.x * kPlaceWarps + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (x >= e) return;
  int base = p.offsets[x];
  for (int64_t c = 0; c < pairs; c += kWarp) {
    const int64_t i = c + lane;
    const bool mine = i < pairs && ids[i] == x;
    const unsigned hits = __ballot_sync(0xffffffffu, mine);
    if (mine) {
      const int r = base + __popc(hits & ((1u << lane) - 1u));
      p.pair_of_row[r] = int32_t(i);
      p.row_of_pair[i] = r;
      p.expert_of_row[r] = x;
    }
    base += __popc(hits);
  }
}

// ---- the experts' input rows

constexpr int kRowThreads = 128;  // one 1x128 group per pass of the block

__device__ __forceinline__ const bf16* input_row(const MoeInputArgs& a, const MoePermutation& p,
                                                 int64_t r) {
  const int64_t src = a.k > 0 ? p.pair_of_row[r] / a.k : r;
  return a.src + src * a.cols;
}

__device__ __forceinline__ float row_amax(const bf16* x, int64_t cols, float* red) {
  float m = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += kRowThreads) m = fmaxf(m, fabsf(load_f32(x, c)));
  return block_max(m, red);
}

__global__ void __launch_bounds__(kRowThreads)
    moe_input_kernel(const MoeInputArgs a, const MoePermutation p) {
  __shared__ float red[kRowThreads / kWarp];
  const int64_t r = blockIdx.x;
  if (r >= p.offsets[a.e]) return;
  const bf16* x = input_row(a, p, r);
  if (a.mode == MoeInput::plain) {
    for (int64_t c = int64_t(threadIdx.x) * 8; c < a.cols; c += kRowThreads * 8)
      *reinterpret_cast<uint4*>(a.out + r * a.cols + c) = *reinterpret_cast<const uint4*>(x + c);
    return;
  }
  uint8_t* codes = a.codes + r * a.cols;
  if (a.mode == MoeInput::group) {
    const int64_t groups = (a.cols + 127) / 128;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c = g * 128 + threadIdx.x;
      const float v = c < a.cols ? load_f32(x, c) : 0.0f;
      const float scale = fp8_scale(block_max(fabsf(v), red));
      if (c < a.cols) codes[c] = fp8_code(v, fp8_divisor(scale));
      if (threadIdx.x == 0) a.scales[r * groups + g] = scale;
    }
    return;
  }
  const float amax =
      a.mode == MoeInput::token ? row_amax(x, a.cols, red) : a.expert_amax[p.expert_of_row[r]];
  const float scale = fp8_scale(amax);
  const Fp8Divisor d = fp8_divisor(scale);
  for (int64_t c = threadIdx.x; c < a.cols; c += kRowThreads)
    codes[c] = fp8_code(load_f32(x, c), d);
  if (threadIdx.x == 0) a.scales[r] = scale;
}

__global__ void __launch_bounds__(kRowThreads)
    moe_amax_kernel(const MoeInputArgs a, const MoePermutation p) {
  __shared__ float red[kRowThreads / kWarp];
  const int64_t r = blockIdx.x;
  if (r >= p.offsets[a.e]) return;
  const float amax = row_amax(input_row(a, p, r), a.cols, red);
  if (threadIdx.x == 0) atomic_max_nonneg(a.expert_amax + p.expert_of_row[r], amax);
}

// ---- the grouped GEMM

constexpr int kGemmThreads = 128;           // 4 warps, 2 x 2 over the tile
constexpr int kTileN = 64;                  // output columns of a block
constexpr int kStageBytes = 128;            // K bytes per stage (one FP8 scale block)
constexpr int kLdBytes = kStageBytes + 16;  // padded rows: ldmatrix without bank conflicts
constexpr int kChunks = kStageBytes / 16;   // 16-byte copies per row and stage
constexpr int kCopies = kMoeTileRows * kChunks / kGemmThreads;  // per thread, per operand
static_assert(kMoeTileRows == kTileN, "the copy loop moves equal tiles of both operands");
static_assert(kGemmThreads == kMoeTileRows + kTileN, "a thread per row and per column scale");

// s_x of row r (of the permuted rows) for K block kb.
__device__ __forceinline__ float x_scale(const MoeGemmArgs& a, int64_t r, int64_t kb) {
  return a.x_group ? a.x_scales[r * ((a.k + 127) / 128) + kb] : a.x_scales[r];
}
// s_w of expert x's output column c for K block kb.
__device__ __forceinline__ float w_scale(const float* s, const MoeGemmArgs& a, int64_t x, int64_t c,
                                         int64_t kb) {
  switch (a.scale) {
    case MoeWeightScale::tensor:
      return s[x];
    case MoeWeightScale::row:
      return s[x * a.n + c];
    default: {
      const int64_t nb = (a.n + 127) / 128, kbs = (a.k + 127) / 128;
      return s[(x * nb + c / 128) * kbs + kb];
    }
  }
}

template <bool FP8>
__global__ void __launch_bounds__(kGemmThreads)
    moe_gemm_kernel(const MoeGemmArgs a, const MoePermutation p) {
  __shared__ __align__(16) uint8_t xs[2][kMoeTileRows * kLdBytes];
  __shared__ __align__(16) uint8_t ws[2][kTileN * kLdBytes];
  __shared__ float x_scales[kMoeTileRows], w_scales[kTileN];  // FP8: the stage's scales
  const int e = int(a.e);
  const int tile = int(blockIdx.y);
  if (tile >= p.tile_first[e]) return;
  // The expert whose tiles hold this one: the last x with tile_first[x] <= tile.
  int lo = 0, hi = e;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (p.tile_first[mid] <= tile)
      lo = mid;
    else
      hi = mid;
  }
  const int64_t ex = lo;
  const int64_t row0 = p.offsets[ex] + int64_t(tile - p.tile_first[ex]) * kMoeTileRows;
  const int64_t rows = min(int64_t(kMoeTileRows), int64_t(p.offsets[ex + 1]) - row0);
  const int64_t tiles_n = (a.n + kTileN - 1) / kTileN;
  const int proj = int(blockIdx.x / tiles_n);
  const int64_t n0 = int64_t(blockIdx.x % tiles_n) * kTileN;
  const int64_t cols = min(int64_t(kTileN), a.n - n0);
  constexpr int kElem = FP8 ? 1 : 2;
  const int64_t kbytes = a.k * kElem;
  const uint8_t* xg = static_cast<const uint8_t*>(a.x) + row0 * kbytes;
  // The projection's pointers by selection: an indexed kernel parameter would go to local memory.
  const void* w_proj = proj == 0 ? a.w[0] : a.w[1];
  const float* ws_proj = proj == 0 ? a.w_scales[0] : a.w_scales[1];
  bf16* y = proj == 0 ? a.y[0] : a.y[1];
  const uint8_t* wg = static_cast<const uint8_t*>(w_proj) + (ex * a.n + n0) * kbytes;
  const int stages = int((kbytes + kStageBytes - 1) / kStageBytes);
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int wm = warp / 2, wn = warp % 2;  // the warp's 32 x 32 quarter of the tile
  const int g = lane / 4, tig = lane % 4;

  auto load = [&](int stage, int buf) {
    const int64_t k0 = int64_t(stage) * kStageBytes;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) {
      const int c = tid + i * kGemmThreads;
      const int r = c / kChunks, col = (c % kChunks) * 16;
      const bool in_k = k0 + col < kbytes;
      const bool xok = r < rows && in_k, wok = r < cols && in_k;
      cp_async16(&xs[buf][r * kLdBytes + col], xok ? xg + r * kbytes + k0 + col : xg, xok);
      cp_async16(&ws[buf][r * kLdBytes + col], wok ? wg + r * kbytes + k0 + col : wg, wok);
    }
    cp_async_commit();
  };

  float acc[2][4][4] = {};
  [[maybe_unused]] float part[2][4][4] = {};  // FP8: the stage's sums before its scales
  load(0, 0);
  for (int st = 0; st < stages; ++st) {
    if (st + 1 < stages) {
      load(st + 1, (st + 1) & 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    if constexpr (FP8) {  // the stage's scales, one thread per row and per column
      if (tid < kMoeTileRows) {
        x_scales[tid] = tid < rows ? x_scale(a, row0 + tid, st) : 0.0f;
      } else {
        const int64_t col = n0 + tid - kMoeTileRows;
        w_scales[tid - kMoeTileRows] = col < a.n ? w_scale(ws_proj, a, ex, col, st) : 0.0f;
      }
    }
    __syncthreads();
    const uint8_t* xb = xs[st & 1];
    const uint8_t* wb = ws[st & 1];
#pragma unroll
    for (int ks = 0; ks < kStageBytes / 32; ++ks) {
      uint32_t af[2][4], bf[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        ldmatrix_x4(af[i],
                    xb + (wm * 32 + i * 16 + lane % 16) * kLdBytes + ks * 32 + (lane / 16) * 16);
#pragma unroll
      for (int jj = 0; jj < 2; ++jj)
        ldmatrix_x4(bf[jj], wb + (wn * 32 + jj * 16 + lane % 8 + (lane / 16) * 8) * kLdBytes +
                                ks * 32 + ((lane / 8) % 2) * 16);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t b0 = bf[j / 2][(j % 2) * 2], b1 = bf[j / 2][(j % 2) * 2 + 1];
          if constexpr (FP8)
            mma_e4m3(part[i][j], af[i], b0, b1);
          else
            mma_bf16(acc[i][j], af[i], b0, b1);
        }
    }
    if constexpr (FP8) {
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            const float sx = x_scales[wm * 32 + i * 16 + g + (v / 2) * 8];
            const float sw = w_scales[wn * 32 + j * 8 + 2 * tig + v % 2];
            acc[i][j][v] = __fmaf_rn(part[i][j][v], sx * sw, acc[i][j][v]);
            part[i][j][v] = 0.0f;
          }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = wm * 32 + i * 16 + g + h * 8;
      if (r >= rows) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t col = n0 + wn * 32 + j * 8 + 2 * tig;
        if (col >= a.n) continue;  // n is even: the pair's second column is in range too
        __nv_bfloat162* dst = reinterpret_cast<__nv_bfloat162*>(y + (row0 + r) * a.n + col);
        float lo = acc[i][j][2 * h], hi = acc[i][j][2 * h + 1];
        if (a.accumulate) {
          const float2 old = __bfloat1622float2(*dst);
          lo = __fmaf_rn(a.alpha, lo, old.x);
          hi = __fmaf_rn(a.alpha, hi, old.y);
        }
        *dst = __floats2bfloat162_rn(lo, hi);
      }
    }
}

// ---- the combine

// A block per token: its experts sorted by id (insertion sort of k ids), then each column
// summed over them in that order, with the CPU reference's roundings.
__global__ void __launch_bounds__(kRowThreads)
    moe_combine_kernel(const bf16* y, int64_t h, const float* weights, const int32_t* experts,
                       const int32_t* row_of_pair, int64_t k, bf16* out) {
  __shared__ int32_t rows[kMoeMaxTopK];
  __shared__ float wt[kMoeMaxTopK];
  __shared__ int32_t ids[kMoeMaxTopK];
  __shared__ int used;
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    int n = 0;
    for (int64_t s = 0; s < k; ++s) {
      const int32_t r = row_of_pair[t * k + s];
      if (r < 0) continue;  // an id outside [0, E): no expert
      const int32_t x = experts[t * k + s];
      int j = n++;
      for (; j > 0 && ids[j - 1] > x; --j) {
        ids[j] = ids[j - 1];
        rows[j] = rows[j - 1];
        wt[j] = wt[j - 1];
      }
      ids[j] = x;
      rows[j] = r;
      wt[j] = weights[t * k + s];
    }
    used = n;
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < h; c += kRowThreads) {
    float acc = 0.0f;
    for (int j = 0; j < used; ++j)
      acc = round_bf16(acc + round_bf16(__fmul_rn(load_f32(y, rows[j] * h + c), wt[j])));
    out[t * h + c] = __float2bfloat16_rn(acc);
  }
}

}  // namespace

void launch_moe_route(const MoeRouteArgs& a, cudaStream_t s) {
  moe_route_kernel<<<unsigned(a.t), kWarp, size_t(a.e) * sizeof(float), s>>>(a);
  FP8RL_LAUNCH_CHECK("moe_route");
}

void launch_moe_permute(const int32_t* experts, int64_t pairs, int64_t e, const MoePermutation& p,
                        cudaStream_t s) {
  moe_count_kernel<<<1, 1024, size_t(e) * sizeof(int), s>>>(experts, pairs, int(e), p);
  FP8RL_LAUNCH_CHECK("moe_count");
  moe_place_kernel<<<unsigned(ceil_div(e, kPlaceWarps)), kPlaceWarps * kWarp, 0, s>>>(
      experts, pairs, int(e), p);
  FP8RL_LAUNCH_CHECK("moe_place");
}

void launch_moe_input(const MoeInputArgs& a, const MoePermutation& p, cudaStream_t s) {
  moe_input_kernel<<<unsigned(a.rows), kRowThreads, 0, s>>>(a, p);
  FP8RL_LAUNCH_CHECK("moe_input");
}

void launch_moe_amax(const MoeInputArgs& a, const MoePermutation& p, cudaStream_t s) {
  moe_amax_kernel<<<unsigned(a.rows), kRowThreads, 0, s>>>(a, p);
  FP8RL_LAUNCH_CHECK("moe_amax");
}

void launch_moe_gemm(const MoeGemmArgs& a, const MoePermutation& p, cudaStream_t s) {
  const int64_t row_tiles = ceil_div(a.rows, kMoeTileRows) + (a.e < a.rows ? a.e : a.rows);
  const dim3 grid(unsigned(a.projections * ceil_div(a.n, kTileN)), unsigned(row_tiles));
  if (a.fp8)
    moe_gemm_kernel<true><<<grid, kGemmThreads, 0, s>>>(a, p);
  else
    moe_gemm_kernel<false><<<grid, kGemmThreads, 0, s>>>(a, p);
  FP8RL_LAUNCH_CHECK("moe_gemm");
}

void launch_moe_combine(const bf16* y, int64_t h, const float* weights, const int32_t* experts,
                        const int32_t* row_of_pair, int64_t t, int64_t k, bf16* out,
                        cudaStream_t s) {
  moe_combine_kernel<<<unsigned(t), kRowThreads, 0, s>>>(y, h, weights, experts, row_of_pair, k,
                                                         out);
  FP8RL_LAUNCH_CHECK("moe_combine");
}

}  // namespace fp8rl::cuda
