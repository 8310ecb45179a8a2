// RMSNorm (Llama, Qwen3 q/k norm, Gemma's (1 + w)), optionally after the residual add
// (x += delta, in place), with a bf16 output or the FP8 quantization of the normed row for the
// linears that read it. One kernel template covers the four ops.
//
// The formula follows ops/cpu/norm.cpp step by step: inv = 1 / sqrt(sum(x^2)/d + eps)
// (IEEE division and square root), y = (x * inv) * w_eff, with w_eff = 1 + w for Gemma. Only
// the order of the sum of squares differs from the CPU. The residual sum is rounded to bf16
// (as launch_add stores it) before it is squared, so add + rms_norm and the fused kernel give
// the same bits: both use the same row plan and therefore the same summation order.
//
// Layout (row_quant.cuh): a warp per row up to 512 values, else a block per row; the row's
// values stay in registers between the sum of squares and the write (16-byte loads and
// stores, all loads of a row in flight together).
#include "ops/cuda/row_quant.cuh"

namespace fp8rl::cuda {

namespace {

struct NormArgs {
  bf16* x;            // [rows, d]; updated in place when there is a delta
  const bf16* delta;  // [rows, d] or null
  const float* w;     // [d]
  int64_t rows, d;
  float eps;
  bool plus_one;
  bf16* out;    // [rows, d] bf16 output (bf16 variant); may alias delta, or x without delta
  float* amax;  // bf16 variant: if set, max |out| is atomically merged into it
  QuantOut q;   // FP8 variant
};

template <bool VEC>
__device__ __forceinline__ void load_weight(const float* w, int64_t j, int64_t d, bool plus_one,
                                            float (&wv)[8]) {
  load_chunk<VEC>(w, j, d, wv);
  if (plus_one) {
#pragma unroll
    for (int i = 0; i < 8; ++i) wv[i] = 1.0f + wv[i];  // zeros past d stay harmless: x is 0 there
  }
}

template <int NCH, bool WARP, bool MULTI, bool VEC, bool ADD, bool QUANT>
__global__ void __launch_bounds__(kMaxRowThreads) norm_kernel(NormArgs a) {
  __shared__ float shm[kWarp];
  const RowThreads<WARP> g;
  const int64_t d = a.d;
  if constexpr (QUANT) {
    if (!quantized_data_row(g, a.rows, d, a.q)) return;
  } else {
    if (g.row >= a.rows) return;
  }
  bf16* xr = a.x + g.row * d;
  const int nseg = MULTI ? g.template segments<NCH>(d) : 1;

  // Pass 1: x (+ delta, rounded to bf16 and written back) and the sum of squares.
  float v[NCH][8];
  float ss = 0.0f;
  for (int s = 0; s < nseg; ++s) {
    uint4 rx[NCH], rd[NCH];
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const int64_t j = g.template col<NCH>(s, k);
      rx[k] = rd[k] = make_uint4(0, 0, 0, 0);
      if (j < d) {
        rx[k] = load_raw<VEC>(xr, j, d);
        if constexpr (ADD) rd[k] = load_raw<VEC>(a.delta + g.row * d, j, d);
      }
    }
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      unpack(rx[k], v[k]);
      if constexpr (ADD) {
        const int64_t j = g.template col<NCH>(s, k);
        float e[8];
        unpack(rd[k], e);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[k][i] = round_bf16(v[k][i] + e[i]);
        if (j < d) store_chunk<VEC>(xr, j, d, v[k]);
      }
      ss = chunk_sumsq(v[k], ss);
    }
  }
  ss = g.sum(ss, shm);
  const float inv = 1.0f / sqrtf(ss / float(d) + a.eps);

  // The normed values of segment s in v (re-read from x when the row has several segments).
  auto normed = [&](int s, float(&vv)[NCH][8]) {
    if (nseg > 1) load_row_chunks<NCH, VEC>(g, xr, s, d, vv);
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const int64_t j = g.template col<NCH>(s, k);
      float wv[8];
      if (j < d) {
        load_weight<VEC>(a.w, j, d, a.plus_one, wv);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) wv[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) vv[k][i] = (vv[k][i] * inv) * wv[i];
    }
  };

  if constexpr (QUANT) {
    quantize_row<NCH, VEC>(g, nseg, d, a.q, shm, v, normed);
  } else {
    bf16* outr = a.out + g.row * d;
    float mx = 0.0f;
    for (int s = 0; s < nseg; ++s) {
      normed(s, v);
#pragma unroll
      for (int k = 0; k < NCH; ++k) {
        const int64_t j = g.template col<NCH>(s, k);
#pragma unroll
        for (int i = 0; i < 8; ++i) v[k][i] = round_bf16(v[k][i]);
        mx = fmaxf(mx, chunk_amax(v[k]));
        if (j < d) store_chunk<VEC>(outr, j, d, v[k]);
      }
    }
    if (a.amax != nullptr) {
      mx = g.max(mx, shm);
      if (g.lane == 0) atomic_max_nonneg(a.amax, mx);
    }
  }
}

template <bool ADD, bool QUANT>
void launch_norm(const NormArgs& a, bool vec, cudaStream_t s) {
  const int64_t rows = QUANT ? a.q.padded_rows : a.rows;
  const RowPlan p = plan_rows(rows, a.d);
  dispatch_rows(p, vec, [&](auto nch, auto warp, auto multi, auto v) {
    norm_kernel<decltype(nch)::value, decltype(warp)::value, decltype(multi)::value,
                decltype(v)::value, ADD, QUANT><<<p.grid, p.threads, 0, s>>>(a);
  });
}

NormArgs norm_args(bf16* x, const NormDelta& delta, const float* w, int64_t rows, int64_t d,
                   float eps, bool plus_one) {
  NormArgs a{};
  a.x = x;
  a.delta = delta.x;
  a.w = w;
  a.rows = rows;
  a.d = d;
  a.eps = eps;
  a.plus_one = plus_one;
  return a;
}

bool vec_ok(const NormArgs& a, const void* dst) {
  return a.d % 8 == 0 && aligned16(a.x) && aligned16(a.w) && aligned16(dst) &&
         (a.delta == nullptr || aligned16(a.delta));
}

}  // namespace

void launch_rms_norm(bf16* x, const NormDelta& delta, const float* w, int64_t rows, int64_t d,
                     float eps, bool plus_one, bf16* out, float* amax, cudaStream_t s) {
  if (rows == 0) return;
  NormArgs a = norm_args(x, delta, w, rows, d, eps, plus_one);
  a.out = out;
  a.amax = amax;
  const bool vec = vec_ok(a, out);
  if (delta.present())
    launch_norm<true, false>(a, vec, s);
  else
    launch_norm<false, false>(a, vec, s);
  FP8RL_LAUNCH_CHECK(delta.present() ? "add_rms_norm" : "rms_norm");
}

void launch_rms_norm_quant(bf16* x, const NormDelta& delta, const float* w, int64_t rows, int64_t d,
                           float eps, bool plus_one, const QuantOut& q, cudaStream_t s) {
  if (q.padded_rows == 0) return;
  NormArgs a = norm_args(x, delta, w, rows, d, eps, plus_one);
  a.q = q;
  const bool vec = vec_ok(a, q.codes) && (q.plain == nullptr || aligned16(q.plain));
  if (delta.present())
    launch_norm<true, true>(a, vec, s);
  else
    launch_norm<false, true>(a, vec, s);
  FP8RL_LAUNCH_CHECK(delta.present() ? "add_rms_norm_quant" : "rms_norm_quant");
  // The scalar kernels do not write plain (row_quant.cuh quantize_row): the norm of the
  // updated x, once more.
  if (!vec && q.plain != nullptr)
    launch_rms_norm(x, {}, w, rows, d, eps, plus_one, q.plain, nullptr, s);
}

}  // namespace fp8rl::cuda
