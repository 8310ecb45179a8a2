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
// epilogue applies the scales (s_x[m] s_w[n], or the per-tensor ones) and the bias and rounds
// to bf16; with an adapter it then adds the up product in fp32 and rounds again: the CPU
// reference's linear then linear_accumulate, and what the trainer's GEMMs compute, so that the
// engine's activations are the trainer's wherever the sums agree (a one-ulp difference in a
// token's largest value moves every FP8 code of the next quantized input).
//
// An adapter's down product xa = x A^T must be complete before any tile's up product; as a
// GEMM of its own it costs a launch (two, split-K and its reduction, on cuBLASLt) per group,
// about as long as the group's base weight at 8 rows. So the launch computes it too, in
// blocks ahead of the weight tiles (StreamingDown), and a tile waits for it only in its
// epilogue, by when it is long written.
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

// StreamingDown::sync: a counter per row tile of A (the slices that have written their
// partials), then the row tiles whose xa is written, then the blocks that have finished.
constexpr int kSyncReady = kStreamingDownMaxRows / 16;
constexpr int kSyncDone = kSyncReady + 1;
static_assert(kSyncDone < kStreamingSyncWords, "StreamingDown::sync too small");
// A warp's K per down-product block: chunks of 32 bf16 (4 threads x 16 bytes).
constexpr int kDownChunks = int(kStreamingDownSlice) / (kStreamWarps * 32);
static_assert(kDownChunks * kStreamWarps * 32 == kStreamingDownSlice, "slice of whole chunks");

// The down-product blocks ahead of the weight tiles: a row tile of A by a K slice each.
__host__ __device__ inline int down_product_blocks(const StreamingArgs& a) {
  return a.down.x == nullptr ? 0
                             : int(ceil_div(a.down.rows, 16) * ceil_div(a.k, kStreamingDownSlice));
}

template <int MT>
using Partials = float[kStreamWarps][16][8 * MT];  // [warp][row of the tile][token]

// The warps' partial sums of the tile's 16 rows x 8 MT tokens (C fragments in acc) into
// `partial`, then their sum in warp order for (token m, row r) = (o / 16, o % 16).
template <int MT>
__device__ __forceinline__ void store_partials(Partials<MT>& partial, const float (&acc)[MT][4]) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    partial[warp][g][mt * 8 + 2 * t] = acc[mt][0];
    partial[warp][g][mt * 8 + 2 * t + 1] = acc[mt][1];
    partial[warp][g + 8][mt * 8 + 2 * t] = acc[mt][2];
    partial[warp][g + 8][mt * 8 + 2 * t + 1] = acc[mt][3];
  }
}
template <int MT>
__device__ __forceinline__ float warp_order_sum(const Partials<MT>& partial, int r, int m) {
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kStreamWarps; ++w) sum += partial[w][r][m];
  return sum;
}

// A down-product block: rows [16 t, 16 t + 16) of the stacked A against K slice `split`, on
// bf16 mma.sync with A as the row operand and the tokens as the columns (the same 16-byte
// loads and K permutation as the FP8 kernel, two k16 products per chunk). Its fp32 partials
// go to StreamingDown::partial; the row tile's last slice to arrive writes xa.
template <int MT>
__device__ __forceinline__ void down_product_block(const StreamingArgs& a, int block,
                                                   Partials<MT>& partial, bool& last) {
  const StreamingDown& d = a.down;
  const int splits = int(ceil_div(a.k, kStreamingDownSlice));
  const int row_tile = block / splits, split = block % splits;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t k = a.k;
  const int lo_row = row_tile * 16 + g, hi_row = lo_row + 8;
  const int64_t k_warp = split * kStreamingDownSlice + warp * kDownChunks * 32 + t * 8;
  const uint8_t* a_lo = reinterpret_cast<const uint8_t*>(d.a + int64_t(lo_row) * k);
  const uint8_t* a_hi = reinterpret_cast<const uint8_t*>(d.a + int64_t(hi_row) * k);
  uint4 lo[kDownChunks], hi[kDownChunks];
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int u = 0; u < kDownChunks; ++u) {
    const int64_t kk = k_warp + u * 32;
    lo[u] = kk < k && lo_row < d.rows ? load_stream(a_lo + kk * 2) : zero;
    hi[u] = kk < k && hi_row < d.rows ? load_stream(a_hi + kk * 2) : zero;
  }
  float acc[MT][4] = {};
#pragma unroll
  for (int u = 0; u < kDownChunks; ++u) {
    const int64_t kk = k_warp + u * 32;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int m = mt * 8 + g;
      const uint4 x = kk < k && m < a.m
                          ? load_cached(reinterpret_cast<const uint8_t*>(d.x + int64_t(m) * k + kk))
                          : zero;
      const uint32_t a0[4] = {lo[u].x, hi[u].x, lo[u].y, hi[u].y};
      const uint32_t a1[4] = {lo[u].z, hi[u].z, lo[u].w, hi[u].w};
      mma_bf16(acc[mt], a0, x.x, x.y);
      mma_bf16(acc[mt], a1, x.z, x.w);
    }
  }
  store_partials<MT>(partial, acc);
  __syncthreads();
  for (int o = threadIdx.x; o < 16 * 8 * MT; o += blockDim.x) {
    const int r = o % 16, m = o / 16, row = row_tile * 16 + r;
    if (m < a.m && row < d.rows)
      d.partial[(int64_t(split) * a.m + m) * d.rows + row] = warp_order_sum<MT>(partial, r, m);
  }
  // Publish the partials, then count this slice in; the last of the row tile sees all of them.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(d.sync + row_tile, 1u) == unsigned(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int o = threadIdx.x; o < 16 * a.m; o += blockDim.x) {
    const int r = o % 16, m = o / 16, row = row_tile * 16 + r;
    if (row >= d.rows) continue;
    float sum = 0.0f;
    for (int sp = 0; sp < splits; ++sp)
      sum += __ldcg(d.partial + (int64_t(sp) * a.m + m) * d.rows + row);
    d.xa[int64_t(m) * d.rows + row] = __float2bfloat16_rn(sum);
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    d.sync[row_tile] = 0;
    atomicAdd(d.sync + kSyncReady, 1u);
  }
}

// Whether every row tile of the launch's down products is written; true orders the caller's
// later loads of xa after that (an acquire at GPU scope, the writers' release being their
// fence before counting in).
__device__ __forceinline__ bool down_products_written(const StreamingDown& d) {
  unsigned ready;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(ready) : "l"(d.sync + kSyncReady));
  return ready >= unsigned(ceil_div(d.rows, 16));
}
// Blocks until every row tile of the launch's down products is written (thread 0 polls, the
// block follows), so that xa may be read.
__device__ __forceinline__ void wait_down_products(const StreamingDown& d) {
  if (threadIdx.x == 0)
    while (!down_products_written(d)) __nanosleep(32);
  __syncthreads();
}

// A weight tile: 16 rows of a segment's weight against every token.
template <int MT, int U>
__device__ __forceinline__ void weight_tile_block(const StreamingArgs& a, int tile,
                                                  Partials<MT>& partial, float* lora) {
  constexpr int kUnroll = U;
  const StreamingSegment& sg = a.seg[segment_of(a, tile)];
  const int64_t n0 = int64_t(tile - sg.first_tile) * 16;
  const int rank = sg.lora_b != nullptr ? sg.lora_rank : 0;
  // The adapter's operands of this tile, B [16, r] and xa [8 MT, r] as floats (r <= 64), in
  // shared memory for the epilogue. B's rows are r + 1 floats apart: the epilogue's threads
  // read 16 rows at one j, which would otherwise share a bank. Both are loaded into registers
  // so that they travel beside the weight's loads: B at once; xa at once when the kernel
  // before wrote it, else (this launch's down-product blocks write it) once the warp's last
  // weight loads are in flight: the check's acquire holds back only the loads after it, and
  // by then the short down products have usually finished. A block that finds them unwritten
  // waits after its K loop.
  const int ldb = rank + 1;
  float* lora_b = lora;              // [16][ldb]
  float* lora_xa = lora + 16 * ldb;  // [8 MT][rank]
  constexpr int kLoraPerThread = 16 * 64 / (kStreamWarps * kWarp);
  static_assert(kLoraPerThread * kStreamWarps * kWarp >= kStreamingMaxRows * 64, "xa in registers");
  bf16 pre_b[kLoraPerThread], pre_x[kLoraPerThread];
#pragma unroll
  for (int q = 0; q < kLoraPerThread; ++q) {
    const int i = int(threadIdx.x) + q * kStreamWarps * kWarp;
    if (i < 16 * rank) pre_b[q] = sg.lora_b[(n0 + i / rank) * rank + i % rank];
  }
  const auto load_xa = [&] {
#pragma unroll
    for (int q = 0; q < kLoraPerThread; ++q) {
      const int i = int(threadIdx.x) + q * kStreamWarps * kWarp;
      if (i < a.m * rank) pre_x[q] = __ldcg(sg.lora_xa + int64_t(i / rank) * sg.lora_ld + i % rank);
    }
  };
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int g = lane / 4, t = lane % 4;
  const int64_t k = a.k;
  const uint8_t* w_lo = sg.w + (n0 + g) * k;  // weight rows g and g + 8 of the tile
  const uint8_t* w_hi = w_lo + 8 * k;
  const int64_t span = int64_t(kChunk) * kUnroll, stride = int64_t(kStreamWarps) * span;
  const bool down = a.down.x != nullptr;
  bool xa_loaded = rank > 0 && !down;
  if (xa_loaded) load_xa();
  float acc[MT][4] = {};
  // U chunks of both rows and of each token tile, all loads issued before the first mma.
  // Chunks past K (the last step's, when K is not a multiple of the step) load zeros.
  const auto step = [&](int64_t k0, bool full, bool last) {
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
    if (last && rank > 0 && !xa_loaded && down_products_written(a.down)) {
      load_xa();
      xa_loaded = true;
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
  int64_t k0 = int64_t(warp) * span;
  for (; k0 + span <= k; k0 += stride) step(k0, true, k0 + stride >= k);
  if (k0 < k) step(k0, false, true);
  // Block-wide (rank and down are uniform): every thread takes part in the barriers.
  if (rank > 0 && down && !__syncthreads_and(xa_loaded)) {
    wait_down_products(a.down);
    if (!xa_loaded) load_xa();
  }
#pragma unroll
  for (int q = 0; q < kLoraPerThread; ++q) {
    const int i = int(threadIdx.x) + q * kStreamWarps * kWarp;
    if (i < 16 * rank) lora_b[(i / rank) * ldb + i % rank] = __bfloat162float(pre_b[q]);
    if (i < a.m * rank) lora_xa[i] = __bfloat162float(pre_x[q]);
  }
  store_partials<MT>(partial, acc);
  __syncthreads();
  // Output (token m, row r): consecutive threads take consecutive rows of one token, so a
  // token's 16 outputs are one 32-byte store.
  for (int o = threadIdx.x; o < 16 * 8 * MT; o += blockDim.x) {
    const int r = o % 16, m = o / 16;
    if (m >= a.m) continue;
    const float sum = warp_order_sum<MT>(partial, r, m);
    const int64_t n = n0 + r;
    const float xs = a.x_scale[a.x_scale_per_row ? m : 0];
    const float ws = sg.w_scale[sg.w_scale_per_row ? n : 0];
    float v = sum * (xs * ws);
    if (sg.bias != nullptr) v += sg.bias[n];
    if (rank > 0) {  // bf16(base) + scale * sum_j xa[m, j] B[n, j], rounded again below
      float l = 0.0f;
      for (int j = 0; j < rank; ++j) l += lora_xa[m * rank + j] * lora_b[r * ldb + j];
      v = __bfloat162float(__float2bfloat16_rn(v)) + sg.lora_scale * l;
    }
    sg.y[int64_t(m) * sg.ldy + n] = __float2bfloat16_rn(v);
  }
}

// MT token tiles of 8 rows: M <= 8 MT. U chunks of each weight row in flight per thread. The
// grid: the down-product blocks (StreamingArgs::down), lowest indices first so that they are
// resident before any weight tile waits for them, then the weight tiles.
template <int MT, int U>
__global__ void __launch_bounds__(kStreamWarps* kWarp)
    linear_streaming_kernel(const StreamingArgs a) {
  __shared__ Partials<MT> partial;
  __shared__ bool last;
  extern __shared__ float lora[];
  const bool down = a.down.x != nullptr;
  const int down_blocks = down_product_blocks(a);
  if (int(blockIdx.x) < down_blocks)
    down_product_block<MT>(a, int(blockIdx.x), partial, last);
  else
    weight_tile_block<MT, U>(a, int(blockIdx.x) - down_blocks, partial, lora);
  if (!down) return;
  // Every block has passed its wait: the last one to finish leaves the counters at zero.
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(a.down.sync + kSyncDone, 1u) == gridDim.x - 1) {
    a.down.sync[kSyncReady] = 0;
    a.down.sync[kSyncDone] = 0;
  }
}

// LoRA's up projection of a group (launch_lora_expand) on the tensor cores: a warp owns 16 rows
// and kMmaExpandColumns columns of one segment's output, R / 16 steps of mma.m16n8k16 over the
// rank (zeros past it where R = 8), its xa and B fragments read straight from global memory
// (B's [n, rank] rows are the mma's column-major operand as they lie). The epilogue writes
// bf16(base + scale * sum) once, so the kernel costs about one pass over the output (the same
// sums on the CUDA cores, B in registers and xa in shared memory, made `bench generate` with
// r 32 at 256 rows 5% slower).
//
// Each thread loads all of its base pairs before the first mma: loaded one before each store,
// every pair waited a full memory latency (a load after a store to an address that may alias
// it cannot be issued earlier), and the gate/up group with its adapter took 85 us at 256 rows
// against 80 (docs/PERFORMANCE.md).
constexpr int kMmaExpandColumns = 64;

template <int R>
__global__ void __launch_bounds__(128) lora_expand_mma_kernel(const LoraExpandArgs a) {
  constexpr int kSteps = (R + 15) / 16, kTiles = kMmaExpandColumns / 8;
  int s = 0;
  while (s + 1 < a.num_segments && int(blockIdx.x) >= a.seg[s + 1].first_tile) ++s;
  const LoraExpandSegment& sg = a.seg[s];
  const int lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int m0 = (int(blockIdx.y) * int(blockDim.x / 32) + int(threadIdx.x) / 32) * 16;
  if (m0 >= a.m) return;
  const int64_t n0 = int64_t(int(blockIdx.x) - sg.first_tile) * kMmaExpandColumns;
  const int r0 = m0 + g, r1 = m0 + g + 8;
  const bf16* base = sg.base != nullptr ? sg.base : sg.y;
  const int64_t ld_base = sg.base != nullptr ? sg.ld_base : sg.ldy;
  // The thread's base pairs (rows r0, r1; columns n0 + 8 j + 2 t, + 1), zeros past the output.
  __nv_bfloat162 y0[kTiles][2];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int64_t n = n0 + j * 8 + 2 * t;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h == 0 ? r0 : r1;
      y0[j][h] = n < sg.n && row < a.m
                     ? *reinterpret_cast<const __nv_bfloat162*>(base + int64_t(row) * ld_base + n)
                     : __floats2bfloat162_rn(0.0f, 0.0f);
    }
  }
  // Two adjacent bf16 of a [rows, ld] matrix as one register; zeros past its rows or the rank.
  auto pair = [](const bf16* p, int64_t ld, int64_t row, int64_t rows, int col) -> uint32_t {
    if (row >= rows || col >= R) return 0u;
    return *reinterpret_cast<const uint32_t*>(p + row * ld + col);
  };
  float acc[kTiles][4] = {};
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const int c0 = kk * 16 + 2 * t, c1 = c0 + 8;
    const uint32_t af[4] = {pair(sg.xa, sg.ld, r0, a.m, c0), pair(sg.xa, sg.ld, r1, a.m, c0),
                            pair(sg.xa, sg.ld, r0, a.m, c1), pair(sg.xa, sg.ld, r1, a.m, c1)};
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int64_t n = n0 + j * 8 + g;
      const uint32_t b0 = pair(sg.b, R, n, sg.n, c0), b1 = pair(sg.b, R, n, sg.n, c1);
      mma_bf16(acc[j], af, b0, b1);
    }
  }
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int64_t n = n0 + j * 8 + 2 * t;
    if (n >= sg.n) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = h == 0 ? r0 : r1;
      if (row >= a.m) continue;
      const float2 b = __bfloat1622float2(y0[j][h]);
      *reinterpret_cast<__nv_bfloat162*>(sg.y + int64_t(row) * sg.ldy + n) =
          __floats2bfloat162_rn(b.x + sg.scale * acc[j][2 * h], b.y + sg.scale * acc[j][2 * h + 1]);
    }
  }
}

}  // namespace

void launch_linear_streaming(const StreamingArgs& a, cudaStream_t s) {
  const StreamingSegment& last = a.seg[a.num_segments - 1];
  const int tiles = last.first_tile + int(last.n / 16);
  const int down_blocks = down_product_blocks(a);
  static_assert(kStreamingMaxRows == 16, "token tiles of 8 rows: one or two");
  // A grid of few tiles (o_proj, down_proj: 256 at N = 4,096) leaves the SMs with few warps:
  // each then keeps twice the bytes in flight.
  const bool deep = tiles < 3 * a.multiprocessors;
  int rank = 0;
  for (int i = 0; i < a.num_segments; ++i)
    if (a.seg[i].lora_b != nullptr) rank = max(rank, a.seg[i].lora_rank);
  const size_t shm =
      rank == 0 ? 0 : size_t(16 * (rank + 1) + 8 * ((a.m + 7) / 8) * rank) * sizeof(float);
  const dim3 grid{unsigned(down_blocks + tiles)}, block{unsigned(kStreamWarps * kWarp)};
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

void launch_lora_expand(const LoraExpandArgs& in, cudaStream_t s) {
  LoraExpandArgs a = in;
  int tiles = 0;
  for (int i = 0; i < a.num_segments; ++i) {
    a.seg[i].first_tile = tiles;
    tiles += int(ceil_div(a.seg[i].n, kMmaExpandColumns));
  }
  // A warp per 16 rows, up to four in a block (a few rows: one warp, not three idle ones).
  const int warps = int(std::min<int64_t>(4, ceil_div(a.m, 16)));
  const dim3 grid{unsigned(tiles), unsigned(ceil_div(a.m, 16 * warps))},
      block{unsigned(32 * warps)};
  switch (a.seg[0].rank) {
    case 8:
      lora_expand_mma_kernel<8><<<grid, block, 0, s>>>(a);
      break;
    case 16:
      lora_expand_mma_kernel<16><<<grid, block, 0, s>>>(a);
      break;
    case 32:
      lora_expand_mma_kernel<32><<<grid, block, 0, s>>>(a);
      break;
    default:
      lora_expand_mma_kernel<64><<<grid, block, 0, s>>>(a);
      break;
  }
  FP8RL_LAUNCH_CHECK("lora_expand");
}

}  // namespace fp8rl::cuda
