// Causal grouped-query attention against a contiguous KV cache (the loops: attention_row.h).
// A row's result depends only on its slot and the cache, so prefill, decode and batches agree
// bit for bit, in both roundings.
#include "core/parallel.h"
#include "ops/cpu/attention_row.h"

namespace fp8rl::ops::cpu {

void attention(Arena& scratch, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out, Rounding r) {
  const int64_t t_count = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t cap = k_cache.dim(0), hkv = k_cache.dim(1);
  const int64_t group = hq / hkv;
  ArenaScope scope(scratch);
  // One score row per thread; slots beyond the query's own are never touched.
  TensorView scores = scratch.alloc({num_threads(), cap}, DType::f32);
  const ContiguousRows rows{k_cache.ptr<float>(), v_cache.ptr<float>(), hkv, d};
  const float* qp = q.ptr<float>();
  float* op = out.ptr<float>();
  parallel_for(0, t_count * hq, [&](int64_t th) {
    const int64_t t = th / hq, h = th % hq;
    const int64_t slot = first_slot + t;
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, slot - p.window + 1) : 0;
    float* s = scores.ptr<float>() + int64_t(thread_index()) * cap;
    attend(r, qp + (t * hq + h) * d, rows, h / group, d, lo, slot, p, s, op + (t * hq + h) * d);
  });
}

}  // namespace fp8rl::ops::cpu
