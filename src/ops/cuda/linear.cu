// The weight-streaming FP8 GEMM of few rows (launch_linear_streaming, kernels.h).
//
// At a decode step of a GRPO rollout (4-64 sequences) a linear is a pass over its weight: 16
// rows of W give 16 x K bytes and at most 64 x 16 x K multiply-adds, so the time is the
// weight's bytes over the memory bandwidth if enough of them are in flight. cuBLASLt's FP8
// kernels tile 64-128 rows of the output and keep too few bytes in flight at M = 8. Here a
// warp owns 16 weight rows and a slice of K: each thread streams 16 contiguous bytes of two
// rows per 64-byte chunk (evict-first loads, 4 or 8 chunks in flight), the matching 16 bytes
// of each token's codes, and feeds them to mma.sync m16n8k32 e4m3 with the weight as A (rows)
// and the tokens as B (columns), so a token tile is 8 rows.
//
// The loads are 16-byte vectors, not the fragment layout's 4-byte words: mma's K index is
// permuted the same way in A and B (thread t's 16 bytes of a 64-byte chunk hold fragment
// columns t*4..t*4+3 and 16+t*4..16+t*4+3 of two successive mma's), and a sum over K does not
// depend on the order of its terms' positions, only on the summation order of the products,
// which the tensor core fixes per fragment.
//
// The warps of a block split K; their fp32 partial sums meet in shared memory in warp order
// (deterministic: a row's result is independent of M and of the other rows), then the
// epilogue applies the scales (s_x[m] s_w[n], or the per-tensor ones), the bias, and an
// optional LoRA up-projection sum, and rounds once to bf16 as the CPU reference rounds.
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

namespace fp8rl::cuda {

namespace {

constexpr int kStreamWarps = 8;  // warps of a block, all along K
constexpr int kChunk = 64;       // bytes of K a warp takes per step (4 threads x 16 bytes)

__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
  __trap();  // the host never launches this kernel below sm_89 (streaming_supported)
#endif
}

__device__ __forceinline__ uint4 load_stream(const uint8_t* p) {
  return __ldcs(reinterpret_cast<const uint4*>(p));  // read once: evict first
}
__device__ __forceinline__ uint4 load_cached(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));  // every block reads the tokens' codes
}

// The segment of a grouped launch that output tile `tile` belongs to.
__device__ __forceinline__ int segment_of(const StreamingArgs& a, int tile) {
  int s = 0;
  while (s + 1 < a.num_segments && tile >= a.seg[s + 1].first_tile) ++s;
  return s;
}

// MT token tiles of 8 rows: M <= 8 MT. U chunks of each weight row in flight per thread.
template <int MT, int U>
__global__ void __launch_bounds__(kStreamWarps* kWarp)
    linear_streaming_kernel(const StreamingArgs a) {
  constexpr int kUnroll = U;
  __shared__ float partial[kStreamWarps][16][8 * MT];  // [warp][weight row][token]
  // The adapter's operands of this tile, B [16, r] and xa [8 MT, r] as floats (r <= 64): loaded
  // into registers before the weight's first loads, so they travel beside them, and stored to
  // shared memory after the K loop. B's rows are r + 1 floats apart: the epilogue's threads
  // read 16 rows at one j, which would otherwise share a bank.
  extern __shared__ float lora[];
  const int tile = blockIdx.x;
  const StreamingSegment& sg = a.seg[segment_of(a, tile)];
  const int64_t n0 = int64_t(tile - sg.first_tile) * 16;
  const int rank = sg.lora_b != nullptr ? sg.lora_rank : 0;
  const int ldb = rank + 1;
  float* lora_b = lora;              // [16][ldb]
  float* lora_xa = lora + 16 * ldb;  // [8 MT][rank]
  constexpr int kLoraPerThread = 16 * 64 / (kStreamWarps * kWarp);
  bf16 pre_b[kLoraPerThread], pre_x[kLoraPerThread];
#pragma unroll
  for (int q = 0; q < kLoraPerThread; ++q) {
    const int i = int(threadIdx.x) + q * kStreamWarps * kWarp;
    if (i < 16 * rank) pre_b[q] = sg.lora_b[(n0 + i / rank) * rank + i % rank];
    if (i < a.m * rank) pre_x[q] = sg.lora_xa[int64_t(i / rank) * sg.lora_ld + i % rank];
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t k = a.k;
  const uint8_t* w_lo = sg.w + (n0 + g) * k;  // weight rows g and g + 8 of the tile
  const uint8_t* w_hi = w_lo + 8 * k;
  float acc[MT][4] = {};
  // U chunks of both rows and of each token tile, all loads issued before the first mma.
  // Chunks past K (the last step's, when K is not a multiple of the step) load zeros.
  const auto step = [&](int64_t k0, bool full) {
    uint4 lo[kUnroll], hi[kUnroll], xs[kUnroll][MT];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k0 + u * kChunk + t * 16;
      const bool in = full || kk < k;
      lo[u] = in ? load_stream(w_lo + kk) : make_uint4(0, 0, 0, 0);
      hi[u] = in ? load_stream(w_hi + kk) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int m = mt * 8 + g;
        xs[u][mt] = in && m < a.m ? load_cached(a.x + int64_t(m) * k + kk) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint4 x = xs[u][mt];
        mma_e4m3(acc[mt], lo[u].x, hi[u].x, lo[u].y, hi[u].y, x.x, x.y);
        mma_e4m3(acc[mt], lo[u].z, hi[u].z, lo[u].w, hi[u].w, x.z, x.w);
      }
    }
  };
  const int64_t span = int64_t(kChunk) * kUnroll, stride = int64_t(kStreamWarps) * span;
  int64_t k0 = int64_t(warp) * span;
  for (; k0 + span <= k; k0 += stride) step(k0, true);
  if (k0 < k) step(k0, false);
#pragma unroll
  for (int q = 0; q < kLoraPerThread; ++q) {
    const int i = int(threadIdx.x) + q * kStreamWarps * kWarp;
    if (i < 16 * rank) lora_b[(i / rank) * ldb + i % rank] = __bfloat162float(pre_b[q]);
    if (i < a.m * rank) lora_xa[i] = __bfloat162float(pre_x[q]);
  }
  // C fragment: rows g and g + 8 of the tile, tokens mt * 8 + 2 t and + 1.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    partial[warp][g][mt * 8 + 2 * t] = acc[mt][0];
    partial[warp][g][mt * 8 + 2 * t + 1] = acc[mt][1];
    partial[warp][g + 8][mt * 8 + 2 * t] = acc[mt][2];
    partial[warp][g + 8][mt * 8 + 2 * t + 1] = acc[mt][3];
  }
  __syncthreads();
  // Output (token m, row r): consecutive threads take consecutive rows of one token, so a
  // token's 16 outputs are one 32-byte store.
  for (int o = threadIdx.x; o < 16 * 8 * MT; o += blockDim.x) {
    const int r = o % 16, m = o / 16;
    if (m >= a.m) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kStreamWarps; ++w) sum += partial[w][r][m];
    const int64_t n = n0 + r;
    const float xs = a.x_scale[a.x_scale_per_row ? m : 0];
    const float ws = sg.w_scale[sg.w_scale_per_row ? n : 0];
    float v = sum * (xs * ws);
    if (sg.bias != nullptr) v += sg.bias[n];
    if (rank > 0) {  // + scale * sum_j xa[m, j] B[n, j]
      float l = 0.0f;
      for (int j = 0; j < rank; ++j) l += lora_xa[m * rank + j] * lora_b[r * ldb + j];
      v += sg.lora_scale * l;
    }
    sg.y[int64_t(m) * sg.ldy + n] = __float2bfloat16_rn(v);
  }
}

// LoRA's up projection of a group (launch_lora_expand): a thread per output column holds its
// row of B in registers (R / 8 16-byte loads, all in flight together) and adds its dot with
// each of the block's kExpandRows rows of xa, which sit in shared memory.
constexpr int kExpandColumns = 128;
constexpr int kExpandRows = 16;

template <int R>
__global__ void __launch_bounds__(kExpandColumns) lora_expand_kernel(const LoraExpandArgs a) {
  __shared__ float xs[kExpandRows][R];
  int s = 0;
  while (s + 1 < a.num_segments && int(blockIdx.x) >= a.seg[s + 1].first_tile) ++s;
  const LoraExpandSegment& sg = a.seg[s];
  const int64_t n = int64_t(int(blockIdx.x) - sg.first_tile) * kExpandColumns + threadIdx.x;
  const int m0 = int(blockIdx.y) * kExpandRows;
  const int rows = min(kExpandRows, a.m - m0);
  float b[R];
  if (n < sg.n) {
    uint4 raw[R / 8];
#pragma unroll
    for (int c = 0; c < R / 8; ++c) raw[c] = reinterpret_cast<const uint4*>(sg.b + n * R)[c];
#pragma unroll
    for (int c = 0; c < R / 8; ++c) {
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw[c]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(h[i]);
        b[c * 8 + 2 * i] = f.x;
        b[c * 8 + 2 * i + 1] = f.y;
      }
    }
  }
  for (int i = threadIdx.x; i < rows * R; i += blockDim.x)
    xs[i / R][i % R] = __bfloat162float(sg.xa[int64_t(m0 + i / R) * sg.ld + i % R]);
  __syncthreads();
  if (n >= sg.n) return;
  for (int r = 0; r < rows; ++r) {
    float l = 0.0f;
#pragma unroll
    for (int j = 0; j < R; ++j) l += xs[r][j] * b[j];
    bf16* y = sg.y + int64_t(m0 + r) * sg.ldy + n;
    *y = __float2bfloat16_rn(__bfloat162float(*y) + sg.scale * l);
  }
}

}  // namespace

void launch_linear_streaming(const StreamingArgs& a, cudaStream_t s) {
  const StreamingSegment& last = a.seg[a.num_segments - 1];
  const int tiles = last.first_tile + int(last.n / 16);
  const dim3 grid{unsigned(tiles)}, block{unsigned(kStreamWarps * kWarp)};
  static_assert(kStreamingMaxRows == 16, "token tiles of 8 rows: one or two");
  // A grid of few tiles (o_proj, down_proj: 256 at N = 4,096) leaves the SMs with few warps:
  // each then keeps twice the bytes in flight.
  const bool deep = tiles < 3 * a.multiprocessors;
  int rank = 0;
  for (int i = 0; i < a.num_segments; ++i)
    if (a.seg[i].lora_b != nullptr) rank = max(rank, a.seg[i].lora_rank);
  const size_t shm =
      rank == 0 ? 0 : size_t(16 * (rank + 1) + 8 * ((a.m + 7) / 8) * rank) * sizeof(float);
  if (a.m <= 8 && deep)
    linear_streaming_kernel<1, 8><<<grid, block, shm, s>>>(a);
  else if (a.m <= 8)
    linear_streaming_kernel<1, 4><<<grid, block, shm, s>>>(a);
  else if (deep)
    linear_streaming_kernel<2, 8><<<grid, block, shm, s>>>(a);
  else
    linear_streaming_kernel<2, 4><<<grid, block, shm, s>>>(a);
  FP8RL_LAUNCH_CHECK("linear_streaming");
}

bool lora_expand_supported(int rank) {
  return rank == 8 || rank == 16 || rank == 32 || rank == 64;
}

void launch_lora_expand(const LoraExpandArgs& a, cudaStream_t s) {
  int tiles = 0;
  for (int i = 0; i < a.num_segments; ++i)
    tiles = a.seg[i].first_tile + int(ceil_div(a.seg[i].n, kExpandColumns));
  const dim3 grid{unsigned(tiles), unsigned(ceil_div(a.m, kExpandRows))};
  switch (a.seg[0].rank) {
    case 8:
      lora_expand_kernel<8><<<grid, kExpandColumns, 0, s>>>(a);
      break;
    case 16:
      lora_expand_kernel<16><<<grid, kExpandColumns, 0, s>>>(a);
      break;
    case 32:
      lora_expand_kernel<32><<<grid, kExpandColumns, 0, s>>>(a);
      break;
    default:
      lora_expand_kernel<64><<<grid, kExpandColumns, 0, s>>>(a);
      break;
  }
  FP8RL_LAUNCH_CHECK("lora_expand");
}

}  // namespace fp8rl::cuda
