#include "rl/advantages.h"

#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/nan.h"

namespace fp8rl {
namespace {

struct NanMoments {
  double mean = kNaN;
  double std = kNaN;
};

// torch.nanmean and trl.trainer.utils.nanstd over one range, in the same order of operations:
// variance = nanmean((x - mean)^2) * count / (count - 1), NaN for count <= 1.
NanMoments nan_moments(std::span<const double> x) {
  double sum = 0.0;
  int64_t count = 0;
  for (double v : x) {
    if (std::isnan(v)) continue;
    sum += v;
    ++count;
  }
  NanMoments m;
  if (count == 0) return m;
  m.mean = sum / double(count);
  if (count == 1) return m;
  double squares = 0.0;
  for (double v : x) {
    if (!std::isnan(v)) squares += (v - m.mean) * (v - m.mean);
  }
  const double variance = squares / double(count) * (double(count) / double(count - 1));
  m.std = std::sqrt(variance);
  return m;
}

// torch.isclose(std, 0) with its defaults (rtol 1e-5, atol 1e-8); NaN is never close.
bool is_zero_std(double std) {
  return std::fabs(std) <= 1e-8;
}

}  // namespace

ScaleRewards parse_scale_rewards(std::string_view name) {
  if (name == "group" || name == "true") return ScaleRewards::group;
  if (name == "batch") return ScaleRewards::batch;
  if (name == "none" || name == "false") return ScaleRewards::none;
  RAISE("scale_rewards '{}' is not supported (group, batch, none; true = group, false = none)",
        name);
}

std::string_view scale_rewards_name(ScaleRewards scale) {
  switch (scale) {
    case ScaleRewards::group:
      return "group";
    case ScaleRewards::batch:
      return "batch";
    case ScaleRewards::none:
      return "none";
  }
  RAISE("unknown ScaleRewards {}", int(scale));
}

std::string_view advantage_estimator_name(AdvantageEstimator estimator) {
  switch (estimator) {
    case AdvantageEstimator::grpo:
      return "grpo";
    case AdvantageEstimator::rloo:
      return "rloo";
    case AdvantageEstimator::reinforce_plus_plus:
      return "reinforce_plus_plus";
    case AdvantageEstimator::reinforce_plus_plus_baseline:
      return "reinforce_plus_plus_baseline";
  }
  RAISE("unknown AdvantageEstimator {}", int(estimator));
}

namespace {

// TRL's RLOOTrainer: the leave-one-out baseline per group, then optionally the batch's
// whitening.
void rloo_advantages(std::span<const double> rewards, int64_t num_generations, bool normalize,
                     std::vector<double>& out) {
  const size_t n = rewards.size(), g = size_t(num_generations);
  for (size_t first = 0; first < n; first += g) {
    const auto group = rewards.subspan(first, g);
    double sum = 0.0;
    int64_t scorable = 0;
    for (double v : group) {
      if (std::isnan(v)) continue;
      sum += v;
      ++scorable;
    }
    for (size_t j = 0; j < g; ++j) {
      // 0/0 when the row is the group's only scorable one: NaN, zeroed below as in TRL.
      const double baseline = (sum - group[j]) / double(scorable - 1);
      out[first + j] = group[j] - baseline;
    }
  }
  if (normalize) {
    const NanMoments m = nan_moments(out);
    for (double& a : out) a = (a - m.mean) / (m.std + 1e-4);
  }
  for (double& a : out) a = std::isnan(a) ? 0.0 : a;
}

// verl's masked_whiten over tokens: each completion's value repeated num_tokens times.
void whiten_over_tokens(std::span<const int64_t> num_tokens, std::vector<double>& values) {
  double weight = 0.0, sum = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) continue;
    weight += double(num_tokens[i]);
    sum += double(num_tokens[i]) * values[i];
  }
  if (weight < 2.0) {
    values.assign(values.size(), 0.0);
    return;
  }
  const double mean = sum / weight;
  double squares = 0.0;
  for (size_t i = 0; i < values.size(); ++i)
    if (!std::isnan(values[i]))
      squares += double(num_tokens[i]) * (values[i] - mean) * (values[i] - mean);
  const double variance = squares / weight * (weight / (weight - 1.0));
  const double inv_std = 1.0 / std::sqrt(variance + 1e-8);
  for (double& v : values) v = std::isnan(v) ? 0.0 : (v - mean) * inv_std;
}

}  // namespace

Advantages compute_advantages(std::span<const double> rewards, int64_t num_generations,
                              const AdvantageOptions& options,
                              std::span<const int64_t> num_tokens) {
  Advantages out = compute_advantages(rewards, num_generations, options.scale);
  const size_t n = rewards.size();
  switch (options.estimator) {
    case AdvantageEstimator::grpo:
      break;
    case AdvantageEstimator::rloo:
      rloo_advantages(rewards, num_generations, options.normalize_advantages, out.advantages);
      break;
    case AdvantageEstimator::reinforce_plus_plus:
    case AdvantageEstimator::reinforce_plus_plus_baseline: {
      CHECK(num_tokens.size() == n, "{} advantage needs the {} completions' token counts, got {}",
            advantage_estimator_name(options.estimator), n, num_tokens.size());
      std::vector<double> values(rewards.begin(), rewards.end());
      if (options.estimator == AdvantageEstimator::reinforce_plus_plus_baseline) {
        const size_t g = size_t(num_generations);
        for (size_t first = 0; first < n; first += g) {
          const double mean = nan_moments(rewards.subspan(first, g)).mean;
          for (size_t j = first; j < first + g; ++j) values[j] -= mean;
        }
      }
      whiten_over_tokens(num_tokens, values);
      out.advantages = std::move(values);
      break;
    }
  }
  return out;
}

Advantages compute_advantages(std::span<const double> rewards, int64_t num_generations,
                              ScaleRewards scale) {
  CHECK(num_generations >= 1, "num_generations must be >= 1, got {}", num_generations);
  const int64_t n = int64_t(rewards.size());
  CHECK(n % num_generations == 0, "{} rewards are not whole groups of num_generations = {}", n,
        num_generations);
  for (int64_t i = 0; i < n; ++i) {
    CHECK(!std::isinf(rewards[size_t(i)]),
          "reward {} is infinite; pass NaN for a completion without a reward", i);
  }
  const int64_t num_groups = n / num_generations;

  Advantages out;
  out.advantages.assign(size_t(n), 0.0);
  const NanMoments all = nan_moments(rewards);
  // TRL: std_rewards = zeros when the reduction has a single element.
  const double batch_std = n > 1 ? all.std : 0.0;
  int64_t zero_std_rows = 0;
  for (int64_t g = 0; g < num_groups; ++g) {
    const auto group = rewards.subspan(size_t(g * num_generations), size_t(num_generations));
    const NanMoments moments = nan_moments(group);
    const double group_std = num_generations > 1 ? moments.std : 0.0;
    const double std = scale == ScaleRewards::batch ? batch_std : group_std;
    if (is_zero_std(std)) zero_std_rows += num_generations;
    for (int64_t j = 0; j < num_generations; ++j) {
      double a = group[size_t(j)] - moments.mean;
      if (scale != ScaleRewards::none) a /= std + 1e-4;
      out.advantages[size_t(g * num_generations + j)] = std::isnan(a) ? 0.0 : a;
    }
  }

  out.stats.reward = all.mean;
  out.stats.reward_std = all.std;
  out.stats.frac_reward_zero_std = n > 0 ? double(zero_std_rows) / double(n) : 0.0;
  for (double r : rewards) out.stats.num_unscorable += std::isnan(r) ? 1 : 0;
  return out;
}

}  // namespace fp8rl
