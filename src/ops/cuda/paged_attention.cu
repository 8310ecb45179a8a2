// The paged KV cache: new keys/values scattered into their slots, the zeroed padding rows of a
// captured batch, and the split-K decode kernel (steps where every sequence has one new query;
// steps with longer queries run the prefill kernels of attention.cu / attention_wgmma.cu with
// paged AttentionArgs).
//
// Decode: a block per (key chunk, kv head, sequence) takes the GQA group's query heads
// together, so each K/V row is read once for all of them. Per 64-key tile (cp.async through
// the block table into shared memory): scores on the CUDA cores (a thread per (head, key),
// fp32 dot products of the fp32 query with bf16 keys), the online softmax in the log2 domain
// per head (a warp per head), then O += P V with P kept in fp32 (a thread per (head, column)).
// One chunk: the output directly; several: unnormalized partials and the running max / sum per
// chunk, merged by a combine kernel in chunk order. The chunking depends only on the number of
// visible keys of the row, so a row's result is the same whatever else is in the batch.
#include "ops/cuda/attention_common.cuh"

namespace fp8rl::cuda {

namespace {

constexpr int kDecodeThreads = 128;
constexpr int kDecodeTile = 64;  // keys per shared-memory tile
static_assert(kDecodeTile == 2 * kWarp, "the softmax step takes two scores per lane");
constexpr int kDecodeMinChunk = 256;  // keys per chunk until the chunk count reaches the cap

// Keys per chunk for a row that sees `len` keys: multiples of kDecodeMinChunk, at most
// kPagedDecodeMaxSplits chunks.
__host__ __device__ inline int decode_chunk(int len) {
  const int per = int(ceil_div(len, kPagedDecodeMaxSplits));
  return int(ceil_div(per < 1 ? 1 : per, kDecodeMinChunk)) * kDecodeMinChunk;
}

// The visible keys [lo, pos] of sequence seq's one new query, or false if it has none.
struct DecodeRow {
  int row, pos, lo, chunk, splits;
};
__device__ __forceinline__ bool decode_row(const AttentionArgs& a, int seq, DecodeRow& r) {
  r.row = a.cu_q[seq];
  if (a.cu_q[seq + 1] - r.row != 1) return false;
  r.pos = a.context_lens[seq] - 1;
  r.lo = a.window > 0 ? max(0, r.pos - int(a.window) + 1) : 0;
  const int len = r.pos - r.lo + 1;
  r.chunk = decode_chunk(len);
  r.splits = int(ceil_div(len, r.chunk));
  return true;
}

template <int D>
struct DecodeCfg {
  static constexpr int kLd = D + 8;  // smem row stride (bf16): rows 16 B apart mod 128 B
  static constexpr int kOut = kPagedDecodeMaxGroup * D / kDecodeThreads;  // outputs per thread
  // K and V tiles, then f32: the queries [group][D], P [group][tile], max / sum / alpha.
  static int smem_bytes(int group) {
    return 2 * kDecodeTile * kLd * 2 + group * (D + kDecodeTile + 3) * 4;
  }
};

__device__ __forceinline__ void bf16x8_to_f32(const uint4& u, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

template <int D>
__global__ void __launch_bounds__(kDecodeThreads)
    paged_decode_kernel(const AttentionArgs a, int max_splits, float* part_o, float* part_ml) {
  using Cfg = DecodeCfg<D>;
  constexpr int kLd = Cfg::kLd, kChunks = D / 8, BK = kDecodeTile;
  constexpr float kLog2e = 1.4426950408889634f;
  const int split = int(blockIdx.x), kvh = int(blockIdx.y), seq = int(blockIdx.z);
  DecodeRow r;
  if (!decode_row(a, seq, r) || split >= r.splits) return;
  const int k0 = r.lo + split * r.chunk, k1 = min(k0 + r.chunk, r.pos + 1);  // keys [k0, k1)
  const int group = int(a.hq / a.hkv), tid = int(threadIdx.x);
  const int warp = tid / kWarp, lane = tid % kWarp;
  const int32_t* table = a.block_tables + int64_t(seq) * a.table_stride;
  const int bs = a.block_size;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);         // [BK][kLd]
  bf16* vs = ks + BK * kLd;                             // [BK][kLd]
  float* qf = reinterpret_cast<float*>(vs + BK * kLd);  // [group][D]
  float* p = qf + group * D;                            // [group][BK]
  float* m = p + group * BK;                            // [group] running max (log2 domain)
  float* l = m + group;                                 // [group] running sum
  float* alpha = l + group;                             // [group] this tile's rescale

  // The group's query heads are consecutive: [group][D] from row r.row, head kvh * group.
  const bf16* qrow = a.q + (int64_t(r.row) * a.hq + int64_t(kvh) * group) * D;
  for (int i = tid; i < group * D; i += kDecodeThreads) qf[i] = __bfloat162float(qrow[i]);
  for (int g = tid; g < group; g += kDecodeThreads) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
  }
  float o[Cfg::kOut];
#pragma unroll
  for (int i = 0; i < Cfg::kOut; ++i) o[i] = 0.0f;
  const bool capped = a.softcap > 0.0f;

  for (int kt = k0; kt < k1; kt += BK) {
    for (int c = tid; c < BK * kChunks; c += kDecodeThreads) {
      const int j = c / kChunks, col = (c % kChunks) * 8;
      const int key = kt + j;
      const bool ok = key < k1;  // past the chunk: zeros, the source is not read
      const int64_t slot = ok ? int64_t(table[key / bs]) * bs + key % bs : 0;
      const int64_t off = (slot * a.hkv + kvh) * D + col;
      cp_async16(ks + j * kLd + col, a.k + off, ok);
      cp_async16(vs + j * kLd + col, a.v + off, ok);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();  // also orders the query / statistics initialization before first use

    // Scores in the log2 domain; keys past the chunk are -inf.
    for (int e = tid; e < group * BK; e += kDecodeThreads) {
      const int g = e / BK, j = e % BK;
      float sc = -INFINITY;
      if (kt + j < k1) {
        const float* qv = qf + g * D;
        const bf16* kv = ks + j * kLd;
        float dot = 0.0f;
#pragma unroll 4
        for (int c = 0; c < D; c += 8) {
          float kf[8];
          bf16x8_to_f32(*reinterpret_cast<const uint4*>(kv + c), kf);
#pragma unroll
          for (int i = 0; i < 8; ++i) dot = fmaf(qv[c + i], kf[i], dot);
        }
        sc = dot * a.scale;
        if (capped) sc = a.softcap * tanhf(sc / a.softcap);
        sc *= kLog2e;
      }
      p[g * BK + j] = sc;
    }
    __syncthreads();

    // Online softmax, a warp per head: the tile's first key is visible, so its max is finite.
    for (int g = warp; g < group; g += kDecodeThreads / kWarp) {
      const float x0 = p[g * BK + lane], x1 = p[g * BK + lane + kWarp];
      const float m_old = m[g], m_new = fmaxf(m_old, warp_max(fmaxf(x0, x1)));
      const float e0 = exp2f(x0 - m_new), e1 = exp2f(x1 - m_new);
      p[g * BK + lane] = e0;
      p[g * BK + lane + kWarp] = e1;
      const float sum = warp_sum(e0 + e1);
      if (lane == 0) {
        const float al = exp2f(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        alpha[g] = al;
        l[g] = l[g] * al + sum;
        m[g] = m_new;
      }
    }
    __syncthreads();

    // O += P V: thread owns outputs e = tid + 128 i, (head e / D, column e % D).
#pragma unroll
    for (int i = 0; i < Cfg::kOut; ++i) {
      const int e = tid + i * kDecodeThreads;
      if (e < group * D) {
        const int g = e / D, d = e % D;
        const float* pg = p + g * BK;
        float acc = o[i] * alpha[g];
#pragma unroll 8
        for (int j = 0; j < BK; ++j) acc = fmaf(pg[j], __bfloat162float(vs[j * kLd + d]), acc);
        o[i] = acc;
      }
    }
    __syncthreads();  // the next tile overwrites K, V and P
  }

  const int64_t head0 = int64_t(r.row) * a.hq + int64_t(kvh) * group;  // row-major (row, head)
  if (r.splits == 1) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < Cfg::kOut; ++i) {
      const int e = tid + i * kDecodeThreads;
      if (e < group * D) {
        const int g = e / D;
        const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
        const bf16 v = __float2bfloat16_rn(o[i] * inv);
        a.out[head0 * D + e] = v;
        amax = fmaxf(amax, fabsf(__bfloat162float(v)));
      }
    }
    if (a.amax != nullptr) {
      amax = warp_max(amax);
      if (lane == 0) atomic_max_nonneg(a.amax, amax);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < Cfg::kOut; ++i) {
    const int e = tid + i * kDecodeThreads;
    if (e < group * D) {
      const int g = e / D, d = e % D;
      part_o[((head0 + g) * max_splits + split) * D + d] = o[i];
    }
  }
  for (int g = tid; g < group; g += kDecodeThreads) {
    part_ml[((head0 + g) * max_splits + split) * 2] = m[g];
    part_ml[((head0 + g) * max_splits + split) * 2 + 1] = l[g];
  }
}

// out = sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i over the chunks i in order, for rows of
// more than one chunk. Block (head, sequence), threads over the D columns.
__global__ void __launch_bounds__(kDecodeThreads)
    paged_decode_combine_kernel(const AttentionArgs a, int max_splits, const float* part_o,
                                const float* part_ml) {
  const int h = int(blockIdx.x), seq = int(blockIdx.y), tid = int(threadIdx.x);
  DecodeRow r;
  if (!decode_row(a, seq, r) || r.splits == 1) return;
  const int64_t head = int64_t(r.row) * a.hq + h;
  const float* ml = part_ml + head * max_splits * 2;
  float mx = -INFINITY;
  for (int i = 0; i < r.splits; ++i) mx = fmaxf(mx, ml[2 * i]);
  float sum = 0.0f;
  for (int i = 0; i < r.splits; ++i) sum += exp2f(ml[2 * i] - mx) * ml[2 * i + 1];
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const float* po = part_o + head * max_splits * a.d;
  float amax = 0.0f;
  for (int d = tid; d < int(a.d); d += kDecodeThreads) {
    float acc = 0.0f;
    for (int i = 0; i < r.splits; ++i) acc += exp2f(ml[2 * i] - mx) * po[i * a.d + d];
    const bf16 v = __float2bfloat16_rn(acc * inv);
    a.out[head * a.d + d] = v;
    amax = fmaxf(amax, fabsf(__bfloat162float(v)));
  }
  if (a.amax != nullptr) {
    amax = warp_max(amax);
    if (tid % kWarp == 0) atomic_max_nonneg(a.amax, amax);
  }
}

__global__ void store_kv_kernel(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                                const int32_t* slot_mapping, int64_t t, int64_t row, bf16* k_pool,
                                bf16* v_pool, int64_t slots) {
  const int64_t chunks = row / 8;
  for (int64_t i = blockIdx.x; i < t; i += gridDim.x) {
    const int64_t slot = slot_mapping[i];
    if (slot < 0 || slot >= slots) continue;  // padding (or a bad slot: never out of the pool)
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      reinterpret_cast<uint4*>(k_pool + slot * row)[c] =
          reinterpret_cast<const uint4*>(k + i * k_stride)[c];
      reinterpret_cast<uint4*>(v_pool + slot * row)[c] =
          reinterpret_cast<const uint4*>(v + i * v_stride)[c];
    }
  }
}

__global__ void zero_padding_rows_kernel(bf16* out, int64_t t, int64_t row,
                                         const int32_t* cu_q_end) {
  const int64_t chunks = row / 8;
  for (int64_t i = *cu_q_end + blockIdx.x; i < t; i += gridDim.x)
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x)
      reinterpret_cast<uint4*>(out + i * row)[c] = make_uint4(0, 0, 0, 0);
}

template <int D>
cudaError_t set_decode_smem_limit() {
  return cudaFuncSetAttribute(paged_decode_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              DecodeCfg<D>::smem_bytes(kPagedDecodeMaxGroup));
}

template <int D>
void launch_decode(const AttentionArgs& a, int max_splits, float* part_o, float* part_ml,
                   cudaStream_t s) {
  const dim3 grid(unsigned(max_splits), unsigned(a.hkv), unsigned(a.num_seqs));
  paged_decode_kernel<D><<<grid, kDecodeThreads, DecodeCfg<D>::smem_bytes(int(a.hq / a.hkv)), s>>>(
      a, max_splits, part_o, part_ml);
}

}  // namespace

int paged_decode_max_splits(int64_t max_context_len) {
  // Chunks hold at least kDecodeMinChunk keys, and there are at most kPagedDecodeMaxSplits.
  const int64_t n = ceil_div(max_context_len < 1 ? 1 : max_context_len, kDecodeMinChunk);
  return int(n < kPagedDecodeMaxSplits ? n : kPagedDecodeMaxSplits);
}

bool paged_decode_supports(int64_t d, int64_t group) {
  return attention_supports(d) && group >= 1 && group <= kPagedDecodeMaxGroup;
}

cudaError_t paged_decode_init() {
  const cudaError_t e[] = {set_decode_smem_limit<32>(), set_decode_smem_limit<64>(),
                           set_decode_smem_limit<128>(), set_decode_smem_limit<256>()};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return x;
  return cudaSuccess;
}

void launch_paged_decode(const AttentionArgs& a, int max_splits, float* part_o, float* part_ml,
                         cudaStream_t s) {
  if (a.num_seqs == 0) return;
  switch (a.d) {
    case 32:
      launch_decode<32>(a, max_splits, part_o, part_ml, s);
      break;
    case 64:
      launch_decode<64>(a, max_splits, part_o, part_ml, s);
      break;
    case 128:
      launch_decode<128>(a, max_splits, part_o, part_ml, s);
      break;
    case 256:
      launch_decode<256>(a, max_splits, part_o, part_ml, s);
      break;
    default:
      return;  // paged_decode_supports() is checked by the caller
  }
  FP8RL_LAUNCH_CHECK("paged_decode");
  if (max_splits > 1) {
    paged_decode_combine_kernel<<<dim3(unsigned(a.hq), unsigned(a.num_seqs)), kDecodeThreads, 0,
                                  s>>>(a, max_splits, part_o, part_ml);
    FP8RL_LAUNCH_CHECK("paged_decode_combine");
  }
}

void launch_store_kv(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                     const int32_t* slot_mapping, int64_t t, int64_t row, bf16* k_pool,
                     bf16* v_pool, int64_t slots, cudaStream_t s) {
  if (t == 0) return;
  store_kv_kernel<<<grid_for(t, 1, 65535), 128, 0, s>>>(k, k_stride, v, v_stride, slot_mapping, t,
                                                        row, k_pool, v_pool, slots);
  FP8RL_LAUNCH_CHECK("store_kv");
}

void launch_zero_padding_rows(bf16* out, int64_t t, int64_t row, const int32_t* cu_q_end,
                              cudaStream_t s) {
  if (t == 0) return;
  zero_padding_rows_kernel<<<grid_for(t, 1, 64), 128, 0, s>>>(out, t, row, cu_q_end);
  FP8RL_LAUNCH_CHECK("zero_padding_rows");
}

}  // namespace fp8rl::cuda
