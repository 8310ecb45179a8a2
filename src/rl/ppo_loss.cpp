#include "rl/ppo_loss.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace fp8rl {

KlEstimator parse_kl_estimator(std::string_view name) {
  if (name == "k1") return KlEstimator::k1;
  if (name == "k3") return KlEstimator::k3;
  RAISE("kl_estimator must be 'k1' or 'k3', got '{}'", name);
}

std::string_view kl_estimator_name(KlEstimator e) {
  return e == KlEstimator::k1 ? "k1" : "k3";
}

std::vector<int64_t> ppo_value_offsets(std::span<const int64_t> lengths, int64_t max_length) {
  std::vector<int64_t> offsets{0};
  for (const int64_t n : lengths) {
    CHECK(n >= 1 && n <= max_length, "ppo: a response of {} tokens under response_length {}", n,
          max_length);
    offsets.push_back(offsets.back() + std::min(n + 1, max_length));
  }
  return offsets;
}

std::vector<double> masked_whiten(std::span<const double> x, std::span<const uint8_t> mask,
                                  bool shift_mean) {
  CHECK(mask.empty() || mask.size() == x.size(), "masked_whiten: {} values, {} mask entries",
        x.size(), mask.size());
  auto in = [&](size_t i) { return mask.empty() || mask[i] != 0; };
  double sum = 0;
  int64_t count = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (in(i)) sum += x[i], ++count;
  CHECK(count >= 2,
        "ppo: whitening needs at least two values, got {}; use a larger batch (more "
        "responses per mini-batch)",
        count);
  const double mean = sum / double(count);
  double squares = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (in(i)) squares += (x[i] - mean) * (x[i] - mean);
  const double var = squares / double(count) * (double(count) / double(count - 1));
  const double inv = 1.0 / std::sqrt(var + 1e-8);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = (x[i] - mean) * inv + (shift_mean ? 0.0 : mean);
  return out;
}

PpoAdvantages ppo_advantages(const PpoRollout& r, const PpoAdvantageConfig& cfg) {
  const size_t b = r.scores.size();
  CHECK(r.token_offsets.size() == b + 1 && r.value_offsets.size() == b + 1,
        "ppo_advantages: {} scores, {} token and {} value offsets", b, r.token_offsets.size(),
        r.value_offsets.size());
  const size_t n = size_t(r.token_offsets[b]), v = size_t(r.value_offsets[b]);
  CHECK(r.logp.size() == n && r.ref_logp.size() == n && r.values.size() == v,
        "ppo_advantages: {} logprobs, {} reference logprobs for {} tokens; {} values for {}",
        r.logp.size(), r.ref_logp.size(), n, r.values.size(), v);
  PpoAdvantages out;
  out.kl.resize(n);
  out.rewards.assign(v, 0.0);
  for (size_t i = 0; i < b; ++i) {
    const int64_t t0 = r.token_offsets[i], v0 = r.value_offsets[i];
    const int64_t tokens = r.token_offsets[i + 1] - t0, values = r.value_offsets[i + 1] - v0;
    CHECK(values == tokens || values == tokens + 1,
          "ppo_advantages: response {} has {} tokens and {} value positions", i, tokens, values);
    double kl_sum = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const double logr = r.ref_logp[size_t(t0 + t)] - r.logp[size_t(t0 + t)];
      const double kl = cfg.kl_estimator == KlEstimator::k1 ? -logr : std::expm1(logr) - logr;
      out.kl[size_t(t0 + t)] = kl;
      out.rewards[size_t(v0 + t)] = -cfg.kl_coef * kl;
      kl_sum += kl;
    }
    out.rewards[size_t(v0 + values - 1)] += r.scores[i];
    out.mean_kl += kl_sum / double(b);
    out.mean_non_score_reward += -cfg.kl_coef * kl_sum / double(b);
    out.mean_score += r.scores[i] / double(b);
  }
  if (cfg.whiten_rewards) out.rewards = masked_whiten(out.rewards, {}, false);
  // GAE backwards over each response's value positions; V_L = 0 past the last.
  std::vector<double> gae(v);
  out.returns.resize(v);
  for (size_t i = 0; i < b; ++i) {
    double last = 0, next_value = 0;
    for (int64_t p = r.value_offsets[i + 1] - 1; p >= r.value_offsets[i]; --p) {
      const double delta = out.rewards[size_t(p)] + cfg.gamma * next_value - r.values[size_t(p)];
      last = delta + cfg.gamma * cfg.lam * last;
      gae[size_t(p)] = last;
      out.returns[size_t(p)] = last + r.values[size_t(p)];
      next_value = r.values[size_t(p)];
    }
  }
  // Advantages at the token positions only (TRL's padding_mask), whitened over them.
  std::vector<double> at_tokens;
  at_tokens.reserve(n);
  for (size_t i = 0; i < b; ++i)
    for (int64_t t = 0; t < r.token_offsets[i + 1] - r.token_offsets[i]; ++t)
      at_tokens.push_back(gae[size_t(r.value_offsets[i] + t)]);
  out.advantages = masked_whiten(at_tokens, {}, true);
  return out;
}

namespace {

// d max(a, b) as PyTorch's maximum: the larger side's gradient, half each on a tie.
double max_weight(double self, double other) {
  return self > other ? 1.0 : self == other ? 0.5 : 0.0;
}

}  // namespace

PpoPolicyLoss ppo_policy_loss(std::span<const double> logp, std::span<const double> old_logp,
                              std::span<const double> advantages, double cliprange) {
  const size_t n = logp.size();
  CHECK(n > 0 && old_logp.size() == n && advantages.size() == n,
        "ppo_policy_loss: {} logprobs, {} old logprobs, {} advantages", n, old_logp.size(),
        advantages.size());
  PpoPolicyLoss out;
  out.dloss_dlogp.resize(n);
  const double w = 1.0 / double(n);
  for (size_t t = 0; t < n; ++t) {
    const double diff = logp[t] - old_logp[t], ratio = std::exp(diff), a = advantages[t];
    const double clipped = std::clamp(ratio, 1.0 - cliprange, 1.0 + cliprange);
    const double l1 = -a * ratio, l2 = -a * clipped;
    out.loss += w * std::max(l1, l2);
    const bool inside = ratio >= 1.0 - cliprange && ratio <= 1.0 + cliprange;
    // d l1 / d logp = -a ratio; d l2 / d logp the same where the clamp passes it, else 0.
    out.dloss_dlogp[t] =
        w * (-a * ratio) * (max_weight(l1, l2) + (inside ? max_weight(l2, l1) : 0.0));
    out.clipfrac += w * (l2 > l1 ? 1.0 : 0.0);
    out.approxkl += w * 0.5 * diff * diff;
    out.ratio_mean += w * ratio;
  }
  return out;
}

PpoValueLoss ppo_value_loss(std::span<const double> values, std::span<const double> old_values,
                            std::span<const double> returns, double cliprange_value) {
  const size_t n = values.size();
  CHECK(n > 0 && old_values.size() == n && returns.size() == n,
        "ppo_value_loss: {} values, {} old values, {} returns", n, old_values.size(),
        returns.size());
  PpoValueLoss out;
  out.dloss_dvalue.resize(n);
  const double w = 0.5 / double(n);
  for (size_t t = 0; t < n; ++t) {
    const double lo = old_values[t] - cliprange_value, hi = old_values[t] + cliprange_value;
    const double v = values[t], clipped = std::clamp(v, lo, hi), ret = returns[t];
    const double l1 = (v - ret) * (v - ret), l2 = (clipped - ret) * (clipped - ret);
    out.loss += w * std::max(l1, l2);
    const bool inside = v >= lo && v <= hi;
    out.dloss_dvalue[t] = w * (2 * (v - ret) * max_weight(l1, l2) +
                               (inside ? 2 * (clipped - ret) * max_weight(l2, l1) : 0.0));
    out.clipfrac += (l2 > l1 ? 1.0 : 0.0) / double(n);
  }
  return out;
}

}  // namespace fp8rl
