// The lm_head with a chunked cross-entropy: chunk_rows rows of logits at a time, each chunk's
// logits recomputed in the backward, so [T, V] never exists.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/parallel.h"
#include "ops/cpu/backward_ops.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/log_softmax.h"

namespace fp8rl::ops::cpu {

namespace {

void check_targets(const TensorView& targets, int64_t v) {
  const int32_t* tg = targets.ptr<const int32_t>();
  for (int64_t t = 0; t < targets.numel(); ++t)
    CHECK(tg[t] == kIgnoreIndex || (tg[t] >= 0 && tg[t] < v),
          "cross-entropy: target {} of row {} is outside the vocabulary [0, {}) and not {}", tg[t],
          t, v, kIgnoreIndex);
}

// Rows [r0, r1) of the raw logits x W^T, as the forward's lm_head computes them.
TensorView chunk_logits(Arena& scratch, const TensorView& x, const LinearWeight& w, int64_t r0,
                        int64_t r1) {
  TensorView logits = scratch.alloc({r1 - r0, w.out_features()}, DType::f32);
  linear(scratch, x.slice_rows(r0, r1), w, logits, Output::f32, Rounding::none);
  return logits;
}

// z = softcap(l) / temperature, as the forward tempers the logits.
inline float scaled_logit(float l, const CrossEntropyParams& p) {
  if (p.softcap > 0) l = p.softcap * std::tanh(l / p.softcap);
  return l / p.temperature;
}

}  // namespace

void lm_head_cross_entropy(Arena& scratch, const TensorView& x, const LinearWeight& lm_head,
                           const TensorView& targets, const CrossEntropyParams& p,
                           const TensorView& loss, const TensorView& logprob, const TensorView& lse,
                           const TensorView& entropy) {
  const int64_t t_count = x.dim(0), v = lm_head.out_features();
  check_targets(targets, v);
  const int32_t* tg = targets.ptr<const int32_t>();
  for (int64_t r0 = 0; r0 < t_count; r0 += p.chunk_rows) {
    const int64_t r1 = std::min(t_count, r0 + p.chunk_rows);
    ArenaScope scope(scratch);
    const TensorView logits = chunk_logits(scratch, x, lm_head, r0, r1);
    parallel_for(r0, r1, [&](int64_t t) {
      float* z = logits.ptr<float>() + (t - r0) * v;
      for (int64_t i = 0; i < v; ++i) z[i] = scaled_logit(z[i], p);
      // The sampler's log-softmax (log_softmax.h): the engine's logprobs equal these.
      const LogSoftmaxRow ls = log_softmax_row(z, v, 1.0f);
      const double l = ls.lse;
      lse.ptr<float>()[t] = float(l);
      const bool ignored = tg[t] == kIgnoreIndex;
      const float lp = ignored ? 0.0f : ls.at(z[tg[t]]);
      logprob.ptr<float>()[t] = lp;
      loss.ptr<float>()[t] = -lp;
      if (!entropy.empty()) {
        double e = 0.0;  // sum_v p_v (lse - z_v)
        if (!ignored)
          for (int64_t i = 0; i < v; ++i) {
            const double d = l - double(z[i]);
            e += std::exp(-d) * d;
          }
        entropy.ptr<float>()[t] = float(e);
      }
    });
  }
}

void lm_head_cross_entropy_backward(Arena& scratch, const TensorView& x,
                                    const LinearWeight& lm_head, const TensorView& targets,
                                    const CrossEntropyParams& p, const TensorView& lse,
                                    const TensorView& dloss, const TensorView& dx) {
  const int64_t t_count = x.dim(0), v = lm_head.out_features();
  check_targets(targets, v);
  const int32_t* tg = targets.ptr<const int32_t>();
  for (int64_t r0 = 0; r0 < t_count; r0 += p.chunk_rows) {
    const int64_t r1 = std::min(t_count, r0 + p.chunk_rows);
    ArenaScope scope(scratch);
    const TensorView logits = chunk_logits(scratch, x, lm_head, r0, r1);
    // The raw logits become their gradient in place.
    parallel_for(r0, r1, [&](int64_t t) {
      float* g = logits.ptr<float>() + (t - r0) * v;
      if (tg[t] == kIgnoreIndex) {
        std::fill(g, g + v, 0.0f);
        return;
      }
      const float l = lse.ptr<const float>()[t], d = dloss.ptr<const float>()[t];
      for (int64_t i = 0; i < v; ++i) {
        float cap_grad = 1.0f, z = g[i];
        if (p.softcap > 0) {
          const float th = std::tanh(z / p.softcap);
          z = p.softcap * th;
          cap_grad = 1.0f - th * th;
        }
        z /= p.temperature;
        const float prob = std::exp(z - l);
        const float dz = d * (prob - (i == tg[t] ? 1.0f : 0.0f));
        g[i] = dz / p.temperature * cap_grad;
      }
    });
    linear_backward_input(logits, lm_head, dx.slice_rows(r0, r1), false);
  }
}

}  // namespace fp8rl::ops::cpu
