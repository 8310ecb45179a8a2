// Mixture-of-experts routing and expert MLPs on the CPU: the reference of ops::moe_route and
// ops::moe_experts, step for step transformers' eager Qwen3-MoE code (router softmax in fp32,
// top-k, optional renormalization; a loop over the experts hit, each adding its weighted rows
// into a zeroed output). Each expert's rows run through the dense linear and gated activation
// of this directory, so an expert is computed exactly as a dense MLP over those rows.
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

void moe_route(Arena& scratch, const TensorView& x, const LinearWeight& router, bool normalize,
               const TensorView& weights, const TensorView& experts, Rounding r) {
  const int64_t t = x.dim(0), ne = router.out_features(), k = weights.dim(1);
  if (t == 0) return;
  ArenaScope scope(scratch);
  const TensorView logits = scratch.alloc({t, ne}, DType::f32);  // [T, E]
  linear(scratch, x, router, logits, Output::activation, r);
  float* p_all = logits.ptr<float>();
  float* w_all = weights.ptr<float>();
  int32_t* id_all = experts.ptr<int32_t>();
  parallel_for(0, t, [&](int64_t i) {
    float* p = p_all + i * ne;  // logits, then probabilities in place
    float m = p[0];
    for (int64_t j = 1; j < ne; ++j) m = std::max(m, p[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < ne; ++j) {
      p[j] = std::exp(p[j] - m);
      sum += p[j];
    }
    for (int64_t j = 0; j < ne; ++j) p[j] /= sum;
    // Top-k by repeated selection: a strictly larger probability wins, so ties go to the lower
    // index. A chosen probability is marked -1 (probabilities are >= 0, or NaN, which is still
    // chosen last rather than never).
    float* w = w_all + i * k;
    int32_t* ids = id_all + i * k;
    for (int64_t s = 0; s < k; ++s) {
      int64_t best = -1;
      for (int64_t j = 0; j < ne; ++j)
        if (!(p[j] < 0.0f) && (best < 0 || p[j] > p[best])) best = j;
      w[s] = p[best];
      ids[s] = int32_t(best);
      p[best] = -1.0f;
    }
    if (normalize) {
      float total = 0.0f;
      for (int64_t s = 0; s < k; ++s) total += w[s];
      for (int64_t s = 0; s < k; ++s) w[s] /= total;
    }
    for (int64_t s = 0; s < k; ++s) w[s] = round_as(r, w[s]);
  });
}

void moe_experts(Arena& scratch, const TensorView& x, const MoeWeights& w, GatedActivation act,
                 const TensorView& weights, const TensorView& experts, const TensorView& out,
                 Rounding r) {
  const int64_t t = x.dim(0), h = x.dim(1), k = experts.dim(1);
  const int64_t ne = w.gate.num_experts(), inter = w.gate.out_features();
  const float* xf = x.ptr<float>();
  const float* wf = weights.ptr<float>();
  const int32_t* ids = experts.ptr<int32_t>();
  float* o = out.ptr<float>();
  std::fill(o, o + t * h, 0.0f);
  if (t == 0) return;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t s = 0; s < k; ++s) {
      const int32_t e = ids[i * k + s];
      CHECK(e >= 0 && e < ne, "moe_experts: token {} is routed to expert {}, outside [0, {})", i, e,
            ne);
      for (int64_t s2 = 0; s2 < s; ++s2)
        CHECK(ids[i * k + s2] != e, "moe_experts: token {} is routed to expert {} twice", i, e);
    }
  }
  ArenaScope scope(scratch);
  // The (token, slot) pairs bucketed by expert, in token order within an expert: pair
  // i * k + s sits in bucket ids[i * k + s], at first[e] .. first[e + 1].
  const TensorView first_v = scratch.alloc({ne + 1}, DType::i32);
  const TensorView pairs_v = scratch.alloc({t * k}, DType::i32);
  int32_t* first = first_v.ptr<int32_t>();
  int32_t* pairs = pairs_v.ptr<int32_t>();
  std::fill(first, first + ne + 1, 0);
  for (int64_t p = 0; p < t * k; ++p) ++first[ids[p] + 1];
  for (int64_t e = 0; e < ne; ++e) first[e + 1] += first[e];
  {
    const TensorView fill_v = scratch.alloc({ne}, DType::i32);
    int32_t* next = fill_v.ptr<int32_t>();
    std::copy(first, first + ne, next);
    for (int64_t p = 0; p < t * k; ++p) pairs[next[ids[p]]++] = int32_t(p);
  }
  // Experts in increasing index, as transformers visits the experts hit: each token's output
  // is (((0 + y_a) + y_b) + ...) over its experts a < b < ...
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    const int32_t* mine = pairs + first[e];
    ArenaScope expert_scope(scratch);
    const TensorView xe = scratch.alloc({n, h}, DType::f32);        // the expert's input rows
    const TensorView gate = scratch.alloc({n, inter}, DType::f32);  // then act(gate) * up
    const TensorView up = scratch.alloc({n, inter}, DType::f32);
    const TensorView ye = scratch.alloc({n, h}, DType::f32);  // the expert's output rows
    parallel_for(0, n, [&](int64_t j) {
      const int64_t tok = mine[j] / k;
      std::copy(xf + tok * h, xf + (tok + 1) * h, xe.ptr<float>() + j * h);
    });
    linear(scratch, xe, w.gate.expert(e), gate, Output::activation, r);
    linear(scratch, xe, w.up.expert(e), up, Output::activation, r);
    if (act == GatedActivation::silu)
      silu_mul(gate, up, gate, r);
    else
      gelu_tanh_mul(gate, up, gate, r);
    linear(scratch, gate, w.down.expert(e), ye, Output::activation, r);
    // A token meets an expert once (checked above): the rows scatter without a race.
    parallel_for(0, n, [&](int64_t j) {
      const int64_t tok = mine[j] / k;
      const float weight = wf[mine[j]];
      const float* y = ye.ptr<float>() + j * h;
      float* dst = o + tok * h;
      for (int64_t c = 0; c < h; ++c) dst[c] = round_as(r, dst[c] + round_as(r, y[c] * weight));
    });
  }
}

}  // namespace fp8rl::ops::cpu
