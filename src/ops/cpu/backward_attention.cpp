// FlashAttention-2's backward on the CPU for full-prefill steps: probabilities recomputed from
// q, k and the saved log-sum-exp, one query row (dq) or one key row (dk, dv) per task, so no
// [T, T] matrix exists and no two tasks write the same row.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/parallel.h"
#include "ops/cpu/attention_row.h"
#include "ops/cpu/backward_ops.h"

namespace fp8rl::ops::cpu {

namespace {

float dot(const float* a, const float* b, int64_t d) {
  float s = 0.0f;
  for (int64_t i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}

// P_ij and dS_ij of one (query, key) pair: the score as the forward computes it
// (attend_exact), its probability exp(s - lse), and dS = P (dP - Delta) times the softcap's
// derivative, so that dq += scale dS k and dk += scale dS q.
struct Pair {
  float p, ds;
};
Pair pair_grad(const float* qv, const float* kv, const float* vv, const float* dov, float lse,
               float delta, int64_t d, const AttentionParams& prm) {
  float s = dot(qv, kv, d) * prm.scale;
  float cap_grad = 1.0f;
  if (prm.softcap > 0) {
    const float t = std::tanh(s / prm.softcap);
    s = prm.softcap * t;
    cap_grad = 1.0f - t * t;
  }
  const float p = std::exp(s - lse);
  const float dp = dot(dov, vv, d);
  return {p, p * (dp - delta) * cap_grad};
}

}  // namespace

void paged_attention_backward(Arena& scratch, const TensorView& q, const TensorView& k_pool,
                              const TensorView& v_pool, const PagedBatch& b,
                              const AttentionParams& prm, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, const TensorView& dq,
                              const TensorView& dk, const TensorView& dv) {
  const int64_t t_count = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t bs = k_pool.dim(1), hkv = k_pool.dim(2), group = hq / hkv;
  const int64_t seqs = b.num_seqs;
  const int32_t* cu = b.cu_q.ptr<const int32_t>();
  const int32_t* lens = b.context_lens.ptr<const int32_t>();
  CHECK(cu[0] >= 0 && cu[seqs] <= t_count,
        "paged_attention_backward: cu_q [{}, {}] outside {} rows", cu[0], cu[seqs], t_count);
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t n = cu[s + 1] - cu[s];
    CHECK(n >= 0 && lens[s] == n && n <= b.block_tables.dim(1) * bs,
          "paged_attention_backward: sequence {} has {} new tokens of {} (training steps are full "
          "prefills)",
          s, n, lens[s]);
    const int32_t* table = b.block_tables.ptr<const int32_t>() + s * b.block_tables.strides[0];
    for (int64_t i = 0; i < (n + bs - 1) / bs; ++i)
      CHECK(table[i] >= 0 && table[i] < k_pool.dim(0),
            "paged_attention_backward: sequence {} block {} is {}, outside the pool's {}", s, i,
            table[i], k_pool.dim(0));
  }
  const auto seq_of = [&](int64_t t) {
    return int64_t(std::upper_bound(cu, cu + seqs + 1, int32_t(t)) - cu - 1);
  };
  const auto rows_of = [&](int64_t s) {
    return PagedRows{k_pool.ptr<const float>(),
                     v_pool.ptr<const float>(),
                     b.block_tables.ptr<const int32_t>() + s * b.block_tables.strides[0],
                     bs,
                     hkv,
                     d};
  };
  const float* qp = q.ptr<const float>();
  const float* dop = dout.ptr<const float>();
  const float* lp = lse.ptr<const float>();
  ArenaScope scope(scratch);
  // Delta_i = dout_i . out_i, the softmax's row sum of P dP.
  TensorView delta = scratch.alloc({t_count * hq}, DType::f32);
  float* dl = delta.ptr<float>();
  parallel_for(0, t_count * hq,
               [&](int64_t th) { dl[th] = dot(dop + th * d, out.ptr<const float>() + th * d, d); });

  // dq: one (token, query head) per task, over its visible keys.
  float* dqp = dq.ptr<float>();
  parallel_for(0, t_count * hq, [&](int64_t th) {
    const int64_t t = th / hq, h = th % hq;
    float* g = dqp + th * d;
    std::fill(g, g + d, 0.0f);
    if (t < cu[0] || t >= cu[seqs]) return;
    const int64_t s = seq_of(t), pos = t - cu[s];
    const int64_t lo = prm.window > 0 ? std::max<int64_t>(0, pos - prm.window + 1) : 0;
    const PagedRows rows = rows_of(s);
    for (int64_t j = lo; j <= pos; ++j) {
      const float* kv = rows.key(j, h / group);
      const Pair pg = pair_grad(qp + th * d, kv, rows.value(j, h / group), dop + th * d, lp[th],
                                dl[th], d, prm);
      const float c = pg.ds * prm.scale;
      for (int64_t i = 0; i < d; ++i) g[i] += c * kv[i];
    }
  });

  // dk, dv: one (key token, kv head) per task, over the queries that see it and the query
  // heads of its group.
  float* dkp = dk.ptr<float>();
  float* dvp = dv.ptr<float>();
  parallel_for(0, t_count * hkv, [&](int64_t tk) {
    const int64_t t = tk / hkv, kvh = tk % hkv;
    float* gk = dkp + tk * d;
    float* gv = dvp + tk * d;
    std::fill(gk, gk + d, 0.0f);
    std::fill(gv, gv + d, 0.0f);
    if (t < cu[0] || t >= cu[seqs]) return;
    const int64_t s = seq_of(t), j = t - cu[s];
    const int64_t last = prm.window > 0
                             ? std::min<int64_t>(cu[s + 1] - cu[s] - 1, j + prm.window - 1)
                             : cu[s + 1] - cu[s] - 1;
    const PagedRows rows = rows_of(s);
    const float* kv = rows.key(j, kvh);
    const float* vv = rows.value(j, kvh);
    for (int64_t i = j; i <= last; ++i) {
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t th = (cu[s] + i) * hq + h;
        const Pair pg = pair_grad(qp + th * d, kv, vv, dop + th * d, lp[th], dl[th], d, prm);
        const float c = pg.ds * prm.scale;
        for (int64_t x = 0; x < d; ++x) {
          gk[x] += c * qp[th * d + x];
          gv[x] += pg.p * dop[th * d + x];
        }
      }
    }
  });
}

}  // namespace fp8rl::ops::cpu
