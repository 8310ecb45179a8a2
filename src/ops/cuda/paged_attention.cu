// The paged KV cache: new keys/values scattered into their slots, the zeroed padding rows of a
// captured batch, and the split-K decode kernels on the CUDA cores (steps where every sequence
// has one new query; head dims up to 128, bf16 or FP8 pools, take the tensor-core form of the
// same blocks instead, paged_decode_mma.cu, unless CudaDeviceOptions::decode_mma is off;
// steps with longer queries run the prefill kernels of attention.cu / attention_wgmma.cu with
// paged AttentionArgs).
//
// Decode: a block per (key chunk, kv head, sequence) takes the GQA group's query heads
// together, so each K/V row is read once for all of them. Per 64-key tile (cp.async through
// the block table into shared memory): scores on the CUDA cores (fp32 dot products of the fp32
// queries with the bf16 keys), the online softmax in the log2 domain per head, then O += P V
// with P kept in fp32 (paged_decode_kernel says which thread takes what). One chunk: the
// output directly; several: unnormalized partials and the running max / sum per chunk, merged
// by a combine kernel in chunk order. The chunking depends only on the number of visible keys
// of the row, so a row's result is the same whatever else is in the batch.
//
// Shared prefixes (the n samples of a GRPO prompt decode over the same physical prompt blocks):
// a block per (prefix chunk, kv head, group) reads each K/V tile of the shared keys once for
// all the (member, head) rows of a batch of the group's members: the prefill kernel's tile
// loop on mma.sync for up to 64 rows (paged_decode_prefix_mma_kernel), or this file's
// CUDA-core loop for up to kPrefixRows (paged_decode_prefix_kernel). The per-sequence kernel
// covers only the keys after the prefix, and the combine merges the prefix chunks, then the
// sequence's own.
// Such a row's result depends on its group's prefix length (another chunking of its keys),
// not on the other members' queries.
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/paged_decode.cuh"

namespace fp8rl::cuda {

namespace {

constexpr int kPrefixRows = 32;  // (member, query head) rows of one prefix block

// The query rows of a decode block: rows [0, count) of the G rows hold real queries, row i
// being the query head (row, head) = head(i) of q and out ([rows, hq] row-major).
// One sequence's new query: its GQA group of heads for kv head kvh.
struct SequenceRows {
  int64_t head0;  // row * hq + kvh * group
  int count;      // the group
  __device__ __forceinline__ int64_t head(int i) const { return head0 + i; }
};
// A batch of a prefix group's members: member i / group's query, head kvh * group + i % group.
struct MemberRows {
  const int32_t* cu_q;
  const int32_t* members;  // the batch's first member
  int64_t hq;
  int group, kvh, count;  // count: members of the batch * group
  __device__ __forceinline__ int64_t head(int i) const {
    return int64_t(cu_q[members[i / group]]) * hq + int64_t(kvh) * group + i % group;
  }
};

// The kernel for head dim D and up to G query heads per kv head (the group rounded up to a
// power of two; the heads past the group are zeros and never written).
template <int D, int G>
struct DecodeCfg {
  static constexpr int kLd = D + 8;                        // smem row stride (bf16)
  static constexpr int kKeySets = 2 * kDecodeThreads / D;  // P V: threads sharing a column pair
  // K and V tiles (bf16), then f32: the queries [G][D], P [BK][G], the partial outputs of
  // the key sets [kKeySets][G][D] (first the second half's scores [BK][G]), max / sum / alpha.
  static constexpr int kSmemBytes =
      2 * kDecodeTile * kLd * 2 + (G * D + kDecodeTile * G + kKeySets * G * D + 3 * G) * 4;
  static_assert(kKeySets >= 1 && kKeySets * G * D >= kDecodeTile * G, "layout");
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

// Per 64-key tile: (1) scores: thread (key tid % 64, half tid / 64 of the head dim) takes the
// dot products of its key row with all G queries (each K element read once, the queries as
// broadcast float4); the second half's sums go through shared memory to the first.
// (2) softmax: a warp per head. (3) O += P V: thread (column pair tid % (D/2), key set
// tid / (D/2)) accumulates its keys for all G heads (each V element read once, P as broadcast
// float4); the key sets' partial outputs are summed once at the end.
// Keys [k0, k1) (k0 < k1) of the block table `table` for the rows of kv head kvh. direct: the
// normalized output into a.out (and a.amax); otherwise unnormalized partials and the running
// max / sum into chunk `slot` of `slots` per row.
template <int D, int G, class Rows>
__device__ __forceinline__ void decode_attend(const AttentionArgs& a, const Rows& rows, int kvh,
                                              const int32_t* table, int k0, int k1, bool direct,
                                              int slot, int slots, float* part_o, float* part_ml) {
  using Cfg = DecodeCfg<D, G>;
  constexpr int kLd = Cfg::kLd, kChunks = D / 8, BK = kDecodeTile, kSets = Cfg::kKeySets;
  constexpr float kLog2e = 1.4426950408889634f;
  static_assert(2 * BK == kDecodeThreads, "two threads per key in the score step");
  const int count = rows.count, tid = int(threadIdx.x);
  const int warp = tid / kWarp, lane = tid % kWarp;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);         // [BK][kLd]
  bf16* vs = ks + BK * kLd;                             // [BK][kLd]
  float* qf = reinterpret_cast<float*>(vs + BK * kLd);  // [G][D]
  float* p = qf + G * D;                                // [BK][G]
  float* red = p + BK * G;                              // [kSets][G][D]; scores: [BK][G]
  float* m = red + kSets * G * D;                       // [G] running max (log2 domain)
  float* l = m + G;                                     // [G] running sum
  float* alpha = l + G;                                 // [G] this tile's rescale

  for (int i = tid; i < G * D; i += kDecodeThreads)
    qf[i] = i < count * D ? __bfloat162float(a.q[rows.head(i / D) * D + i % D]) : 0.0f;
  for (int g = tid; g < G; g += kDecodeThreads) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
    alpha[g] = 0.0f;  // rows past the count keep 0: their P is 0, their output stays 0
  }
  const int key_j = tid % BK, half = tid / BK;               // score step
  const int col = 2 * (tid % (D / 2)), set = tid / (D / 2);  // P V step
  float o[G][2];
#pragma unroll
  for (int g = 0; g < G; ++g) o[g][0] = o[g][1] = 0.0f;
  const bool capped = a.softcap > 0.0f;

  for (int kt = k0; kt < k1; kt += BK) {
    for (int c = tid; c < BK * kChunks; c += kDecodeThreads) {
      const int j = c / kChunks, cc = (c % kChunks) * 8;
      const int key = kt + j;
      const bool ok = key < k1;  // past the chunk: zeros, the source is not read
      const int64_t slot = ok ? int64_t(table[key >> kPagedBlockShift]) * kPagedBlockSize +
                                    (key & (kPagedBlockSize - 1))
                              : 0;
      const int64_t head_row = slot * a.hkv + kvh, off = head_row * D + cc;
      if (a.k8 != nullptr) {  // FP8 pool: dequantized on the way in
        load_fp8_chunk(ks + j * kLd + cc, a.k8 + off, a.k_scale + head_row, ok);
        load_fp8_chunk(vs + j * kLd + cc, a.v8 + off, a.v_scale + head_row, ok);
      } else {
        cp_async16(ks + j * kLd + cc, a.k + off, ok);
        cp_async16(vs + j * kLd + cc, a.v + off, ok);
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();  // also orders the query / statistics initialization before first use

    // (1) Scores in the log2 domain; keys past the chunk -inf, rows past the count 0.
    {
      float dot[G];
#pragma unroll
      for (int g = 0; g < G; ++g) dot[g] = 0.0f;
      const bf16* kv = ks + key_j * kLd + half * (D / 2);
#pragma unroll 2
      for (int c = 0; c < D / 2; c += 8) {
        float kf[8];
        bf16x8_to_f32(*reinterpret_cast<const uint4*>(kv + c), kf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const float* qv = qf + g * D + half * (D / 2) + c;
          const float4 q0 = *reinterpret_cast<const float4*>(qv);
          const float4 q1 = *reinterpret_cast<const float4*>(qv + 4);
          float x = dot[g];
          x = fmaf(q0.x, kf[0], x);
          x = fmaf(q0.y, kf[1], x);
          x = fmaf(q0.z, kf[2], x);
          x = fmaf(q0.w, kf[3], x);
          x = fmaf(q1.x, kf[4], x);
          x = fmaf(q1.y, kf[5], x);
          x = fmaf(q1.z, kf[6], x);
          x = fmaf(q1.w, kf[7], x);
          dot[g] = x;
        }
      }
      if (half == 1) {
#pragma unroll
        for (int g = 0; g < G; ++g) red[key_j * G + g] = dot[g];
      }
      __syncthreads();
      if (half == 0) {
        const bool visible = kt + key_j < k1;
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float sc = (dot[g] + red[key_j * G + g]) * a.scale;
          if (capped) sc = a.softcap * tanhf(sc / a.softcap);
          sc = g >= count ? 0.0f : (visible ? sc * kLog2e : -INFINITY);
          p[key_j * G + g] = sc;
        }
      }
    }
    __syncthreads();

    // (2) Online softmax, a warp per head: the tile's first key is visible, so its max is
    // finite.
    for (int g = warp; g < count; g += kDecodeThreads / kWarp) {
      const float x0 = p[lane * G + g], x1 = p[(lane + kWarp) * G + g];
      const float m_old = m[g], m_new = fmaxf(m_old, warp_max(fmaxf(x0, x1)));
      const float e0 = exp2f(x0 - m_new), e1 = exp2f(x1 - m_new);
      p[lane * G + g] = e0;
      p[(lane + kWarp) * G + g] = e1;
      const float sum = warp_sum(e0 + e1);
      if (lane == 0) {
        const float al = exp2f(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        alpha[g] = al;
        l[g] = l[g] * al + sum;
        m[g] = m_new;
      }
    }
    __syncthreads();

    // (3) O += P V for this thread's column pair and key set, all heads.
#pragma unroll
    for (int g = 0; g < G; ++g) {
      o[g][0] *= alpha[g];
      o[g][1] *= alpha[g];
    }
#pragma unroll 4
    for (int jj = 0; jj < BK / kSets; ++jj) {
      const int j = set + jj * kSets;
      const float2 v =
          __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vs + j * kLd + col));
      const float* pj = p + j * G;
      if constexpr (G % 4 == 0) {
#pragma unroll
        for (int g = 0; g < G; g += 4) {
          const float4 pg = *reinterpret_cast<const float4*>(pj + g);
          o[g][0] = fmaf(pg.x, v.x, o[g][0]);
          o[g][1] = fmaf(pg.x, v.y, o[g][1]);
          o[g + 1][0] = fmaf(pg.y, v.x, o[g + 1][0]);
          o[g + 1][1] = fmaf(pg.y, v.y, o[g + 1][1]);
          o[g + 2][0] = fmaf(pg.z, v.x, o[g + 2][0]);
          o[g + 2][1] = fmaf(pg.z, v.y, o[g + 2][1]);
          o[g + 3][0] = fmaf(pg.w, v.x, o[g + 3][0]);
          o[g + 3][1] = fmaf(pg.w, v.y, o[g + 3][1]);
        }
      } else {
#pragma unroll
        for (int g = 0; g < G; ++g) {
          o[g][0] = fmaf(pj[g], v.x, o[g][0]);
          o[g][1] = fmaf(pj[g], v.y, o[g][1]);
        }
      }
    }
    __syncthreads();  // the next tile overwrites K, V, P and the second half's scores
  }

  // The key sets' partial outputs, summed in set order.
#pragma unroll
  for (int g = 0; g < G; ++g)
    *reinterpret_cast<float2*>(red + (set * G + g) * D + col) = make_float2(o[g][0], o[g][1]);
  __syncthreads();
  float amax = 0.0f;
  for (int e = tid; e < count * D; e += kDecodeThreads) {
    const int g = e / D, d = e % D;
    const int64_t head = rows.head(g);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kSets; ++k) acc += red[(k * G + g) * D + d];
    if (direct) {
      const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
      const bf16 v = __float2bfloat16_rn(acc * inv);
      a.out[head * D + d] = v;
      amax = fmaxf(amax, fabsf(__bfloat162float(v)));
    } else {
      part_o[(head * slots + slot) * D + d] = acc;
    }
  }
  if (direct) {
    if (a.amax != nullptr) {
      amax = warp_max(amax);
      if (lane == 0) atomic_max_nonneg(a.amax, amax);
    }
    return;
  }
  for (int g = tid; g < count; g += kDecodeThreads) {
    const int64_t head = rows.head(g);
    part_ml[(head * slots + slot) * 2] = m[g];
    part_ml[(head * slots + slot) * 2 + 1] = l[g];
  }
}

// (The minimum of 4 blocks per SM, a cap of 128 registers, is also what keeps ptxas from
// spilling a few bytes at G = 2; G = 16 needs more registers.)
template <int D, int G>
__global__ void __launch_bounds__(kDecodeThreads, G >= 16 ? 1 : 4)
    paged_decode_kernel(const AttentionArgs a, int slots, float* part_o, float* part_ml) {
  const int split = int(blockIdx.x), kvh = int(blockIdx.y), seq = int(blockIdx.z);
  DecodeRow r;
  if (!decode_row(a, seq, r) || split >= r.splits) return;
  const int k0 = r.lo + split * r.chunk, k1 = min(k0 + r.chunk, r.pos + 1);  // keys [k0, k1)
  const int group = int(a.hq / a.hkv);
  const SequenceRows rows{int64_t(r.row) * a.hq + int64_t(kvh) * group, group};
  decode_attend<D, G>(a, rows, kvh, a.block_tables + int64_t(seq) * a.table_stride, k0, k1,
                      r.slots == 1, r.slot0 + split, slots, part_o, part_ml);
}

// Prefix group g of a block (blockIdx.z: the grid runs over the groups' capacity): its members
// [begin, stop) of prefix_members and chunk `split` of its prefix, keys [k0, k1); false for an
// empty group or a chunk past the prefix. The block then takes the members in batches of `per`.
struct PrefixChunk {
  int begin, stop, k0, k1;
};
__device__ __forceinline__ bool prefix_chunk(const AttentionArgs& a, int g, int split,
                                             PrefixChunk& c) {
  c.begin = a.prefix_cu_members[g];
  c.stop = a.prefix_cu_members[g + 1];
  const int len = a.prefix_lens[g];
  if (c.begin >= c.stop || len <= 0) return false;
  const int chunk = decode_chunk(len, kPrefixMaxSplits);
  c.k0 = split * chunk;
  c.k1 = min(c.k0 + chunk, len);
  return c.k0 < c.k1;
}

// Block (chunk, kv head, group): the keys of chunk `split` of the group's prefix for its
// members in batches of G / group, read through the batch's first member's table (the host
// groups only members whose tables hold the same blocks there). CUDA cores, as the decode
// kernel (Capabilities::shared_prefix_mma off).
template <int D, int G>
__global__ void __launch_bounds__(kDecodeThreads, 1)
    paged_decode_prefix_kernel(const AttentionArgs a, int slots, float* part_o, float* part_ml) {
  const int split = int(blockIdx.x), kvh = int(blockIdx.y);
  const int group = int(a.hq / a.hkv), per = G / group;
  // The loop's state lives in shared memory: decode_attend at G = 32 takes every register.
  __shared__ PrefixChunk c;
  __shared__ int first;
  if (threadIdx.x == 0) {
    if (!prefix_chunk(a, int(blockIdx.z), split, c)) c.begin = c.stop = 0;
    first = c.begin;
  }
  __syncthreads();
  while (first < c.stop) {
    const int end = min(c.stop, first + per);
    const MemberRows rows{a.cu_q, a.prefix_members + first, a.hq, group,
                          kvh,    (end - first) * group};
    const int32_t* table = a.block_tables + int64_t(a.prefix_members[first]) * a.table_stride;
    decode_attend<D, G>(a, rows, kvh, table, c.k0, c.k1, false, split, slots, part_o, part_ml);
    __syncthreads();  // every thread has read `first`; the batch is done with shared memory
    if (threadIdx.x == 0) first += per;
    __syncthreads();
  }
}

// The prefix kernel on the tensor cores (Capabilities::shared_prefix_mma): the same blocks as
// paged_decode_prefix_kernel with up to kAttnRows (member, head) rows in 4 warps of 16, run
// through the prefill kernel's tile loop (attention.cu): S = Q K^T and O += P V on mma.sync
// with P rounded to bf16 (kCudaAttention's error, not the decode kernel's), the online softmax
// of softmax_tile with the keys past the chunk masked, then unnormalized partials as the
// decode kernel writes them (the max in the log2 domain of the scaled scores).
// Keys per tile of the tensor-core prefix kernel (the prefill kernel's: smaller at D = 256).
constexpr int prefix_tile(int d) {
  return d == 256 ? 32 : 64;
}
static_assert(kDecodeMinChunk % 64 == 0, "prefix chunks start on a tile");

template <int D, int BC>
struct PrefixMmaCfg {
  static constexpr int kLd = D + 8;                                  // smem row stride (bf16)
  static constexpr int kSmemBytes = (kAttnRows + 4 * BC) * kLd * 2;  // Q + 2 stages of K and V
};

// One batch of the group's members, [first, end), of the chunk c.
template <int D, int BC>
__device__ __forceinline__ void prefix_mma_batch(const AttentionArgs& a, int slots, float* part_o,
                                                 float* part_ml, int split, int kvh,
                                                 const PrefixChunk& c, int first, int end) {
  constexpr int kLd = PrefixMmaCfg<D, BC>::kLd, kChunks = D / 8;
  constexpr bool kQInRegs = D <= 128;
  constexpr float kLog2e = 1.4426950408889634f;
  const int group = int(a.hq / a.hkv);
  const int k0 = c.k0, k1 = c.k1;  // a chunk is a multiple of BC keys
  const int count = (end - first) * group;
  const MemberRows rows{a.cu_q, a.prefix_members + first, a.hq, group, kvh, count};
  const int32_t* table = a.block_tables + int64_t(a.prefix_members[first]) * a.table_stride;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);  // [kAttnRows][kLd]
  bf16* ks = qs + kAttnRows * kLd;               // [2][BC][kLd]
  bf16* vs = ks + 2 * BC * kLd;                  // [2][BC][kLd]
  const int tid = int(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, tq = lane % 4;

  for (int c = tid; c < kAttnRows * kChunks; c += kAttnThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool ok = r < count;  // rows past the batch: zeros, never written
    cp_async16(qs + r * kLd + col, a.q + (ok ? rows.head(r) : 0) * D + col, ok);
  }
  cp_async_commit();
  auto load_kv = [&](int tile, int stage) {
    for (int c = tid; c < BC * kChunks; c += kAttnThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const int key = tile * BC + r;
      const bool ok = key < k1;  // past the chunk: zeros, the source is not read
      const int64_t slot = ok ? int64_t(table[key >> kPagedBlockShift]) * kPagedBlockSize +
                                    (key & (kPagedBlockSize - 1))
                              : 0;
      const int64_t head_row = slot * a.hkv + kvh, off = head_row * D + col;
      if (a.k8 != nullptr) {  // FP8 pool: dequantized on the way in
        load_fp8_chunk(ks + (stage * BC + r) * kLd + col, a.k8 + off, a.k_scale + head_row, ok);
        load_fp8_chunk(vs + (stage * BC + r) * kLd + col, a.v8 + off, a.v_scale + head_row, ok);
      } else {
        cp_async16(ks + (stage * BC + r) * kLd + col, a.k + off, ok);
        cp_async16(vs + (stage * BC + r) * kLd + col, a.v + off, ok);
      }
    }
  };
  const int tile0 = k0 / BC, tile1 = (k1 - 1) / BC;
  load_kv(tile0, 0);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();
  uint32_t qa[kQInRegs ? D / 16 : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) query_fragment<D>(qs, warp, lane, kk, qa[kk]);
  }
  // softmax_tile's causal mask with every row at key k1 - 1 masks the keys past the chunk
  // (the shared path runs only without a window).
  QueryBlock b{};
  b.slot[0] = b.slot[1] = b.warp_slot_min = k1 - 1;

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int tile = tile0; tile <= tile1; ++tile) {
    const int stage = (tile - tile0) & 1;
    if (tile < tile1) {
      load_kv(tile + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();

    float s[BC / 8][4];
#pragma unroll
    for (int j = 0; j < BC / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    const bf16* kst = ks + stage * BC * kLd;
    const int mi = lane / 8, mr = lane % 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qf[4];
      if constexpr (kQInRegs) {
        qf[0] = qa[kk][0], qf[1] = qa[kk][1], qf[2] = qa[kk][2], qf[3] = qa[kk][3];
      } else {
        query_fragment<D>(qs, warp, lane, kk, qf);
      }
#pragma unroll
      for (int j = 0; j < BC / 8; j += 2) {
        uint32_t kb[4];  // b-fragments of key tiles j and j + 1
        ldmatrix_x4(kb, kst + (j * 8 + (mi / 2) * 8 + mr) * kLd + kk * 16 + (mi % 2) * 8);
        mma_bf16(s[j], qf, kb[0], kb[1]);
        mma_bf16(s[j + 1], qf, kb[2], kb[3]);
      }
    }
    softmax_tile<BC, D>(s, o, m, l, a, b, tile * BC, tq);
    const bf16* vst = vs + stage * BC * kLd;
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t pa[4];
      p_fragment<BC>(s, kk, pa);
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t vb[4];  // b-fragments of d tiles dn and dn + 1
        ldmatrix_x4_trans(vb, vst + (kk * 16 + (mi % 2) * 8 + mr) * kLd + (dn + mi / 2) * 8);
        mma_bf16(o[dn], pa, vb[0], vb[1]);
        mma_bf16(o[dn + 1], pa, vb[2], vb[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }

  // softmax_scores keeps m in the raw score domain: the log2-domain max is m * mul.
  const float mul = a.softcap > 0.0f ? 1.0f : a.scale * kLog2e;
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    const int r = warp * 16 + g + 8 * rr;
    if (r >= count) continue;
    const int64_t cell = rows.head(r) * slots + split;
    float* dst = part_o + cell * D + tq * 2;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<float2*>(dst + dn * 8) = make_float2(o[dn][2 * rr], o[dn][2 * rr + 1]);
    if (tq == 0) {
      part_ml[cell * 2] = m[rr] * mul;
      part_ml[cell * 2 + 1] = l[rr];
    }
  }
}

// Block (chunk, kv head, group), the group's members in batches of kAttnRows / group rows.
template <int D, int BC>
__global__ void __launch_bounds__(kAttnThreads)
    paged_decode_prefix_mma_kernel(const AttentionArgs a, int slots, float* part_o,
                                   float* part_ml) {
  const int split = int(blockIdx.x), kvh = int(blockIdx.y);
  const int per = kAttnRows / int(a.hq / a.hkv);
  PrefixChunk c;
  if (!prefix_chunk(a, int(blockIdx.z), split, c)) return;
  for (int first = c.begin; first < c.stop; first += per) {
    if (first > c.begin) __syncthreads();  // the last batch is done with shared memory
    prefix_mma_batch<D, BC>(a, slots, part_o, part_ml, split, kvh, c, first,
                            min(c.stop, first + per));
  }
}

// out = sum_i 2^(m_i - M) o_i / sum_i 2^(m_i - M) l_i over the chunks i in slot order (a
// shared prefix's chunks first), for rows of more than one chunk. Block (kCombineHeads heads,
// sequence): a warp per head, lanes over the D columns (5-9 us a layer less than a block per
// (head, sequence) with threads over D at bench generate's shapes, docs/PERFORMANCE.md).
constexpr int kCombineHeads = 4;
__global__ void __launch_bounds__(kCombineHeads* kWarp)
    paged_decode_combine_kernel(const AttentionArgs a, int slots, const float* part_o,
                                const float* part_ml) {
  const int seq = int(blockIdx.y), tid = int(threadIdx.x);
  const int lane = tid % kWarp, h = int(blockIdx.x) * int(blockDim.x / kWarp) + tid / kWarp;
  DecodeRow r;
  if (h >= int(a.hq) || !decode_row(a, seq, r) || r.slots == 1) return;
  const int64_t head = int64_t(r.row) * a.hq + h;
  const float* ml = part_ml + head * slots * 2;
  float mx = -INFINITY;
  for (int i = 0; i < r.slots; ++i) mx = fmaxf(mx, ml[2 * i]);
  float sum = 0.0f;
  for (int i = 0; i < r.slots; ++i) sum += exp2f(ml[2 * i] - mx) * ml[2 * i + 1];
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  const float* po = part_o + head * slots * a.d;
  float amax = 0.0f;
  for (int d = lane; d < int(a.d); d += kWarp) {
    float acc = 0.0f;
    for (int i = 0; i < r.slots; ++i) acc += exp2f(ml[2 * i] - mx) * po[i * a.d + d];
    const bf16 v = __float2bfloat16_rn(acc * inv);
    a.out[head * a.d + d] = v;
    amax = fmaxf(amax, fabsf(__bfloat162float(v)));
  }
  if (a.amax != nullptr) {
    amax = warp_max(amax);
    if (lane == 0) atomic_max_nonneg(a.amax, amax);
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

// One warp per (token, kv head) row: its amax, the recipe's scale, then the codes.
__global__ void store_kv_fp8_kernel(const bf16* k, int64_t k_stride, const bf16* v,
                                    int64_t v_stride, const int32_t* slot_mapping, int64_t t,
                                    int64_t hkv, int64_t d, uint8_t* k_codes, uint8_t* v_codes,
                                    float* k_scale, float* v_scale, int64_t slots) {
  const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp;
  const int warps = int(blockDim.x) / kWarp;
  for (int64_t i = blockIdx.x; i < t; i += gridDim.x) {
    const int64_t slot = slot_mapping[i];
    if (slot < 0 || slot >= slots) continue;  // padding (or a bad slot: never out of the pool)
    for (int64_t w = warp; w < 2 * hkv; w += warps) {
      const bool is_v = w >= hkv;
      const int64_t h = is_v ? w - hkv : w;
      const bf16* x = (is_v ? v + i * v_stride : k + i * k_stride) + h * d;
      float amax = 0.0f;
      for (int64_t e = lane; e < d; e += kWarp) amax = fmaxf(amax, fabsf(__bfloat162float(x[e])));
      const float scale = fp8_scale(warp_max(amax));
      const Fp8Divisor div = fp8_divisor(scale);
      uint8_t* codes = (is_v ? v_codes : k_codes) + (slot * hkv + h) * d;
      for (int64_t e = lane; e < d; e += kWarp) codes[e] = fp8_code(__bfloat162float(x[e]), div);
      if (lane == 0) (is_v ? v_scale : k_scale)[slot * hkv + h] = scale;
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

template <int D, int G>
cudaError_t set_decode_smem_limit() {
  return cudaFuncSetAttribute(paged_decode_kernel<D, G>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              DecodeCfg<D, G>::kSmemBytes);
}
template <int D>
cudaError_t set_decode_smem_limits() {
  const cudaError_t e[] = {set_decode_smem_limit<D, 1>(),
                           set_decode_smem_limit<D, 2>(),
                           set_decode_smem_limit<D, 4>(),
                           set_decode_smem_limit<D, 8>(),
                           set_decode_smem_limit<D, 16>(),
                           cudaFuncSetAttribute(paged_decode_prefix_kernel<D, kPrefixRows>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                DecodeCfg<D, kPrefixRows>::kSmemBytes),
                           cudaFuncSetAttribute(paged_decode_prefix_mma_kernel<D, prefix_tile(D)>,
                                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                PrefixMmaCfg<D, prefix_tile(D)>::kSmemBytes),
                           paged_decode_mma_init(D)};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return x;
  return cudaSuccess;
}

template <int D, int G>
void launch_decode_g(const AttentionArgs& a, int max_splits, int slots, float* part_o,
                     float* part_ml, cudaStream_t s) {
  const dim3 grid(unsigned(max_splits), unsigned(a.hkv), unsigned(a.num_seqs));
  paged_decode_kernel<D, G>
      <<<grid, kDecodeThreads, DecodeCfg<D, G>::kSmemBytes, s>>>(a, slots, part_o, part_ml);
}

template <int D>
void launch_prefix(const AttentionArgs& a, int max_splits, int slots, bool tensor_cores,
                   float* part_o, float* part_ml, cudaStream_t s) {
  static_assert(kPrefixRows >= kPagedDecodeMaxGroup && kAttnRows >= kPagedDecodeMaxGroup,
                "a prefix batch holds a whole group");
  // The grid's z runs over the groups' capacity; empty groups return at once.
  const int prefix_splits = max_splits < kPrefixMaxSplits ? max_splits : kPrefixMaxSplits;
  const dim3 grid(unsigned(prefix_splits), unsigned(a.hkv), unsigned(a.prefix_groups));
  if (tensor_cores) {
    constexpr int BC = prefix_tile(D);
    paged_decode_prefix_mma_kernel<D, BC>
        <<<grid, kAttnThreads, PrefixMmaCfg<D, BC>::kSmemBytes, s>>>(a, slots, part_o, part_ml);
  } else {
    paged_decode_prefix_kernel<D, kPrefixRows>
        <<<grid, kDecodeThreads, DecodeCfg<D, kPrefixRows>::kSmemBytes, s>>>(a, slots, part_o,
                                                                             part_ml);
  }
}

template <int D>
DecodeGrid launch_rows(const AttentionArgs& a, int max_splits, int slots, bool decode_mma,
                       float* part_o, float* part_ml, cudaStream_t s) {
  static_assert(kPagedDecodeMaxGroup == 16, "the group buckets below");
  const int64_t group = a.hq / a.hkv;
  if (decode_mma && D <= kMmaDecodeMaxD)
    return launch_paged_decode_mma(a, max_splits, slots, part_o, part_ml, s);
  if (group <= 1)
    launch_decode_g<D, 1>(a, max_splits, slots, part_o, part_ml, s);
  else if (group <= 2)
    launch_decode_g<D, 2>(a, max_splits, slots, part_o, part_ml, s);
  else if (group <= 4)
    launch_decode_g<D, 4>(a, max_splits, slots, part_o, part_ml, s);
  else if (group <= 8)
    launch_decode_g<D, 8>(a, max_splits, slots, part_o, part_ml, s);
  else
    launch_decode_g<D, 16>(a, max_splits, slots, part_o, part_ml, s);
  return {};
}

// f<D>() for the head dims attention_supports(); nothing for others (paged_decode_supports()
// is checked by the caller).
template <typename F>
void by_head_dim(int64_t d, F&& f) {
  switch (d) {
    case 32:
      f.template operator()<32>();
      break;
    case 64:
      f.template operator()<64>();
      break;
    case 128:
      f.template operator()<128>();
      break;
    case 256:
      f.template operator()<256>();
      break;
    default:
      break;
  }
}

void launch_combine(const AttentionArgs& a, int slots, float* part_o, float* part_ml,
                    cudaStream_t s) {
  if (slots <= 1) return;
  const int heads = int(a.hq) < kCombineHeads ? int(a.hq) : kCombineHeads;
  paged_decode_combine_kernel<<<dim3(unsigned(ceil_div(a.hq, heads)), unsigned(a.num_seqs)),
                                unsigned(heads * kWarp), 0, s>>>(a, slots, part_o, part_ml);
  FP8RL_LAUNCH_CHECK("paged_decode_combine");
}

DecodeGrid launch_rows_all(const AttentionArgs& a, int max_splits, int slots, bool decode_mma,
                           float* part_o, float* part_ml, cudaStream_t s) {
  DecodeGrid g;
  by_head_dim(a.d, [&]<int D>() {
    g = launch_rows<D>(a, max_splits, slots, decode_mma, part_o, part_ml, s);
  });
  FP8RL_LAUNCH_CHECK("paged_decode");
  return g;
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
  const cudaError_t e[] = {set_decode_smem_limits<32>(), set_decode_smem_limits<64>(),
                           set_decode_smem_limits<128>(), set_decode_smem_limits<256>()};
  for (cudaError_t x : e)
    if (x != cudaSuccess) return x;
  return cudaSuccess;
}

int paged_decode_slots(int64_t max_context_len) {
  // A shared prefix of P keys and the L after it take at most ceil(P / 256) + ceil(L / 256)
  // <= ceil((P + L) / 256) + 1 chunks, and at most kPrefixMaxSplits each.
  const int n = paged_decode_max_splits(max_context_len) + 1;
  return n < kPagedDecodeMaxSplits ? n : kPagedDecodeMaxSplits;
}

DecodeGrid launch_paged_decode(const AttentionArgs& a, int max_splits, bool decode_mma,
                               float* part_o, float* part_ml, cudaStream_t s) {
  if (a.num_seqs == 0) return {};
  AttentionArgs plain = a;
  plain.prefix_cu_members = plain.prefix_members = plain.prefix_lens = nullptr;
  plain.prefix_len_of_seq = nullptr;
  plain.prefix_groups = 0;
  const DecodeGrid g =
      launch_rows_all(plain, max_splits, max_splits, decode_mma, part_o, part_ml, s);
  launch_combine(plain, max_splits, part_o, part_ml, s);
  return g;
}

DecodeGrid launch_paged_decode_shared(const AttentionArgs& a, int max_splits, int slots,
                                      bool tensor_cores, bool decode_mma, float* part_o,
                                      float* part_ml, cudaStream_t s) {
  if (a.num_seqs == 0) return {};
  if (a.prefix_groups > 0) {
    by_head_dim(a.d, [&]<int D>() {
      launch_prefix<D>(a, max_splits, slots, tensor_cores, part_o, part_ml, s);
    });
    FP8RL_LAUNCH_CHECK("paged_decode_prefix");
  }
  const DecodeGrid g = launch_rows_all(a, max_splits, slots, decode_mma, part_o, part_ml, s);
  launch_combine(a, slots, part_o, part_ml, s);
  return g;
}

void launch_store_kv(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                     const int32_t* slot_mapping, int64_t t, int64_t row, bf16* k_pool,
                     bf16* v_pool, int64_t slots, cudaStream_t s) {
  if (t == 0) return;
  store_kv_kernel<<<grid_for(t, 1, 65535), 128, 0, s>>>(k, k_stride, v, v_stride, slot_mapping, t,
                                                        row, k_pool, v_pool, slots);
  FP8RL_LAUNCH_CHECK("store_kv");
}

void launch_store_kv_fp8(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                         const int32_t* slot_mapping, int64_t t, int64_t hkv, int64_t d,
                         uint8_t* k_codes, uint8_t* v_codes, float* k_scale, float* v_scale,
                         int64_t slots, cudaStream_t s) {
  if (t == 0) return;
  store_kv_fp8_kernel<<<grid_for(t, 1, 65535), 128, 0, s>>>(
      k, k_stride, v, v_stride, slot_mapping, t, hkv, d, k_codes, v_codes, k_scale, v_scale, slots);
  FP8RL_LAUNCH_CHECK("store_kv_fp8");
}

void launch_zero_padding_rows(bf16* out, int64_t t, int64_t row, const int32_t* cu_q_end,
                              cudaStream_t s) {
  if (t == 0) return;
  zero_padding_rows_kernel<<<grid_for(t, 1, 64), 128, 0, s>>>(out, t, row, cu_q_end);
  FP8RL_LAUNCH_CHECK("zero_padding_rows");
}

}  // namespace fp8rl::cuda
