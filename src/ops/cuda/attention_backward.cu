// The saving paged attention's log-sum-exp and FlashAttention-2's backward of paged attention,
// written as the CPU reference (ops/cpu/backward_attention.cpp) is: a warp per query row (lse,
// dq) or per key row (dk, dv), looping over the keys or queries it meets, each score a
// warp-wide dot product; probabilities recomputed from the saved lse, so no [T, T] matrix
// exists and no two warps write the same row. Correct before fast: O(T^2 D) per head with no
// tiling or tensor cores (a reference path; a tiled kernel is later work).
#include "ops/cuda/attention_backward.h"
#include "ops/cuda/common.cuh"

namespace fp8rl::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int kPerLane = int(kAttentionBackwardMaxD / kWarp);  // values of a row per lane

// Element u of a lane's share of a row: index lane + 32 u.
struct LaneRow {
  float v[kPerLane];
};
__device__ __forceinline__ LaneRow load_row(const bf16* p, int64_t d, int lane) {
  LaneRow r;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t i = lane + int64_t(u) * kWarp;
    r.v[u] = i < d ? __bfloat162float(p[i]) : 0.0f;
  }
  return r;
}
__device__ __forceinline__ LaneRow load_row(const float* p, int64_t d, int lane) {
  LaneRow r;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t i = lane + int64_t(u) * kWarp;
    r.v[u] = i < d ? p[i] : 0.0f;
  }
  return r;
}
__device__ __forceinline__ void store_row(const LaneRow& r, float* p, int64_t d, int lane) {
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) {
    const int64_t i = lane + int64_t(u) * kWarp;
    if (i < d) p[i] = r.v[u];
  }
}
// a . b over the warp (every lane gets it).
__device__ __forceinline__ float warp_dot(const LaneRow& a, const LaneRow& b) {
  float s = 0.0f;
#pragma unroll
  for (int u = 0; u < kPerLane; ++u) s = __fmaf_rn(a.v[u], b.v[u], s);
  return warp_sum(s);
}

// The sequence owning row t: the largest s with cu_q[s] <= t (t in [cu_q[0], cu_q[S])).
__device__ __forceinline__ int64_t sequence_of(const int32_t* cu, int64_t num_seqs, int64_t t) {
  int64_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Key / value row j of sequence s, kv head g.
__device__ __forceinline__ int64_t kv_offset(const AttentionBackwardArgs& a, int64_t s, int64_t j,
                                             int64_t g) {
  const int64_t block = a.block_tables[s * a.table_stride + j / a.block_size];
  return ((block * a.block_size + j % a.block_size) * a.hkv + g) * a.d;
}

// The score as the forward computes it, softcapped, and the softcap's derivative.
struct Score {
  float s, cap_grad;
};
__device__ __forceinline__ Score score(float dot, const AttentionBackwardArgs& a) {
  float s = dot * a.scale, cap_grad = 1.0f;
  if (a.softcap > 0.0f) {
    const float th = tanhf(s / a.softcap);
    s = a.softcap * th;
    cap_grad = 1.0f - th * th;
  }
  return {s, cap_grad};
}

// A warp per (row, query head): lse over the visible keys with an online max.
__global__ void __launch_bounds__(kThreads) lse_kernel(AttentionBackwardArgs a, float* lse) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= a.t * a.hq) return;
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t t = row / a.hq, h = row % a.hq;
  if (a.num_seqs == 0 || t < a.cu_q[0] || t >= a.cu_q[a.num_seqs]) {
    if (lane == 0) lse[row] = 0.0f;
    return;
  }
  const int64_t s = sequence_of(a.cu_q, a.num_seqs, t);
  const int64_t n = a.cu_q[s + 1] - a.cu_q[s];
  const int64_t pos = a.context_lens[s] - n + (t - a.cu_q[s]);
  const int64_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
  const int64_t g = h / (a.hq / a.hkv);
  const LaneRow q = load_row(a.q + row * a.d, a.d, lane);
  float m = -INFINITY, sum = 0.0f;
  for (int64_t j = lo; j <= pos; ++j) {
    const float sj = score(warp_dot(q, load_row(a.k_pool + kv_offset(a, s, j, g), a.d, lane)), a).s;
    if (sj > m) {
      sum = sum * expf(m - sj) + 1.0f;  // expf(-inf) = 0 at the first key
      m = sj;
    } else {
      sum += expf(sj - m);
    }
  }
  if (lane == 0) lse[row] = pos >= lo ? m + logf(sum) : 0.0f;
}

// delta[row] = dout[row] . out[row], a warp per row.
__global__ void __launch_bounds__(kThreads)
    delta_kernel(AttentionBackwardArgs a, const bf16* out, const float* dout, float* delta) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= a.t * a.hq) return;
  const int lane = int(threadIdx.x) % kWarp;
  const float dl =
      warp_dot(load_row(dout + row * a.d, a.d, lane), load_row(out + row * a.d, a.d, lane));
  if (lane == 0) delta[row] = dl;
}

// P and dS of one (query, key) pair: P = exp(s - lse), dS = P (dout . v - delta) cap'.
struct Pair {
  float p, ds;
};
__device__ __forceinline__ Pair pair_grad(const LaneRow& q, const LaneRow& k, const LaneRow& v,
                                          const LaneRow& dout, float lse, float delta,
                                          const AttentionBackwardArgs& a) {
  const Score sc = score(warp_dot(q, k), a);
  const float p = expf(sc.s - lse);
  const float dp = warp_dot(dout, v);
  return {p, p * (dp - delta) * sc.cap_grad};
}

// dq: a warp per (row, query head), over its visible keys (full prefill: position = index).
__global__ void __launch_bounds__(kThreads)
    dq_kernel(AttentionBackwardArgs a, const float* dout, const float* lse, const float* delta,
              float* dq) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= a.t * a.hq) return;
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t t = row / a.hq, h = row % a.hq;
  LaneRow acc{};
  if (a.num_seqs > 0 && t >= a.cu_q[0] && t < a.cu_q[a.num_seqs]) {
    const int64_t s = sequence_of(a.cu_q, a.num_seqs, t), pos = t - a.cu_q[s];
    const int64_t lo = a.window > 0 && pos - a.window + 1 > 0 ? pos - a.window + 1 : 0;
    const int64_t g = h / (a.hq / a.hkv);
    const LaneRow q = load_row(a.q + row * a.d, a.d, lane);
    const LaneRow dov = load_row(dout + row * a.d, a.d, lane);
    for (int64_t j = lo; j <= pos; ++j) {
      const int64_t off = kv_offset(a, s, j, g);
      const LaneRow k = load_row(a.k_pool + off, a.d, lane);
      const Pair pg =
          pair_grad(q, k, load_row(a.v_pool + off, a.d, lane), dov, lse[row], delta[row], a);
      const float c = pg.ds * a.scale;
#pragma unroll
      for (int u = 0; u < kPerLane; ++u) acc.v[u] = __fmaf_rn(c, k.v[u], acc.v[u]);
    }
  }
  store_row(acc, dq + row * a.d, a.d, lane);
}

// dk, dv: a warp per (key row, kv head), over the queries that see it and the query heads of
// its group.
__global__ void __launch_bounds__(kThreads)
    dkv_kernel(AttentionBackwardArgs a, const float* dout, const float* lse, const float* delta,
               float* dk, float* dv) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (row >= a.t * a.hkv) return;
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t t = row / a.hkv, g = row % a.hkv, group = a.hq / a.hkv;
  LaneRow gk{}, gv{};
  if (a.num_seqs > 0 && t >= a.cu_q[0] && t < a.cu_q[a.num_seqs]) {
    const int64_t s = sequence_of(a.cu_q, a.num_seqs, t), j = t - a.cu_q[s];
    const int64_t n = a.cu_q[s + 1] - a.cu_q[s];
    const int64_t last = a.window > 0 && j + a.window - 1 < n - 1 ? j + a.window - 1 : n - 1;
    const int64_t off = kv_offset(a, s, j, g);
    const LaneRow k = load_row(a.k_pool + off, a.d, lane);
    const LaneRow v = load_row(a.v_pool + off, a.d, lane);
    for (int64_t i = j; i <= last; ++i)
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        const int64_t th = (a.cu_q[s] + i) * a.hq + h;
        const LaneRow q = load_row(a.q + th * a.d, a.d, lane);
        const LaneRow dov = load_row(dout + th * a.d, a.d, lane);
        const Pair pg = pair_grad(q, k, v, dov, lse[th], delta[th], a);
        const float c = pg.ds * a.scale;
#pragma unroll
        for (int u = 0; u < kPerLane; ++u) {
          gk.v[u] = __fmaf_rn(c, q.v[u], gk.v[u]);
          gv.v[u] = __fmaf_rn(pg.p, dov.v[u], gv.v[u]);
        }
      }
  }
  store_row(gk, dk + row * a.d, a.d, lane);
  store_row(gv, dv + row * a.d, a.d, lane);
}

unsigned warp_rows_grid(int64_t rows) {
  return unsigned(ceil_div(rows, kWarpsPerBlock));
}

}  // namespace

void launch_paged_attention_lse(const AttentionBackwardArgs& a, float* lse, cudaStream_t s) {
  if (a.t * a.hq == 0) return;
  lse_kernel<<<warp_rows_grid(a.t * a.hq), kThreads, 0, s>>>(a, lse);
  FP8RL_LAUNCH_CHECK("paged_attention_lse");
}

void launch_paged_attention_backward(const AttentionBackwardArgs& a, const bf16* out,
                                     const float* dout, const float* lse, float* delta, float* dq,
                                     float* dk, float* dv, cudaStream_t s) {
  if (a.t == 0) return;
  delta_kernel<<<warp_rows_grid(a.t * a.hq), kThreads, 0, s>>>(a, out, dout, delta);
  FP8RL_LAUNCH_CHECK("paged_attention_backward delta");
  dq_kernel<<<warp_rows_grid(a.t * a.hq), kThreads, 0, s>>>(a, dout, lse, delta, dq);
  FP8RL_LAUNCH_CHECK("paged_attention_backward dq");
  dkv_kernel<<<warp_rows_grid(a.t * a.hkv), kThreads, 0, s>>>(a, dout, lse, delta, dk, dv);
  FP8RL_LAUNCH_CHECK("paged_attention_backward dk dv");
}

}  // namespace fp8rl::cuda
