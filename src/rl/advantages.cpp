#include "rl/advantages.h"

#include <cmath>
#include <limits>

#include "core/check.h"

namespace fp8rl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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
