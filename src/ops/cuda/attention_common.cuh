// Pieces shared by the two causal attention kernels (attention.cu: mma.sync, any sm_80+ GPU;
// attention_wgmma.cu: Hopper warpgroup MMA) and the tiled backward (attention_backward_mma.cu):
// the query block's key range, async copies, ldmatrix and the mma.sync wrapper, the Q
// fragments, the online-softmax update of one key tile, and the output rows. Both kernels
// give each block 64 query rows of one head in 4 warps of 16 rows, with the mma.m16n8k16
// fragment layouts (lane = 4 g + tq): a score/output accumulator [n/8][4] holds, for n-tile
// j, (row g, cols 8j + 2tq, +1) in [j][0..1] and (row g + 8, same cols) in [j][2..3].
#pragma once

#include "ops/cuda/common.cuh"

namespace fp8rl::cuda {

constexpr int kAttnRows = 64;  // query rows per block
constexpr int kAttnThreads = 128;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill, the source is not read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
// 4 bytes (a float), zero-filled when !valid.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// 8 consecutive codes of an FP8 pool's row (two words, in element order) as bf16(code * scale),
// the product in fp32 (ops.h paged_attention).
__device__ __forceinline__ uint4 fp8_chunk_bf16(uint2 c, float sc) {
  uint4 out;
  const uint32_t w[2] = {c.x, c.y};
  uint32_t* o = &out.x;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = w[i / 2] >> (16 * (i % 2));
    const __nv_bfloat162 h =
        __floats2bfloat162_rn(__fmul_rn(fp8_value(uint8_t(word & 0xff)), sc),
                              __fmul_rn(fp8_value(uint8_t((word >> 8) & 0xff)), sc));
    o[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  return out;
}
// The same into shared memory, read from the pool; zeros when !valid (codes not read).
// Synchronous: the caller's __syncthreads publishes it like a completed cp.async.
__device__ __forceinline__ void load_fp8_chunk(bf16* smem, const uint8_t* codes, const float* scale,
                                               bool valid) {
  *reinterpret_cast<uint4*>(smem) =
      valid ? fp8_chunk_bf16(*reinterpret_cast<const uint2*>(codes), *scale)
            : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// The block's query rows and the key tiles of width BC they can see. Paged (a.cu_q set): the
// rows of sequence blockIdx.z, keys through its block table; the key tiles still run over
// logical positions, so a row's result is the contiguous cache's bit for bit.
struct QueryBlock {
  int q0;                // first query row, counted from row0
  int t;                 // the rows of this sequence (a.t unless paged)
  int row0;              // row of q / out of the sequence's first query
  int64_t h, kvh;        // query head, its kv head
  int kv_hi, kv_lo;      // last / first cache slot any row of the block sees
  int tile0, tile1;      // key tiles [tile0, tile1]
  int slot[2];           // this thread's two rows' cache slots (rows q0 + 16 warp + g, + 8)
  int warp_slot_min;     // the warp's first row's slot
  const int32_t* table;  // paged: the sequence's block table; null: contiguous cache

  // Rows of query head h; warp (0..3) of the 4 that own them, lane group g. A block with
  // q0 >= t has no rows (paged sequences shorter than the grid): the caller returns.
  template <int BC>
  __device__ static QueryBlock make(const AttentionArgs& a, int64_t h, int warp, int g) {
    QueryBlock b;
    int t = int(a.t), first = int(a.first);
    const int window = int(a.window);
    b.row0 = 0;
    b.table = nullptr;
    if (a.cu_q != nullptr) {
      const int seq = int(blockIdx.z);
      b.row0 = a.cu_q[seq];
      t = a.cu_q[seq + 1] - b.row0;
      first = a.context_lens[seq] - t;
      b.table = a.block_tables + int64_t(seq) * a.table_stride;
    }
    b.t = t;
    // Later query blocks see more keys: start them first so the tail of the grid is short.
    b.q0 = int(gridDim.x - 1 - blockIdx.x) * kAttnRows;
    b.h = h;
    b.kvh = b.h / (a.hq / a.hkv);
    b.kv_hi = first + min(b.q0 + kAttnRows, t) - 1;
    b.kv_lo = window > 0 ? max(0, first + b.q0 - window + 1) : 0;
    b.tile0 = b.kv_lo / BC;
    b.tile1 = b.kv_hi / BC;
    b.warp_slot_min = first + b.q0 + warp * 16;
    b.slot[0] = b.warp_slot_min + g;
    b.slot[1] = b.slot[0] + 8;
    return b;
  }
  // The cache row (slot) of key position `key`. The block size is the compile-time
  // kPagedBlockSize (shift and mask; a runtime division per 16-byte copy cost the prefill
  // kernels a third of their speed).
  __device__ int64_t kv_row(int key) const {
    return table == nullptr ? int64_t(key)
                            : int64_t(table[key >> kPagedBlockShift]) * kPagedBlockSize +
                                  (key & (kPagedBlockSize - 1));
  }
  // Whether key tile [kbase, kbase + BC) needs the causal or window mask for this warp's rows.
  template <int BC>
  __device__ bool needs_mask(int kbase, int window) const {
    return kbase + BC - 1 > warp_slot_min || (window > 0 && kbase <= warp_slot_min + 15 - window);
  }
};

// The 64 query rows of head b.h into padded shared memory [64][D + 8] by the 128 threads that
// own them (tid 0..127; cp.async, the caller commits); rows past b.t are zero.
template <int D>
__device__ __forceinline__ void load_query_rows(const AttentionArgs& a, const QueryBlock& b,
                                                bf16* qs, int tid) {
  constexpr int kChunks = D / 8, kLd = D + 8;
  for (int c = tid; c < kAttnRows * kChunks; c += kAttnThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int tok = b.q0 + r;
    cp_async16(qs + r * kLd + col,
               a.q + (int64_t(b.row0 + (tok < b.t ? tok : 0)) * a.hq + b.h) * D + col, tok < b.t);
  }
}

// The A fragments of this warp's 16 query rows, k-step kk (16 columns), from [64][D + 8].
template <int D>
__device__ __forceinline__ void query_fragment(const bf16* qs, int warp, int lane, int kk,
                                               uint32_t (&qf)[4]) {
  ldmatrix_x4(qf, qs + (warp * 16 + (lane % 16)) * (D + 8) + (lane / 16) * 8 + kk * 16);
}

// 2^x on the SFU (ex2.approx, flush-to-zero): exp2f's extra range handling costs more than
// its accuracy is worth here, since every P is rounded to bf16 right after.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The online-softmax step for one key tile, without touching the output: s holds raw q.k
// scores of the tile's BC keys; on return it holds P = 2^(score - running max) in the log2
// domain, the running max m and sum l are updated, and alpha[r] is the factor by which the
// output accumulated so far must be rescaled (rescale_output). Scores stay unscaled until the
// exponent, where scale * log2(e) is folded into one FMA (softcap: applied first, in place).
template <int BC>
__device__ __forceinline__ void softmax_scores(float (&s)[BC / 8][4], float (&m)[2], float (&l)[2],
                                               float (&alpha)[2], const AttentionArgs& a,
                                               const QueryBlock& b, int kbase, int tq) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int window = int(a.window);
  const bool capped = a.softcap > 0.0f;
  const float mul = capped ? 1.0f : a.scale * kLog2e;
  const bool need_mask = b.needs_mask<BC>(kbase, window);
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int j = 0; j < BC / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v = s[j][e];
      if (capped) v = a.softcap * tanhf(v * a.scale / a.softcap) * kLog2e;
      if (need_mask) {
        const int key = kbase + j * 8 + tq * 2 + (e & 1);
        const int sl = b.slot[e / 2];
        if (key > sl || (window > 0 && key <= sl - window)) v = -INFINITY;
      }
      s[j][e] = v;
      mx[e / 2] = fmaxf(mx[e / 2], v);
    }
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    // A row with nothing visible yet keeps base 0: its P are all 0, never NaN.
    base[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * mul;
    alpha[r] = exp2_approx(m[r] * mul - base[r]);
    m[r] = mx[r];
    l[r] *= alpha[r];
  }
#pragma unroll
  for (int j = 0; j < BC / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] = exp2_approx(fmaf(s[j][e], mul, -base[e / 2]));
      l[e / 2] += s[j][e];
    }
}

template <int D>
__device__ __forceinline__ void rescale_output(float (&o)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int dn = 0; dn < D / 8; ++dn) {
    o[dn][0] *= alpha[0];
    o[dn][1] *= alpha[0];
    o[dn][2] *= alpha[1];
    o[dn][3] *= alpha[1];
  }
}

// Both steps at once, for a kernel that does not overlap them with the tile's P V.
template <int BC, int D>
__device__ __forceinline__ void softmax_tile(float (&s)[BC / 8][4], float (&o)[D / 8][4],
                                             float (&m)[2], float (&l)[2], const AttentionArgs& a,
                                             const QueryBlock& b, int kbase, int tq) {
  float alpha[2];
  softmax_scores<BC>(s, m, l, alpha, a, b, kbase, tq);
  rescale_output<D>(o, alpha);
}

// P as the bf16 A operand of k-step kk (16 keys) of O += P V.
template <int BC>
__device__ __forceinline__ void p_fragment(const float (&s)[BC / 8][4], int kk, uint32_t (&pa)[4]) {
  pa[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
  pa[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
  pa[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
  pa[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

// out rows = o / l in bf16, for this thread's two rows that exist; with a.amax, the warp's
// max |out| (of the rounded values) is max-reduced into it.
template <int D>
__device__ __forceinline__ void store_output_rows(const float (&o)[D / 8][4], float (&l)[2],
                                                  const float (&m)[2], const AttentionArgs& a,
                                                  const QueryBlock& b, int warp, int g, int tq) {
  float amax = 0.0f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int row = b.q0 + warp * 16 + g + 8 * r;
    if (row >= b.t) continue;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    if (a.lse != nullptr && tq == 0) {
      // P = 2^(v mul - m mul) summed to l (softmax_scores), so ln sum exp(score) is
      // (m mul + log2 l) ln 2, with the score domain's mul as there.
      constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
      const float mul = a.softcap > 0.0f ? 1.0f : a.scale * kLog2e;
      a.lse[int64_t(b.row0 + row) * a.hq + b.h] =
          l[r] > 0.0f ? (m[r] * mul + log2f(l[r])) * kLn2 : 0.0f;
    }
    bf16* dst = a.out + (int64_t(b.row0 + row) * a.hq + b.h) * D + tq * 2;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(o[dn][2 * r] * inv, o[dn][2 * r + 1] * inv);
      *reinterpret_cast<__nv_bfloat162*>(dst + dn * 8) = v;
      amax = fmaxf(amax, fmaxf(fabsf(__low2float(v)), fabsf(__high2float(v))));
    }
  }
  if (a.amax != nullptr) {
    amax = warp_max(amax);
    if ((threadIdx.x % kWarp) == 0) atomic_max_nonneg(a.amax, amax);
  }
}

}  // namespace fp8rl::cuda
