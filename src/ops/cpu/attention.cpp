// Causal grouped-query attention against a KV cache, exact fp32 softmax.
//
// With Rounding::bf16 it follows the CUDA kernels instead (ops/cuda/attention_common.cuh, shared
// by the mma.sync and wgmma kernels): keys in tiles of BC slots (aligned to multiples of BC),
// an online softmax in the log2 domain with the scale folded into the exponent,
// P = exp2(fma(s, scale * log2 e, -running max * scale * log2 e)), P rounded to bf16 before P.V
// while the normalizer sums the unrounded P, and the output o * (1 / l) rounded to bf16 (CUDA's
// exp2 is ex2.approx, within ~2 ulp of std::exp2). A row's result still depends only on its slot
// and the cache, so prefill, decode and batches agree bit for bit.
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

namespace {

// One query row against slots [lo, slot] as the CUDA kernel computes it. s: scratch for the
// scores of one tile.
void attend_bf16(const float* qv, const float* kp, const float* vp, int64_t hkv, int64_t kvh,
                 int64_t d, int64_t lo, int64_t slot, const AttentionParams& p, float* s,
                 float* o) {
  constexpr float kLog2e = 1.4426950408889634f;
  const int64_t bc = d > 128 ? 32 : 64;  // the kernels' key tile: 64, 32 for D = 256
  const bool capped = p.softcap > 0.0f;
  const float mul = capped ? 1.0f : p.scale * kLog2e;  // scores stay unscaled until exp2
  float m = -INFINITY, l = 0.0f;
  for (int64_t i = 0; i < d; ++i) o[i] = 0.0f;
  for (int64_t tile = lo / bc * bc; tile <= slot; tile += bc) {
    const int64_t j0 = std::max(lo, tile), j1 = std::min(slot, tile + bc - 1);
    float mx = m;
    for (int64_t j = j0; j <= j1; ++j) {
      const float* kv = kp + (j * hkv + kvh) * d;
      float v = 0.0f;
      for (int64_t i = 0; i < d; ++i) v += qv[i] * kv[i];
      if (capped) v = p.softcap * std::tanh(v * p.scale / p.softcap) * kLog2e;
      s[j - j0] = v;
      mx = std::max(mx, v);
    }
    // Every tile holds at least one visible key, so mx is finite; alpha is 0 on the first.
    const float base = mx * mul;
    const float alpha = std::exp2(m * mul - base);
    m = mx;
    l *= alpha;
    for (int64_t i = 0; i < d; ++i) o[i] *= alpha;
    for (int64_t j = j0; j <= j1; ++j) {
      const float pj = std::exp2(std::fma(s[j - j0], mul, -base));
      l += pj;
      const float pr = round_to_bf16(pj);  // the mma's bf16 A operand
      const float* vv = vp + (j * hkv + kvh) * d;
      for (int64_t i = 0; i < d; ++i) o[i] += pr * vv[i];
    }
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int64_t i = 0; i < d; ++i) o[i] = round_to_bf16(o[i] * inv);
}

}  // namespace

void attention(Arena& scratch, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out, Rounding r) {
  const int64_t t_count = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t cap = k_cache.dim(0), hkv = k_cache.dim(1);
  const int64_t group = hq / hkv;
  ArenaScope scope(scratch);
  // One score row per thread; slots beyond the query's own are never touched.
  TensorView scores = scratch.alloc({num_threads(), cap}, DType::f32);
  const float* qp = q.ptr<float>();
  const float* kp = k_cache.ptr<float>();
  const float* vp = v_cache.ptr<float>();
  float* op = out.ptr<float>();
  parallel_for(0, t_count * hq, [&](int64_t th) {
    const int64_t t = th / hq, h = th % hq, kvh = h / group;
    const int64_t slot = first_slot + t;
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, slot - p.window + 1) : 0;
    float* s = scores.ptr<float>() + int64_t(thread_index()) * cap;
    const float* qv = qp + (t * hq + h) * d;
    float* o = op + (t * hq + h) * d;
    if (r == Rounding::bf16) {
      attend_bf16(qv, kp, vp, hkv, kvh, d, lo, slot, p, s, o);
      return;
    }
    float mx = -INFINITY;
    for (int64_t j = lo; j <= slot; ++j) {
      const float* kv = kp + (j * hkv + kvh) * d;
      float dot = 0.0f;
      for (int64_t i = 0; i < d; ++i) dot += qv[i] * kv[i];
      dot *= p.scale;
      if (p.softcap > 0) dot = p.softcap * std::tanh(dot / p.softcap);
      s[j] = dot;
      mx = std::max(mx, dot);
    }
    float sum = 0.0f;
    for (int64_t j = lo; j <= slot; ++j) {
      s[j] = std::exp(s[j] - mx);
      sum += s[j];
    }
    for (int64_t i = 0; i < d; ++i) o[i] = 0.0f;
    for (int64_t j = lo; j <= slot; ++j) {
      const float w = s[j] / sum;
      const float* vv = vp + (j * hkv + kvh) * d;
      for (int64_t i = 0; i < d; ++i) o[i] += w * vv[i];
    }
  });
}

}  // namespace fp8rl::ops::cpu
