// Causal grouped-query attention against a KV cache, exact fp32 softmax.
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

void attention(Arena& scratch, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out) {
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
    float* o = op + (t * hq + h) * d;
    for (int64_t i = 0; i < d; ++i) o[i] = 0.0f;
    for (int64_t j = lo; j <= slot; ++j) {
      const float w = s[j] / sum;
      const float* vv = vp + (j * hkv + kvh) * d;
      for (int64_t i = 0; i < d; ++i) o[i] += w * vv[i];
    }
  });
}

}  // namespace fp8rl::ops::cpu
