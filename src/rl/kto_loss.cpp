#include "rl/kto_loss.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace fp8rl {

namespace {

double sigmoid(double x) {
  return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
}

}  // namespace

std::string_view kto_loss_type_name(KtoLossType type) {
  return type == KtoLossType::kto ? "kto" : "apo_zero_unpaired";
}

bool kto_loss_uses_kl(KtoLossType type) {
  return type != KtoLossType::apo_zero_unpaired;
}

double kto_kl_estimate(std::span<const double> policy_kl_logp,
                       std::span<const double> ref_kl_logp) {
  CHECK(policy_kl_logp.size() == ref_kl_logp.size() && !policy_kl_logp.empty(),
        "kto_kl_estimate: {} policy and {} reference values", policy_kl_logp.size(),
        ref_kl_logp.size());
  double sum = 0;
  for (size_t i = 0; i < policy_kl_logp.size(); ++i) sum += policy_kl_logp[i] - ref_kl_logp[i];
  const double mean = sum / double(policy_kl_logp.size());
  return std::isnan(mean) ? mean : std::max(mean, 0.0);  // torch's clamp keeps a NaN
}

KtoLossResult kto_loss(const KtoExamples& e, double kl, const KtoLossConfig& c) {
  const size_t n = e.policy_logp.size();
  CHECK(e.ref_logp.size() == n && e.desirable.size() == n,
        "kto_loss: {} policy, {} reference values and {} labels", n, e.ref_logp.size(),
        e.desirable.size());
  KtoLossResult r;
  r.dloss_dlogp.assign(n, 0.0);
  std::vector<double> losses(n), dlosses(n);  // weighted, per example
  for (size_t i = 0; i < n; ++i) {
    const double h = e.policy_logp[i] - e.ref_logp[i];
    const bool good = e.desirable[i] != 0;
    // Every case is 1 - σ(β sign (h - offset)) (apo's undesirable σ(β h) = 1 - σ(-β h)), whose
    // derivative in h is -β sign s (1 - s).
    const double offset = c.loss_type == KtoLossType::kto ? kl : 0.0;
    const double sign = good ? 1.0 : -1.0;
    const double s = sigmoid(c.beta * sign * (h - offset));
    const double loss = 1.0 - s;
    const double w = good ? c.desirable_weight : c.undesirable_weight;
    losses[i] = w * loss;
    dlosses[i] = w * -c.beta * s * (1.0 - s) * sign;
    if (good) {
      ++r.stats.num_chosen;
      if (!std::isnan(h)) r.stats.rewards_chosen += c.beta * h;
      if (!std::isnan(e.policy_logp[i])) r.stats.logps_chosen += e.policy_logp[i];
    } else {
      ++r.stats.num_rejected;
      if (!std::isnan(h)) r.stats.rewards_rejected += c.beta * h;
      if (!std::isnan(e.policy_logp[i])) r.stats.logps_rejected += e.policy_logp[i];
    }
  }
  double sum = 0;
  int64_t count = 0;
  for (double l : losses)
    if (!std::isnan(l)) {
      sum += l;
      ++count;
    }
  r.loss = count > 0 ? sum / double(count) : std::nan("");
  // A NaN example keeps its NaN derivative (as torch's), so the optimizer's non-finite guard
  // skips the step rather than training on the others alone.
  for (size_t i = 0; i < n; ++i)
    r.dloss_dlogp[i] = dlosses[i] / double(std::max<int64_t>(count, 1));
  return r;
}

}  // namespace fp8rl
