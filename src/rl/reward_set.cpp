#include "rl/reward_set.h"

#include <cmath>
#include <limits>
#include <map>

#include "core/check.h"
#include "core/nan.h"

namespace fp8rl {

RewardStats reward_stats(const std::vector<double>& values) {
  RewardStats s{kNaN, kNaN, 0};
  double sum = 0.0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    sum += v;
    ++s.count;
  }
  if (s.count == 0) return s;
  s.mean = sum / double(s.count);
  if (s.count < 2) return s;
  double squares = 0.0;
  for (double v : values) {
    if (std::isfinite(v)) squares += (v - s.mean) * (v - s.mean);
  }
  s.std = std::sqrt(squares / double(s.count - 1));
  return s;
}

CombinedRewards combine_rewards(std::vector<std::string> names, std::vector<double> weights,
                                std::vector<RewardValues> per_function) {
  CHECK(names.size() == weights.size() && names.size() == per_function.size(),
        "rewards: {} names, {} weights and {} value lists", names.size(), weights.size(),
        per_function.size());
  const size_t b = per_function.empty() ? 0 : per_function[0].size();
  CombinedRewards c;
  c.total.assign(b, 0.0);
  c.rows.assign(b, RewardRow::unscorable);
  for (size_t k = 0; k < per_function.size(); ++k) {
    const RewardValues& values = per_function[k];
    CHECK(values.size() == b, "rewards: function '{}' gave {} values, the first gave {}", names[k],
          values.size(), b);
    std::vector<double> finite;
    for (size_t i = 0; i < b; ++i) {
      if (!values[i]) continue;
      const double r = *values[i];
      if (!std::isfinite(r)) {
        c.rows[i] = RewardRow::non_finite;
        continue;
      }
      finite.push_back(r);
      if (c.rows[i] == RewardRow::non_finite) continue;
      c.rows[i] = RewardRow::scored;
      c.total[i] += weights[k] * r;
    }
    c.function_stats.push_back(reward_stats(finite));
  }
  for (size_t i = 0; i < b; ++i) {
    if (c.rows[i] == RewardRow::scored) continue;
    c.total[i] = kNaN;
    (c.rows[i] == RewardRow::unscorable ? c.num_unscorable : c.num_non_finite) += 1;
  }
  c.total_stats = reward_stats(c.total);
  c.names = std::move(names);
  c.weights = std::move(weights);
  c.per_function = std::move(per_function);
  return c;
}

std::vector<std::pair<std::string, double>> CombinedRewards::metrics() const {
  std::vector<std::pair<std::string, double>> out;
  auto put = [&](std::string key, double value) {
    if (!std::isnan(value)) out.emplace_back(std::move(key), value);
  };
  for (size_t k = 0; k < names.size(); ++k) {
    put("rewards/" + names[k] + "/mean", function_stats[k].mean);
    put("rewards/" + names[k] + "/std", function_stats[k].std);
  }
  put("reward", total_stats.mean);
  put("reward_std", total_stats.std);
  put("rewards/unscorable_count", double(num_unscorable));
  put("rewards/non_finite_count", double(num_non_finite));
  return out;
}

void RewardSet::add(std::unique_ptr<RewardFunction> function, double weight) {
  CHECK(function != nullptr, "rewards: add() of a null reward function");
  CHECK(std::isfinite(weight), "rewards: the weight of '{}' must be finite, got {}",
        function->name(), weight);
  for (const auto& f : functions_) {
    CHECK(f->name() != function->name(),
          "rewards: two reward functions are named '{}'; give one a different name (the name "
          "keys the metrics rewards/<name>/mean)",
          function->name());
  }
  functions_.push_back(std::move(function));
  weights_.push_back(weight);
}

void RewardSet::set_weights(const std::vector<double>& weights) {
  CHECK(weights.size() == functions_.size(),
        "rewards: reward_weights has {} entries for {} reward functions", weights.size(),
        functions_.size());
  for (size_t k = 0; k < weights.size(); ++k) {
    CHECK(std::isfinite(weights[k]), "rewards: reward_weights[{}] must be finite, got {}", k,
          weights[k]);
  }
  weights_ = weights;
}

std::vector<std::string> RewardSet::names() const {
  std::vector<std::string> out;
  for (const auto& f : functions_) out.push_back(f->name());
  return out;
}

CombinedRewards RewardSet::score(const RewardBatch& batch) {
  CHECK(!functions_.empty(), "rewards: no reward function is configured");
  batch.validate();
  std::vector<RewardValues> per_function;
  // TRL collects log_metric values of every function under one name and reports their mean.
  std::map<std::string, std::pair<double, int64_t>> metric_sums;
  std::vector<std::string> metric_order;
  nlohmann::json extra = nlohmann::json::object();
  for (const auto& f : functions_) {
    RewardValues values = f->score(batch);
    CHECK(int64_t(values.size()) == batch.size(),
          "rewards: reward function '{}' returned {} values for a batch of {} completions",
          f->name(), values.size(), batch.size());
    per_function.push_back(std::move(values));
    RewardLogs logs = f->take_logs();
    for (auto& [name, logged] : logs.metrics) {
      auto [it, fresh] = metric_sums.try_emplace(name, 0.0, 0);
      if (fresh) metric_order.push_back(name);
      for (double v : logged) it->second.first += v;
      it->second.second += int64_t(logged.size());
    }
    for (auto it = logs.extra.begin(); it != logs.extra.end(); ++it) {
      CHECK(int64_t(it->size()) == batch.size(),
            "rewards: reward function '{}' logged {} values of the extra column '{}' for a batch "
            "of {} completions",
            f->name(), it->size(), it.key(), batch.size());
      // A column two functions log holds the later one's values: TRL's table keeps the last
      // batch's worth of each column (TRL's accuracy rewards both log "solution").
      extra[it.key()] = std::move(*it);
    }
  }
  CombinedRewards c = combine_rewards(names(), weights_, std::move(per_function));
  for (const std::string& name : metric_order) {
    const auto& [sum, count] = metric_sums.at(name);
    c.logged_metrics.emplace_back(name, sum / double(count));
  }
  c.logged_extra = std::move(extra);
  return c;
}

}  // namespace fp8rl
