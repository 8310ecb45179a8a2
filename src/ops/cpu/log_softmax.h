// The log-softmax of one row of logits, computed one way for every CPU op that reports a
// log-probability: the sampler (the engine's logprobs) and the lm_head cross-entropy (the
// trainer's). Both then give the same logprob of the same logits bit for bit, which makes
// GRPO's engine-trainer mismatch exactly zero on the CPU (on_policy_exact).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fp8rl::ops::cpu {

struct LogSoftmaxRow {
  float t = 1.0f;   // the temperature the row was divided by
  double lse = 0;   // log sum_i exp(x_i / t)
  // log softmax(x / t) at the entry whose logit is x.
  float at(float x) const { return float(double(x / t) - lse); }
};

// x [v]: logits (softcapped already); z_i = x_i / t in fp32 (as the trainer tempers them),
// the sum of exp(z_i - max z) in fp64.
inline LogSoftmaxRow log_softmax_row(const float* x, int64_t v, float t) {
  float m = -INFINITY;
  for (int64_t i = 0; i < v; ++i) m = std::max(m, x[i] / t);
  double sum = 0.0;
  for (int64_t i = 0; i < v; ++i) sum += std::exp(double(x[i] / t - m));
  return {t, double(m) + std::log(sum)};
}

}  // namespace fp8rl::ops::cpu
