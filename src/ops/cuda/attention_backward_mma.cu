// FlashAttention-2's backward (Dao 2023, Algorithm 2) on the tensor cores: mma.sync m16n8k16
// with bf16 operands and fp32 accumulation (any sm_80+ GPU), for full-prefill batches over a
// paged bf16 pool. Deterministic: no atomics, every output row is written by one block in a
// fixed order, so results do not depend on scheduling. Three launches:
//
//   prepare: dout rounded to bf16 once (the MMAs' operand) and Delta_i = dout_i . out_i from
//            the rounded values (so sum_j P_ij dP_ij and Delta_i see the same dout); rows of
//            dq, dk, dv outside the sequences zeroed.
//   dk/dv:   a block per (key tile of 64, kv head, sequence) walks the query tiles that see its
//            keys (causal, sliding window) and the query heads of its group: S^T = K Q^T and
//            dP^T = V dO^T, then P^T = exp(softcap(S^T scale) - lse) masked, and
//            dS^T = P^T (dP^T - Delta) (times softcap's 1 - tanh^2), both rounded to bf16 into
//            shared memory; dV += P^T dO and dK += dS^T Q in registers, dK scaled once at the
//            end. 8 warps: for the scores warp w owns keys 16 (w % 4) and half of the query
//            tile's columns; for the accumulators the same keys and half of D (w / 4).
//   dq:      a block per (query tile of 64, query head, sequence) walks the key tiles its rows
//            see: S and dP again (4 warps of 16 rows, as the forward), dS in registers as the
//            bf16 A operand of dQ += dS K.
//
// The exponent is the reference's exp(s - lse) (ops/cpu/backward_attention.cpp) as
// 2^((s - lse) log2 e) on the SFU; masked pairs get P = 0 by selection, so nothing from a
// masked or zero-filled key reaches a sum. Fragment layouts and helpers: attention_common.cuh.
#include "ops/cuda/attention_backward.h"
#include "ops/cuda/attention_common.cuh"

namespace fp8rl::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kKeyTile = 64;  // dk/dv kernel: keys per block
constexpr int kDkvThreads = 256;
constexpr int kDqThreads = kAttnThreads;  // 4 warps of 16 query rows
constexpr int kPrepareThreads = 256;

// Shared memory of the dk/dv kernel: K, V [64][D + 8]; 2 stages of Q and dO [R][D + 8];
// P^T, dS^T [64][R + 8] bf16; 2 stages of lse and Delta [R] f32. R = query rows per step.
template <int D>
struct DkvCfg {
  static constexpr int kRows = D <= 128 ? 64 : 32;
  static constexpr int kLd = D + 8;
  static constexpr int kLdP = kRows + 8;
  static constexpr int kSmemBytes =
      (2 * kKeyTile + 4 * kRows) * kLd * 2 + 2 * kKeyTile * kLdP * 2 + 4 * kRows * 4;
};

// Shared memory of the dq kernel: Q, dO [64][D + 8]; 2 stages of K and V [C][D + 8].
template <int D>
struct DqCfg {
  static constexpr int kKeys = D <= 128 ? 64 : 32;
  static constexpr int kLd = D + 8;
  static constexpr int kSmemBytes = (2 * kAttnRows + 4 * kKeys) * kLd * 2;
};

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  const int n = valid ? 4 : 0;  // 0: zero-fill, the source is not read
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}

// Key position -> pool row of kv head g (kPagedBlockSize slots per block: a shift and a mask).
__device__ __forceinline__ int64_t pool_row(const int32_t* table, int key, int64_t hkv, int64_t g) {
  const int64_t slot =
      int64_t(table[key >> kPagedBlockShift]) * kPagedBlockSize + (key & (kPagedBlockSize - 1));
  return slot * hkv + g;
}

// The sequence of blockIdx.z: its first row, its length, its block table.
struct Sequence {
  int row0, n;
  const int32_t* table;
};
__device__ __forceinline__ Sequence sequence(const AttentionBackwardArgs& a) {
  const int s = int(blockIdx.z);
  return {a.cu_q[s], a.cu_q[s + 1] - a.cu_q[s], a.block_tables + int64_t(s) * a.table_stride};
}

// Whether query position i sees key position j (full prefill: position = index in sequence).
__device__ __forceinline__ bool visible(int i, int j, int window) {
  return j <= i && (window <= 0 || j > i - window);
}

// P and dS of one score as the reference computes them (pair_grad), from the raw q.k: the
// score scale * dot (softcapped), P = exp(score - lse), dS = P (dP - Delta) cap'.
struct PairGrad {
  float p, ds;
};
__device__ __forceinline__ PairGrad pair_grad(float dot, float dp, float lse, float delta,
                                              const AttentionBackwardArgs& a, bool seen) {
  float s = dot * a.scale, cap_grad = 1.0f;
  if (a.softcap > 0.0f) {
    const float th = tanhf(s / a.softcap);
    s = a.softcap * th;
    cap_grad = 1.0f - th * th;
  }
  const float p = seen ? exp2_approx((s - lse) * kLog2e) : 0.0f;
  return {p, p * (dp - delta) * cap_grad};
}

// dout -> bf16 and Delta, a warp per (row, query head); rows outside the sequences get
// dq = 0 and, for the first hkv heads, dk = dv = 0.
__global__ void __launch_bounds__(kPrepareThreads)
    prepare_kernel(const AttentionBackwardArgs a, const bf16* out, const float* dout, bf16* dout_bf,
                   float* delta, float* dq, float* dk, float* dv) {
  const int64_t row = int64_t(blockIdx.x) * (kPrepareThreads / kWarp) + threadIdx.x / kWarp;
  if (row >= a.t * a.hq) return;
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t base = row * a.d;
  float s = 0.0f;
  for (int64_t i = lane * 4; i < a.d; i += 4 * kWarp) {  // d % 8 == 0 (checked by the host)
    const float4 x = *reinterpret_cast<const float4*>(dout + base + i);
    const __nv_bfloat162 lo = __floats2bfloat162_rn(x.x, x.y), hi = __floats2bfloat162_rn(x.z, x.w);
    uint2 packed;
    packed.x = *reinterpret_cast<const uint32_t*>(&lo);
    packed.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(dout_bf + base + i) = packed;
    const uint2 o = *reinterpret_cast<const uint2*>(out + base + i);
    const __nv_bfloat162 o_lo = *reinterpret_cast<const __nv_bfloat162*>(&o.x);
    const __nv_bfloat162 o_hi = *reinterpret_cast<const __nv_bfloat162*>(&o.y);
    s = __fmaf_rn(__low2float(lo), __low2float(o_lo), s);
    s = __fmaf_rn(__high2float(lo), __high2float(o_lo), s);
    s = __fmaf_rn(__low2float(hi), __low2float(o_hi), s);
    s = __fmaf_rn(__high2float(hi), __high2float(o_hi), s);
  }
  s = warp_sum(s);
  if (lane == 0) delta[row] = s;
  const int64_t t = row / a.hq, h = row % a.hq;
  if (a.num_seqs > 0 && t >= a.cu_q[0] && t < a.cu_q[a.num_seqs]) return;
  for (int64_t i = lane; i < a.d; i += kWarp) {
    dq[base + i] = 0.0f;
    if (h < a.hkv) {
      dk[(t * a.hkv + h) * a.d + i] = 0.0f;
      dv[(t * a.hkv + h) * a.d + i] = 0.0f;
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kDkvThreads, 1)
    dkv_kernel(const AttentionBackwardArgs a, const bf16* dout_bf, const float* lse,
               const float* delta, float* dk, float* dv) {
  using Cfg = DkvCfg<D>;
  constexpr int kRows = Cfg::kRows, kLd = Cfg::kLd, kLdP = Cfg::kLdP, kChunks = D / 8;
  constexpr int kCols = kRows / 2;  // query columns of a warp's scores
  constexpr int kHalfD = D / 2;     // dims of a warp's dK, dV
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* ks = reinterpret_cast<bf16*>(smem_raw);                     // [64][kLd]
  bf16* vs = ks + kKeyTile * kLd;                                   // [64][kLd]
  bf16* qs = vs + kKeyTile * kLd;                                   // [2][kRows][kLd]
  bf16* dos = qs + 2 * kRows * kLd;                                 // [2][kRows][kLd]
  bf16* pts = dos + 2 * kRows * kLd;                                // [64][kLdP]  P^T
  bf16* dsts = pts + kKeyTile * kLdP;                               // [64][kLdP]  dS^T
  float* lse_s = reinterpret_cast<float*>(dsts + kKeyTile * kLdP);  // [2][kRows]
  float* delta_s = lse_s + 2 * kRows;                               // [2][kRows]

  const Sequence sq = sequence(a);
  const int k0 = int(blockIdx.x) * kKeyTile;  // the first tiles have the most queries: first
  if (k0 >= sq.n) return;
  const int tid = int(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, tq = lane % 4, mi = lane / 8, mr = lane % 8;
  const int kg = warp % 4, side = warp / 4;  // keys 16 kg; which half of the queries / dims
  const int64_t kvh = blockIdx.y, group = a.hq / a.hkv;
  const int window = int(a.window);

  for (int c = tid; c < kKeyTile * kChunks; c += kDkvThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8, key = k0 + r;
    const bool ok = key < sq.n;  // past the sequence: zeros (its table entries are not read)
    const int64_t off = (ok ? pool_row(sq.table, key, a.hkv, kvh) : 0) * D + col;
    cp_async16(ks + r * kLd + col, a.k_pool + off, ok);
    cp_async16(vs + r * kLd + col, a.v_pool + off, ok);
  }
  // Query tiles [qt0, qt1] hold every query that sees a key of the tile; each runs once per
  // query head of the group.
  const int q_last = window > 0 ? min(sq.n - 1, k0 + kKeyTile - 2 + window) : sq.n - 1;
  const int qt0 = k0 / kRows, steps = (q_last / kRows - qt0 + 1) * int(group);
  auto load_step = [&](int step, int stage) {
    const int q0 = (qt0 + step / int(group)) * kRows;
    const int64_t h = kvh * group + step % int(group);
    for (int c = tid; c < kRows * kChunks; c += kDkvThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8, qi = q0 + r;
      const bool ok = qi < sq.n;
      const int64_t off = (int64_t(sq.row0 + (ok ? qi : 0)) * a.hq + h) * D + col;
      cp_async16(qs + (stage * kRows + r) * kLd + col, a.q + off, ok);
      cp_async16(dos + (stage * kRows + r) * kLd + col, dout_bf + off, ok);
    }
    if (tid < 2 * kRows) {
      const int r = tid % kRows, qi = q0 + r;
      const bool ok = qi < sq.n;
      const int64_t idx = int64_t(sq.row0 + (ok ? qi : 0)) * a.hq + h;
      if (tid < kRows)
        cp_async4(lse_s + stage * kRows + r, lse + idx, ok);
      else
        cp_async4(delta_s + stage * kRows + r, delta + idx, ok);
    }
  };
  load_step(0, 0);
  cp_async_commit();

  float dka[kHalfD / 8][4], dva[kHalfD / 8][4];
#pragma unroll
  for (int i = 0; i < kHalfD / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dka[i][e] = dva[i][e] = 0.0f;

  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    if (step + 1 < steps) {
      load_step(step + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int q0 = (qt0 + step / int(group)) * kRows;
    const bf16* qst = qs + stage * kRows * kLd;
    const bf16* dost = dos + stage * kRows * kLd;
    const float* lst = lse_s + stage * kRows;
    const float* dlt = delta_s + stage * kRows;

    // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys x kCols queries.
    float st[kCols / 8][4], dpt[kCols / 8][4];
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t kf[4], vf[4];
      const int a_off = (kg * 16 + lane % 16) * kLd + (lane / 16) * 8 + kk * 16;
      ldmatrix_x4(kf, ks + a_off);
      ldmatrix_x4(vf, vs + a_off);
#pragma unroll
      for (int j = 0; j < kCols / 8; j += 2) {
        uint32_t b[4];  // b-fragments of query tiles j and j + 1
        const int b_off = (side * kCols + j * 8 + (mi / 2) * 8 + mr) * kLd + kk * 16 + (mi % 2) * 8;
        ldmatrix_x4(b, qst + b_off);
        mma_bf16(st[j], kf, b[0], b[1]);
        mma_bf16(st[j + 1], kf, b[2], b[3]);
        ldmatrix_x4(b, dost + b_off);
        mma_bf16(dpt[j], vf, b[0], b[1]);
        mma_bf16(dpt[j + 1], vf, b[2], b[3]);
      }
    }
    // P^T and dS^T into shared memory as bf16. The mask is needed unless every query of the
    // step exists and sees every key of the tile.
    const bool need_mask = !(q0 >= k0 + kKeyTile - 1 && q0 + kRows <= sq.n &&
                             (window <= 0 || q0 + kRows - 1 - window < k0));
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = kg * 16 + g + 8 * (e / 2), c = side * kCols + j * 8 + 2 * tq + (e & 1);
        const bool seen = !need_mask || (q0 + c < sq.n && visible(q0 + c, k0 + r, window));
        const PairGrad pg = pair_grad(st[j][e], dpt[j][e], lst[c], dlt[c], a, seen);
        st[j][e] = pg.p;
        dpt[j][e] = pg.ds;
      }
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int off = (kg * 16 + g + 8 * h2) * kLdP + side * kCols + j * 8 + 2 * tq;
        *reinterpret_cast<uint32_t*>(pts + off) = pack_bf16(st[j][2 * h2], st[j][2 * h2 + 1]);
        *reinterpret_cast<uint32_t*>(dsts + off) = pack_bf16(dpt[j][2 * h2], dpt[j][2 * h2 + 1]);
      }
    __syncthreads();

    // dV += P^T dO, dK += dS^T Q: this warp's 16 keys x half of D, over the step's queries.
#pragma unroll
    for (int kk = 0; kk < kRows / 16; ++kk) {
      uint32_t pf[4], df[4];
      const int a_off = (kg * 16 + lane % 16) * kLdP + (lane / 16) * 8 + kk * 16;
      ldmatrix_x4(pf, pts + a_off);
      ldmatrix_x4(df, dsts + a_off);
#pragma unroll
      for (int dn = 0; dn < kHalfD / 8; dn += 2) {
        uint32_t b[4];  // b-fragments of dim tiles dn and dn + 1
        const int b_off = (kk * 16 + (mi % 2) * 8 + mr) * kLd + side * kHalfD + (dn + mi / 2) * 8;
        ldmatrix_x4_trans(b, dost + b_off);
        mma_bf16(dva[dn], pf, b[0], b[1]);
        mma_bf16(dva[dn + 1], pf, b[2], b[3]);
        ldmatrix_x4_trans(b, qst + b_off);
        mma_bf16(dka[dn], df, b[0], b[1]);
        mma_bf16(dka[dn + 1], df, b[2], b[3]);
      }
    }
    __syncthreads();  // the next step's prefetch overwrites this stage; P^T, dS^T are rewritten
  }

#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    const int key = k0 + kg * 16 + g + 8 * h2;
    if (key >= sq.n) continue;
    const int64_t row = (int64_t(sq.row0 + key) * a.hkv + kvh) * D + side * kHalfD + 2 * tq;
#pragma unroll
    for (int dn = 0; dn < kHalfD / 8; ++dn) {
      *reinterpret_cast<float2*>(dk + row + dn * 8) =
          make_float2(dka[dn][2 * h2] * a.scale, dka[dn][2 * h2 + 1] * a.scale);
      *reinterpret_cast<float2*>(dv + row + dn * 8) =
          make_float2(dva[dn][2 * h2], dva[dn][2 * h2 + 1]);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kDqThreads)
    dq_kernel(const AttentionBackwardArgs a, const bf16* dout_bf, const float* lse,
              const float* delta, float* dq) {
  using Cfg = DqCfg<D>;
  constexpr int kKeys = Cfg::kKeys, kLd = Cfg::kLd, kChunks = D / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* qs = reinterpret_cast<bf16*>(smem_raw);  // [64][kLd]
  bf16* dos = qs + kAttnRows * kLd;              // [64][kLd]
  bf16* ks = dos + kAttnRows * kLd;              // [2][kKeys][kLd]
  bf16* vs = ks + 2 * kKeys * kLd;               // [2][kKeys][kLd]

  const Sequence sq = sequence(a);
  // Later query tiles see more keys: start them first so the tail of the grid is short.
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kAttnRows;
  if (q0 >= sq.n) return;
  const int tid = int(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
  const int g = lane / 4, tq = lane % 4, mi = lane / 8, mr = lane % 8;
  const int64_t h = blockIdx.y, kvh = h / (a.hq / a.hkv);
  const int window = int(a.window);

  for (int c = tid; c < kAttnRows * kChunks; c += kDqThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8, qi = q0 + r;
    const bool ok = qi < sq.n;
    const int64_t off = (int64_t(sq.row0 + (ok ? qi : 0)) * a.hq + h) * D + col;
    cp_async16(qs + r * kLd + col, a.q + off, ok);
    cp_async16(dos + r * kLd + col, dout_bf + off, ok);
  }
  cp_async_commit();
  const int kv_hi = min(q0 + kAttnRows, sq.n) - 1;
  const int kv_lo = window > 0 ? max(0, q0 - window + 1) : 0;
  const int tile0 = kv_lo / kKeys, tile1 = kv_hi / kKeys;
  auto load_kv = [&](int tile, int stage) {
    for (int c = tid; c < kKeys * kChunks; c += kDqThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8, key = tile * kKeys + r;
      const bool ok = key <= kv_hi;  // past the block's last row: zeros, never read
      const int64_t off = (ok ? pool_row(sq.table, key, a.hkv, kvh) : 0) * D + col;
      cp_async16(ks + (stage * kKeys + r) * kLd + col, a.k_pool + off, ok);
      cp_async16(vs + (stage * kKeys + r) * kLd + col, a.v_pool + off, ok);
    }
  };
  load_kv(tile0, 0);
  cp_async_commit();

  // This thread's two rows (g, g + 8 of the warp's 16): positions, lse, Delta.
  int pos[2];
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    pos[r] = q0 + warp * 16 + g + 8 * r;
    const int64_t idx = int64_t(sq.row0 + (pos[r] < sq.n ? pos[r] : 0)) * a.hq + h;
    row_lse[r] = pos[r] < sq.n ? lse[idx] : 0.0f;
    row_delta[r] = pos[r] < sq.n ? delta[idx] : 0.0f;
  }
  const int warp_pos0 = q0 + warp * 16;

  float dqa[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.0f;

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
    const bf16* kst = ks + stage * kKeys * kLd;
    const bf16* vst = vs + stage * kKeys * kLd;

    // S = Q K^T and dP = dO V^T for this warp's 16 rows and the tile's keys.
    float s[kKeys / 8][4], dp[kKeys / 8][4];
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qf[4], dof[4];
      query_fragment<D>(qs, warp, lane, kk, qf);
      query_fragment<D>(dos, warp, lane, kk, dof);
#pragma unroll
      for (int j = 0; j < kKeys / 8; j += 2) {
        uint32_t b[4];  // b-fragments of key tiles j and j + 1
        const int b_off = (j * 8 + (mi / 2) * 8 + mr) * kLd + kk * 16 + (mi % 2) * 8;
        ldmatrix_x4(b, kst + b_off);
        mma_bf16(s[j], qf, b[0], b[1]);
        mma_bf16(s[j + 1], qf, b[2], b[3]);
        ldmatrix_x4(b, vst + b_off);
        mma_bf16(dp[j], dof, b[0], b[1]);
        mma_bf16(dp[j + 1], dof, b[2], b[3]);
      }
    }
    // dS in place of S. The mask is needed where the tile reaches past the warp's first row
    // (causal) or below its last row's window.
    const int kbase = tile * kKeys;
    const bool need_mask =
        kbase + kKeys - 1 > warp_pos0 || (window > 0 && kbase <= warp_pos0 + 15 - window);
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool seen =
            !need_mask || visible(pos[e / 2], kbase + j * 8 + 2 * tq + (e & 1), window);
        s[j][e] = pair_grad(s[j][e], dp[j][e], row_lse[e / 2], row_delta[e / 2], a, seen).ds;
      }
      // dQ += dS K.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t da[4];
      p_fragment<kKeys>(s, kk, da);
#pragma unroll
      for (int dn = 0; dn < D / 8; dn += 2) {
        uint32_t b[4];  // b-fragments of dim tiles dn and dn + 1
        ldmatrix_x4_trans(b, kst + (kk * 16 + (mi % 2) * 8 + mr) * kLd + (dn + mi / 2) * 8);
        mma_bf16(dqa[dn], da, b[0], b[1]);
        mma_bf16(dqa[dn + 1], da, b[2], b[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (pos[r] >= sq.n) continue;
    float* dst = dq + (int64_t(sq.row0 + pos[r]) * a.hq + h) * D + 2 * tq;
#pragma unroll
    for (int dn = 0; dn < D / 8; ++dn)
      *reinterpret_cast<float2*>(dst + dn * 8) =
          make_float2(dqa[dn][2 * r] * a.scale, dqa[dn][2 * r + 1] * a.scale);
  }
}

template <int D>
cudaError_t set_smem_limits() {
  const cudaError_t e = cudaFuncSetAttribute(
      dkv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, DkvCfg<D>::kSmemBytes);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              DqCfg<D>::kSmemBytes);
}

template <int D>
void launch(const AttentionBackwardArgs& a, int64_t max_query_len, const bf16* dout_bf,
            const float* lse, const float* delta, float* dq, float* dk, float* dv, cudaStream_t s) {
  const unsigned seqs = unsigned(a.num_seqs);
  const dim3 dkv_grid(unsigned(ceil_div(max_query_len, kKeyTile)), unsigned(a.hkv), seqs);
  dkv_kernel<D>
      <<<dkv_grid, kDkvThreads, DkvCfg<D>::kSmemBytes, s>>>(a, dout_bf, lse, delta, dk, dv);
  FP8RL_LAUNCH_CHECK("paged_attention_backward dk dv (mma)");
  const dim3 dq_grid(unsigned(ceil_div(max_query_len, kAttnRows)), unsigned(a.hq), seqs);
  dq_kernel<D><<<dq_grid, kDqThreads, DqCfg<D>::kSmemBytes, s>>>(a, dout_bf, lse, delta, dq);
  FP8RL_LAUNCH_CHECK("paged_attention_backward dq (mma)");
}

}  // namespace

bool attention_backward_mma_supports(unsigned fitting, int64_t d, int64_t block_size) {
  int bit = -1;
  for (int i = 0; i < 4; ++i)
    if (d == (int64_t(32) << i)) bit = i;
  return bit >= 0 && ((fitting >> bit) & 1u) != 0 && block_size == kPagedBlockSize;
}

unsigned attention_backward_mma_init() {
  const cudaError_t e[] = {set_smem_limits<32>(), set_smem_limits<64>(), set_smem_limits<128>(),
                           set_smem_limits<256>()};
  unsigned fitting = 0;
  for (int i = 0; i < 4; ++i) fitting |= e[i] == cudaSuccess ? 1u << i : 0u;
  cudaGetLastError();  // a limit past the device's is reported, not sticky: clear it
  return fitting;
}

void launch_paged_attention_backward_mma(const AttentionBackwardArgs& a, int64_t max_query_len,
                                         const bf16* out, const float* dout, const float* lse,
                                         bf16* dout_bf, float* delta, float* dq, float* dk,
                                         float* dv, cudaStream_t s) {
  if (a.t == 0) return;
  constexpr int kRowsPerBlock = kPrepareThreads / kWarp;
  prepare_kernel<<<unsigned(ceil_div(a.t * a.hq, kRowsPerBlock)), kPrepareThreads, 0, s>>>(
      a, out, dout, dout_bf, delta, dq, dk, dv);
  FP8RL_LAUNCH_CHECK("paged_attention_backward prepare (mma)");
  if (a.num_seqs == 0 || max_query_len == 0) return;
  switch (a.d) {
    case 32:
      launch<32>(a, max_query_len, dout_bf, lse, delta, dq, dk, dv, s);
      break;
    case 64:
      launch<64>(a, max_query_len, dout_bf, lse, delta, dq, dk, dv, s);
      break;
    case 128:
      launch<128>(a, max_query_len, dout_bf, lse, delta, dq, dk, dv, s);
      break;
    case 256:
      launch<256>(a, max_query_len, dout_bf, lse, delta, dq, dk, dv, s);
      break;
    default:
      return;  // attention_backward_mma_supports() is checked by the caller
  }
}

}  // namespace fp8rl::cuda
