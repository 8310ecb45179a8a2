// Rotary position embedding (rotate-half layout), optionally after the per-head RMSNorm of
// Qwen3 / Gemma's q and k, from x to out (in place, or into a KV cache slice with its own
// token stride). The numbers are those of ops/cpu/rope.cpp: the angle is position *
// inv_freq in fp32 (as HF computes it) with cos and sin accurate to about an ulp; the norm is
// (x * inv) * w_eff with inv = 1 / sqrt(sum(x^2)/D + eps). The angle reaches 1e5+ rad at long
// positions; sincosf would then take its Payne-Hanek path (a local-memory array), so the
// reduction to half-turns is done in fp64 and sincospif finishes on a value in [-1, 1].
//
// Rounding points are those of the unfused CUDA ops (rms_norm writes bf16, rope reads it):
// the normed value is rounded to bf16 before it is rotated, and the rotated value once more.
// The sum of squares of a head is summed as launch_rms_norm sums a row of D <= 256 values (a
// warp per row, chunk `lane` of 8 values per lane, chunk_sumsq then a butterfly; lanes past
// D/8 add exact zeros), and the rotation of both kernels below is one function. So, for
// D % 16 == 0 up to 256 with aligned operands (the vector kernel), rms_norm_rope equals
// rms_norm + rope bit for bit; the scalar kernel for other shapes sums in another order.
#include "ops/cuda/rope_angle.cuh"
#include "ops/cuda/row_quant.cuh"

namespace fp8rl::cuda {

namespace {

struct RopeArgs {
  const bf16* x;  // [t, heads, d], token stride x_stride
  bf16* out;      // [t, heads, d], token stride out_stride; x itself or disjoint
  int64_t x_stride, out_stride;
  int64_t t, heads, d;
  const float* w;  // [d] or null: no norm
  float eps;
  bool plus_one;
  const int32_t* positions;  // [t]
  const float* inv_freq;     // [d / 2]
};

// The rotation of the pair (a, b) = (x[i], x[i + D/2]), rounded as the CPU's a*c - b*s and
// b*c + a*s (no fused multiply-add).
__device__ __forceinline__ float rotate_first(float a, float b, float c, float s) {
  return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ __forceinline__ float rotate_second(float a, float b, float c, float s) {
  return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

// The angle table of a token in shared memory: entry i at i + i / 32, so the 8 consecutive
// entries each lane reads sit in distinct banks across the lanes of a warp.
constexpr int kMaxHalf = 128;  // D <= 256
__device__ __forceinline__ int table_index(int i) {
  return i + i / 32;
}

// The vector kernels: D % 16 == 0, D <= 256, 16-byte aligned rows. A head is `lpr` lanes (D / 8
// when that is a power of two, else 32, the lanes past D / 8 idle), each holding one chunk of 8
// values, read with one 16-byte load and written with one 16-byte store. The chunk of x[i] and
// the chunk of its partner x[i + D/2] are D/16 lanes apart: one shuffle of 4 packed bf16 pairs
// brings each lane its partner values. The token's cos/sin table (D/2 entries) is computed once
// per block while the loads are in flight.
__host__ __device__ __forceinline__ int lanes_per_head(int64_t d) {
  const int nl = int(d / 8);
  return (nl & (nl - 1)) == 0 ? nl : kWarp;
}

// The launch shape of a vector kernel over `heads` rows of D values per token: rows per block,
// blocks per token, threads per block (rows x lanes rounded up to whole warps).
struct HeadBlocks {
  int per_block, blocks;
  unsigned threads;
};
HeadBlocks head_blocks(int64_t heads, int64_t d) {
  const int lpr = lanes_per_head(d);
  const int64_t per_block = std::min<int64_t>(heads, 256 / lpr);
  return {int(per_block), int(ceil_div(heads, per_block)),
          unsigned(ceil_div(per_block * lpr, kWarp) * kWarp)};
}

__device__ __forceinline__ void fill_angle_table(int32_t pos, const float* inv_freq, int half,
                                                 float* tab_c, float* tab_s) {
  for (int i = int(threadIdx.x); i < half; i += int(blockDim.x)) {
    float c, s;
    rope_cos_sin(pos, inv_freq[i], &c, &s);
    tab_c[table_index(i)] = c;
    tab_s[table_index(i)] = s;
  }
}

// One lane's chunk `raw` (x[j .. j + 8) of its head) through the norm (w non-null) and the
// rotation. Every lane of the warp calls it with the same lpr (it shuffles across the warp),
// heads of one warp may differ in w; `active` lanes hold a chunk. normed: the chunk after the
// norm, rounded to bf16 (raw itself without w); the rotated chunk is returned (active lanes).
__device__ __forceinline__ uint4 norm_rotate_chunk(uint4 raw, bool active, int lane, int lpr,
                                                   int64_t j, int d, const float* w, float eps,
                                                   bool plus_one, const float* tab_c,
                                                   const float* tab_s, uint4* normed) {
  float v[8];
  unpack(raw, v);
  float ss = chunk_sumsq(v, 0.0f);
  for (int o = lpr / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (w != nullptr) {
    const float inv = 1.0f / sqrtf(ss / float(d) + eps);
    float wc[8];
    load_chunk<true>(w, active ? j : 0, d, wc);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = (v[i] * inv) * (plus_one ? 1.0f + wc[i] : wc[i]);
    raw = pack(v);  // the bf16 rounding of the normed values (what rms_norm would store)
  }
  *normed = raw;
  // The partner chunk: lanes [0, hl) hold the first halves, [hl, 2 hl) the second.
  const int hl = d / 16;
  const bool first = lane < hl;
  const int wl = int(threadIdx.x) % kWarp;
  const int src = first ? wl + hl : wl - hl;  // in [0, 32) for every lane, idle ones included
  uint4 other;
  other.x = __shfl_sync(0xffffffffu, raw.x, src);
  other.y = __shfl_sync(0xffffffffu, raw.y, src);
  other.z = __shfl_sync(0xffffffffu, raw.z, src);
  other.w = __shfl_sync(0xffffffffu, raw.w, src);
  if (!active) return raw;
  float p[8];
  unpack(raw, v);
  unpack(other, p);
  const int i0 = (first ? lane : lane - hl) * kChunk;  // frequency index of v[0]
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float c = tab_c[table_index(i0 + i)], s = tab_s[table_index(i0 + i)];
    v[i] = first ? rotate_first(v[i], p[i], c, s) : rotate_second(p[i], v[i], c, s);
  }
  return pack(v);
}

// rms_norm_rope: one block per (token, group of heads).
__global__ void __launch_bounds__(256)
    rope_vec_kernel(RopeArgs a, int heads_per_block, int hblocks) {
  __shared__ float tab_c[kMaxHalf + kMaxHalf / 32], tab_s[kMaxHalf + kMaxHalf / 32];
  const int lpr = lanes_per_head(a.d);
  const int64_t tok = blockIdx.x / hblocks;
  const int64_t head = int64_t(blockIdx.x % hblocks) * heads_per_block + threadIdx.x / lpr;
  const int lane = int(threadIdx.x) % lpr;
  // Threads past the block's heads (blockDim rounded up to a warp) are idle too.
  const bool active = int(threadIdx.x) / lpr < heads_per_block && head < a.heads && lane < a.d / 8;
  const int64_t j = int64_t(lane) * kChunk;  // first of this lane's 8 values in the head
  uint4 raw = make_uint4(0, 0, 0, 0);
  if (active) raw = *reinterpret_cast<const uint4*>(a.x + tok * a.x_stride + head * a.d + j);
  fill_angle_table(a.positions[tok], a.inv_freq, int(a.d / 2), tab_c, tab_s);
  __syncthreads();
  uint4 normed;
  const uint4 out = norm_rotate_chunk(raw, active, lane, lpr, j, int(a.d), a.w, a.eps, a.plus_one,
                                      tab_c, tab_s, &normed);
  if (active) *reinterpret_cast<uint4*>(a.out + tok * a.out_stride + head * a.d + j) = out;
}

// rope_store_kv: the rows of a token are its hq query heads, then its hkv key heads, then its
// hkv value heads; one block per (token, group of rows). Query rows go to q_out, key rows
// (rotated) and value rows (as read) to the token's pool slot, bf16 or quantized as
// store_kv_fp8_kernel quantizes a row (amax over the head's lanes).
__global__ void __launch_bounds__(256)
    rope_store_kv_kernel(RopeStoreArgs a, int rows_per_block, int rblocks) {
  __shared__ float tab_c[kMaxHalf + kMaxHalf / 32], tab_s[kMaxHalf + kMaxHalf / 32];
  const int lpr = lanes_per_head(a.d);
  const int64_t tok = blockIdx.x / rblocks;
  const int64_t row = int64_t(blockIdx.x % rblocks) * rows_per_block + threadIdx.x / lpr;
  const int lane = int(threadIdx.x) % lpr;
  const int64_t rows = a.hq + 2 * a.hkv;
  const bool active = int(threadIdx.x) / lpr < rows_per_block && row < rows && lane < a.d / 8;
  const int role = row < a.hq ? 0 : row < a.hq + a.hkv ? 1 : 2;  // q, k, v
  const int64_t head = role == 0 ? row : role == 1 ? row - a.hq : row - a.hq - a.hkv;
  const int64_t j = int64_t(lane) * kChunk;
  const bf16* src = role == 0   ? a.q + tok * a.q_stride
                    : role == 1 ? a.k + tok * a.k_stride
                                : a.v + tok * a.v_stride;
  uint4 raw = make_uint4(0, 0, 0, 0);
  if (active) raw = *reinterpret_cast<const uint4*>(src + head * a.d + j);
  const int64_t slot = a.slot_mapping[tok];
  fill_angle_table(a.positions[tok], a.inv_freq, int(a.d / 2), tab_c, tab_s);
  __syncthreads();
  const float* w = role == 0 ? a.q_norm : role == 1 ? a.k_norm : nullptr;
  uint4 normed;
  const uint4 rotated = norm_rotate_chunk(raw, active, lane, lpr, j, int(a.d), w, a.eps, a.plus_one,
                                          tab_c, tab_s, &normed);
  const uint4 out = role == 2 ? normed : rotated;
  const bool stored = role != 0 && slot >= 0 && slot < a.slots;  // else padding (or a bad slot)
  const int64_t at = (slot * a.hkv + head) * a.d;  // the row's first element in its pool
  if (a.k_scale == nullptr) {
    if (!active) return;
    if (role == 0)
      *reinterpret_cast<uint4*>(a.q_out + tok * a.q_out_stride + head * a.d + j) = out;
    else if (stored)
      reinterpret_cast<uint4*>(static_cast<bf16*>(role == 1 ? a.k_pool : a.v_pool) + at + j)[0] =
          out;
    return;
  }
  float v[8];
  unpack(out, v);
  float amax = active ? chunk_amax(v) : 0.0f;
  for (int o = lpr / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (!active) return;
  if (role == 0) {
    *reinterpret_cast<uint4*>(a.q_out + tok * a.q_out_stride + head * a.d + j) = out;
  } else if (stored) {
    const float scale = fp8_scale(amax);
    store_codes<true>(static_cast<uint8_t*>(role == 1 ? a.k_pool : a.v_pool) + at, j, a.d, v,
                      fp8_divisor(scale));
    if (lane == 0) (role == 1 ? a.k_scale : a.v_scale)[slot * a.hkv + head] = scale;
  }
}

// Any even D and any alignment: a warp per (token, head), each lane rotating the pairs
// (i, i + D/2) for i = lane, lane + 32, ...; cos/sin per pair.
template <bool NORM>
__global__ void __launch_bounds__(256) rope_scalar_kernel(RopeArgs a) {
  const int64_t row = int64_t(blockIdx.x) * (256 / kWarp) + threadIdx.x / kWarp;
  if (row >= a.t * a.heads) return;  // whole warps
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t tok = row / a.heads, head = row % a.heads, half = a.d / 2;
  const bf16* src = a.x + tok * a.x_stride + head * a.d;
  bf16* dst = a.out + tok * a.out_stride + head * a.d;
  float inv = 1.0f;
  if constexpr (NORM) {
    float ss = 0.0f;
    for (int64_t i = lane; i < a.d; i += kWarp) {
      const float v = __bfloat162float(src[i]);
      ss = __fmaf_rn(v, v, ss);
    }
    ss = warp_sum(ss);  // every read of the head is done before any write (in place)
    inv = 1.0f / sqrtf(ss / float(a.d) + a.eps);
  }
  const int32_t pos = a.positions[tok];
  for (int64_t i = lane; i < half; i += kWarp) {
    float x0 = __bfloat162float(src[i]), x1 = __bfloat162float(src[i + half]);
    if constexpr (NORM) {
      const float w0 = a.w[i], w1 = a.w[i + half];
      x0 = round_bf16((x0 * inv) * (a.plus_one ? 1.0f + w0 : w0));
      x1 = round_bf16((x1 * inv) * (a.plus_one ? 1.0f + w1 : w1));
    }
    float c, s;
    rope_cos_sin(pos, a.inv_freq[i], &c, &s);
    dst[i] = __float2bfloat16_rn(rotate_first(x0, x1, c, s));
    dst[i + half] = __float2bfloat16_rn(rotate_second(x0, x1, c, s));
  }
}

}  // namespace

void launch_rope(const bf16* x, int64_t x_stride, bf16* out, int64_t out_stride, int64_t t,
                 int64_t heads, int64_t d, const float* w, float eps, bool plus_one,
                 const int32_t* positions, const float* inv_freq, cudaStream_t s) {
  if (t * heads * d == 0) return;
  RopeArgs a{x, out, x_stride, out_stride, t, heads, d, w, eps, plus_one, positions, inv_freq};
  const bool vec = d % 16 == 0 && d <= 2 * kMaxHalf && x_stride % 8 == 0 && out_stride % 8 == 0 &&
                   aligned16(x) && aligned16(out) && (w == nullptr || aligned16(w));
  if (vec) {
    const HeadBlocks hb = head_blocks(heads, d);
    rope_vec_kernel<<<unsigned(t * hb.blocks), hb.threads, 0, s>>>(a, hb.per_block, hb.blocks);
  } else {
    const unsigned grid = unsigned(ceil_div(t * heads, 256 / kWarp));
    if (w != nullptr)
      rope_scalar_kernel<true><<<grid, 256, 0, s>>>(a);
    else
      rope_scalar_kernel<false><<<grid, 256, 0, s>>>(a);
  }
  FP8RL_LAUNCH_CHECK(w != nullptr ? "rms_norm_rope" : "rope");
}

bool rope_store_kv_supported(int64_t d) {
  return d % 16 == 0 && d <= 2 * kMaxHalf;
}

void launch_rope_store_kv(const RopeStoreArgs& a, cudaStream_t s) {
  const int64_t rows = a.hq + 2 * a.hkv;
  if (a.t * rows == 0) return;
  const HeadBlocks hb = head_blocks(rows, a.d);
  rope_store_kv_kernel<<<unsigned(a.t * hb.blocks), hb.threads, 0, s>>>(a, hb.per_block, hb.blocks);
  FP8RL_LAUNCH_CHECK("rope_store_kv");
}

}  // namespace fp8rl::cuda
