// Mixture-of-experts routing and expert MLPs on the CPU: the reference of ops::moe_route and
// ops::moe_experts, step for step transformers' eager Qwen3-MoE code (router softmax in fp32,
// top-k, optional renormalization; a loop over the experts hit, each adding its weighted rows
// into a zeroed output). Each expert's rows run through the dense linear and gated activation
// of this directory, so an expert is computed exactly as a dense MLP over those rows.
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "core/rng.h"
#include "ops/cpu/backward_ops.h"
#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

namespace {

// p = softmax(logits) of one token's E router logits, in place, in fp32.
void softmax_in_place(float* p, int64_t ne) {
  float m = p[0];
  for (int64_t j = 1; j < ne; ++j) m = std::max(m, p[j]);
  float sum = 0.0f;
  for (int64_t j = 0; j < ne; ++j) {
    p[j] = std::exp(p[j] - m);
    sum += p[j];
  }
  for (int64_t j = 0; j < ne; ++j) p[j] /= sum;
}

// The (token, slot) pairs of `experts` [T, k] bucketed by expert, in token order within an
// expert: pair i * k + s sits in bucket experts[i, s], at pairs[first[e] .. first[e + 1]).
// Raises on an id outside [0, E) or one repeated for a token. Views into scratch.
struct ExpertBuckets {
  const int32_t* first;  // [E + 1]
  const int32_t* pairs;  // [T * k]
};

ExpertBuckets bucket_by_expert(Arena& scratch, const TensorView& experts, int64_t ne) {
  const int64_t t = experts.dim(0), k = experts.dim(1);
  const int32_t* ids = experts.ptr<int32_t>();
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t s = 0; s < k; ++s) {
      const int32_t e = ids[i * k + s];
      CHECK(e >= 0 && e < ne, "moe_experts: token {} is routed to expert {}, outside [0, {})", i, e,
            ne);
      for (int64_t s2 = 0; s2 < s; ++s2)
        CHECK(ids[i * k + s2] != e, "moe_experts: token {} is routed to expert {} twice", i, e);
    }
  }
  int32_t* first = scratch.alloc({ne + 1}, DType::i32).ptr<int32_t>();
  int32_t* pairs = scratch.alloc({t * k}, DType::i32).ptr<int32_t>();
  int32_t* next = scratch.alloc({ne}, DType::i32).ptr<int32_t>();
  std::fill(first, first + ne + 1, 0);
  for (int64_t p = 0; p < t * k; ++p) ++first[ids[p] + 1];
  for (int64_t e = 0; e < ne; ++e) first[e + 1] += first[e];
  std::copy(first, first + ne, next);
  for (int64_t p = 0; p < t * k; ++p) pairs[next[ids[p]]++] = int32_t(p);
  return {first, pairs};
}

// Expert e's dropout stream of a projection's (MoeLora).
LoraDropout expert_dropout(const LoraDropout& d, int64_t e) {
  return {d.p, rng_key(d.seed, uint64_t(e))};
}

// out += scale (x A_e^T) B_e^T for expert e's adapter of a projection (if any): the two
// products linear_group's CPU reference runs for a dense projection's adapter.
void add_expert_lora(Arena& scratch, const TensorView& x, const LoraWeights& stacked,
                     const LoraDropout& dropout, int64_t e, const TensorView& out, Rounding r) {
  if (!stacked.active()) return;
  const LoraWeights one = expert_lora(stacked, e);
  LinearWeight a, b;
  a.weight = one.a;  // [r, K]
  b.weight = one.b;  // [N, r]
  ArenaScope scope(scratch);
  TensorView xd = x;
  if (dropout.p > 0) {
    xd = scratch.alloc(x.shape, DType::f32);
    lora_dropout(x, expert_dropout(dropout, e), xd);
  }
  const TensorView xa = scratch.alloc({x.dim(0), one.rank()}, DType::f32);
  linear(scratch, xd, a, xa, Output::activation, r);
  linear_accumulate(scratch, xa, b, one.scale, out, r);
}

// Expert e's MLP over its rows xe [n, H], with its adapters: gate, up [n, I] the projections,
// a [n, I] = act(gate) * up (a may be gate), y [n, H] = down(a).
void expert_mlp(Arena& scratch, const TensorView& xe, const MoeWeights& w, const MoeLora& lora,
                int64_t e, GatedActivation act, const TensorView& gate, const TensorView& up,
                const TensorView& a, const TensorView& y, Rounding r) {
  linear(scratch, xe, w.gate.expert(e), gate, Output::activation, r);
  add_expert_lora(scratch, xe, lora.gate, lora.gate_dropout, e, gate, r);
  linear(scratch, xe, w.up.expert(e), up, Output::activation, r);
  add_expert_lora(scratch, xe, lora.up, lora.up_dropout, e, up, r);
  if (act == GatedActivation::silu)
    silu_mul(gate, up, a, r);
  else
    gelu_tanh_mul(gate, up, a, r);
  linear(scratch, a, w.down.expert(e), y, Output::activation, r);
  add_expert_lora(scratch, a, lora.down, lora.down_dropout, e, y, r);
}

// Expert e's slices ([r, K], [N, r]) of stacked gradients [E, r, K], [E, N, r].
TensorView expert_slice(const TensorView& stacked, int64_t e) {
  return stacked.slice_rows(e, e + 1).reshape({stacked.dim(1), stacked.dim(2)});
}

// The adapter's backward of one expert projection y += scale (x A^T) B^T: dA, dB (+=) and
// dx (+=).
void expert_lora_backward(Arena& scratch, const TensorView& x, const LoraWeights& stacked,
                          const LoraDropout& dropout, int64_t e, const TensorView& dy,
                          const TensorView& dx, const TensorView& da, const TensorView& db) {
  if (!stacked.active()) return;
  const LoraWeights one = expert_lora(stacked, e);
  lora_backward(scratch, x, one.a, one.b, one.scale, expert_dropout(dropout, e), dy, dx,
                expert_slice(da, e), expert_slice(db, e));
}

// The rows of x [T, H] of an expert's pairs (pair p is token p / k) into xe [n, H].
void gather_rows(const TensorView& x, const int32_t* mine, int64_t n, int64_t k,
                 const TensorView& xe) {
  const int64_t h = x.dim(1);
  const float* xf = x.ptr<float>();
  parallel_for(0, n, [&](int64_t j) {
    const int64_t tok = mine[j] / k;
    std::copy(xf + tok * h, xf + (tok + 1) * h, xe.ptr<float>() + j * h);
  });
}

}  // namespace

void moe_route(Arena& scratch, const TensorView& x, const LinearWeight& router, bool normalize,
               const TensorView& weights, const TensorView& experts, bool replay,
               const TensorView& chosen, Rounding r) {
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
    softmax_in_place(p, ne);
    float* w = w_all + i * k;
    int32_t* ids = id_all + i * k;
    const bool replayed = replay && ids[0] >= 0;
    // The recorded experts, only their weights recomputed (ids checked by the caller).
    if (replayed)
      for (int64_t s = 0; s < k; ++s) w[s] = p[ids[s]];
    // Top-k by repeated selection: a strictly larger probability wins, so ties go to the lower
    // index. A chosen probability is marked -1 (probabilities are >= 0, or NaN, which is still
    // chosen last rather than never).
    int32_t* own = replayed ? (chosen.empty() ? nullptr : chosen.ptr<int32_t>() + i * k) : ids;
    if (own != nullptr)
      for (int64_t s = 0; s < k; ++s) {
        int64_t best = -1;
        for (int64_t j = 0; j < ne; ++j)
          if (!(p[j] < 0.0f) && (best < 0 || p[j] > p[best])) best = j;
        if (!replayed) w[s] = p[best];
        own[s] = int32_t(best);
        p[best] = -1.0f;
      }
    if (replay && !replayed && !chosen.empty()) std::copy_n(ids, k, chosen.ptr<int32_t>() + i * k);
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
                 const MoeLora& lora, Rounding r) {
  const int64_t t = x.dim(0), h = x.dim(1), k = experts.dim(1);
  const int64_t ne = w.gate.num_experts(), inter = w.gate.out_features();
  const float* wf = weights.ptr<float>();
  float* o = out.ptr<float>();
  std::fill(o, o + t * h, 0.0f);
  if (t == 0) return;
  ArenaScope scope(scratch);
  const ExpertBuckets b = bucket_by_expert(scratch, experts, ne);
  // Experts in increasing index, as transformers visits the experts hit: each token's output
  // is (((0 + y_a) + y_b) + ...) over its experts a < b < ...
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t n = b.first[e + 1] - b.first[e];
    if (n == 0) continue;
    const int32_t* mine = b.pairs + b.first[e];
    ArenaScope expert_scope(scratch);
    const TensorView xe = scratch.alloc({n, h}, DType::f32);        // the expert's input rows
    const TensorView gate = scratch.alloc({n, inter}, DType::f32);  // then act(gate) * up
    const TensorView up = scratch.alloc({n, inter}, DType::f32);
    const TensorView ye = scratch.alloc({n, h}, DType::f32);  // the expert's output rows
    gather_rows(x, mine, n, k, xe);
    expert_mlp(scratch, xe, w, lora, e, act, gate, up, gate, ye, r);
    // A token meets an expert once (checked): the rows scatter without a race.
    parallel_for(0, n, [&](int64_t j) {
      const int64_t tok = mine[j] / k;
      const float weight = wf[mine[j]];
      const float* y = ye.ptr<float>() + j * h;
      float* dst = o + tok * h;
      for (int64_t c = 0; c < h; ++c) dst[c] = round_as(r, dst[c] + round_as(r, y[c] * weight));
    });
  }
}

void moe_experts_backward(Arena& scratch, const TensorView& x, const MoeWeights& w,
                          GatedActivation act, const TensorView& weights, const TensorView& experts,
                          const TensorView& dout, const TensorView& dx, const TensorView& d_weights,
                          const MoeLora& lora, const MoeLoraGrads& grads) {
  const int64_t t = x.dim(0), h = x.dim(1), k = experts.dim(1);
  const int64_t ne = w.gate.num_experts(), inter = w.gate.out_features();
  const float* wf = weights.ptr<float>();
  const float* dy = dout.ptr<float>();
  float* dxf = dx.ptr<float>();
  float* dwf = d_weights.ptr<float>();
  std::fill(dxf, dxf + t * h, 0.0f);
  std::fill(dwf, dwf + t * k, 0.0f);
  if (t == 0) return;
  ArenaScope scope(scratch);
  const ExpertBuckets b = bucket_by_expert(scratch, experts, ne);
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t n = b.first[e + 1] - b.first[e];
    if (n == 0) continue;
    const int32_t* mine = b.pairs + b.first[e];
    ArenaScope expert_scope(scratch);
    const TensorView xe = scratch.alloc({n, h}, DType::f32);        // the expert's input rows
    const TensorView gate = scratch.alloc({n, inter}, DType::f32);  // then d gate
    const TensorView up = scratch.alloc({n, inter}, DType::f32);    // then d up
    const TensorView a = scratch.alloc({n, inter}, DType::f32);     // act(gate) * up
    const TensorView ye = scratch.alloc({n, h}, DType::f32);        // output rows; then d ye
    const TensorView da = scratch.alloc({n, inter}, DType::f32);    // d a
    const TensorView dxe = scratch.alloc({n, h}, DType::f32);       // d xe
    gather_rows(x, mine, n, k, xe);
    expert_mlp(scratch, xe, w, lora, e, act, gate, up, a, ye, Rounding::none);
    parallel_for(0, n, [&](int64_t j) {
      const int64_t tok = mine[j] / k;
      float* y = ye.ptr<float>() + j * h;
      const float* g = dy + tok * h;
      float dot = 0.0f;
      for (int64_t c = 0; c < h; ++c) dot += g[c] * y[c];
      dwf[mine[j]] = dot;
      for (int64_t c = 0; c < h; ++c) y[c] = g[c] * wf[mine[j]];
    });
    linear_backward_input(ye, w.down.expert(e), da, false);
    expert_lora_backward(scratch, a, lora.down, lora.down_dropout, e, ye, da, grads.down_a,
                         grads.down_b);
    if (act == GatedActivation::silu)
      silu_mul_backward(gate, up, da, gate, up);
    else
      gelu_tanh_mul_backward(gate, up, da, gate, up);
    linear_backward_input(gate, w.gate.expert(e), dxe, false);
    linear_backward_input(up, w.up.expert(e), dxe, true);
    expert_lora_backward(scratch, xe, lora.gate, lora.gate_dropout, e, gate, dxe, grads.gate_a,
                         grads.gate_b);
    expert_lora_backward(scratch, xe, lora.up, lora.up_dropout, e, up, dxe, grads.up_a, grads.up_b);
    parallel_for(0, n, [&](int64_t j) {
      const int64_t tok = mine[j] / k;
      const float* src = dxe.ptr<float>() + j * h;
      float* dst = dxf + tok * h;
      for (int64_t c = 0; c < h; ++c) dst[c] += src[c];
    });
  }
}

void moe_route_backward(Arena& scratch, const TensorView& x, const LinearWeight& router,
                        bool normalize, const TensorView& experts, const TensorView& d_weights,
                        const TensorView& dx) {
  const int64_t t = x.dim(0), ne = router.out_features(), k = experts.dim(1);
  if (t == 0) return;
  ArenaScope scope(scratch);
  const TensorView logits = scratch.alloc({t, ne}, DType::f32);  // [T, E]; then d logits
  linear(scratch, x, router, logits, Output::activation, Rounding::none);
  const TensorView dp_v = scratch.alloc({t, k}, DType::f32);  // d p at each token's experts
  const int32_t* id_all = experts.ptr<int32_t>();
  const float* dw_all = d_weights.ptr<float>();
  parallel_for(0, t, [&](int64_t i) {
    float* p = logits.ptr<float>() + i * ne;
    softmax_in_place(p, ne);
    const int32_t* ids = id_all + i * k;
    const float* dw = dw_all + i * k;
    float* dp = dp_v.ptr<float>() + i * k;
    // dp at the token's experts: dw, or through w_s = p_s / S with S the kept p's sum.
    float total = 0.0f, dot = 0.0f;
    for (int64_t s = 0; s < k; ++s) {
      total += p[ids[s]];
      dot += dw[s] * p[ids[s]];
    }
    for (int64_t s = 0; s < k; ++s)
      dp[s] = normalize ? dw[s] / total - dot / (total * total) : dw[s];
    // Softmax: dz_j = p_j (dp_j - sum_m p_m dp_m), dp zero off the kept experts.
    float pdp = 0.0f;
    for (int64_t s = 0; s < k; ++s) pdp += p[ids[s]] * dp[s];
    for (int64_t s = 0; s < k; ++s) dp[s] *= p[ids[s]];  // p_e dp_e, before p is overwritten
    for (int64_t j = 0; j < ne; ++j) p[j] = -p[j] * pdp;
    for (int64_t s = 0; s < k; ++s) p[ids[s]] += dp[s];
  });
  linear_backward_input(logits, router, dx, true);
}

}  // namespace fp8rl::ops::cpu
