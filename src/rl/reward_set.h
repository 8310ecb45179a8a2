// Several reward functions combined with weights, with TRL's semantics (GRPOTrainer,
// multi_objective_aggregation = "sum_then_normalize"): per-function rewards with None as NaN,
// total = nansum_k(w_k * r_k) per row, and a row where every function returned None is
// "unscorable" (reward NaN, left out of the means, advantage 0). Beyond TRL (so that a broken
// reward cannot train silently), a row where any function returned NaN or +-Inf is "non-finite":
// reported and counted, its total NaN, never trained on (in TRL a NaN would pass as None).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rl/reward.h"

namespace fp8rl {

enum class RewardRow : uint8_t {
  scored,      // at least one value, all finite: total is finite
  unscorable,  // every function returned None
  non_finite,  // some function returned NaN or +-Inf
};

// nanmean and unbiased (Bessel) nanstd over the finite values; mean is NaN when count == 0 and
// std is NaN when count < 2.
struct RewardStats {
  double mean;
  double std;
  int64_t count;
};
RewardStats reward_stats(const std::vector<double>& values);

struct CombinedRewards {
  std::vector<std::string> names;          // [F]
  std::vector<double> weights;             // [F]
  std::vector<RewardValues> per_function;  // [F][B] as the functions returned them
  std::vector<double> total;               // [B] nansum_k(w_k r_k); NaN unless scored
  std::vector<RewardRow> rows;             // [B]
  int64_t num_unscorable = 0;
  int64_t num_non_finite = 0;
  std::vector<RewardStats> function_stats;  // [F] over the finite values of each function
  RewardStats total_stats{};                // over the scored rows' totals
  // What the functions logged (TRL's log_metric, log_extra): each metric's mean over every value
  // logged under its name by any function, and the extra columns, [B] values each.
  std::vector<std::pair<std::string, double>> logged_metrics;
  nlohmann::json logged_extra = nlohmann::json::object();

  // Metrics under TRL's names: rewards/<name>/mean, rewards/<name>/std, reward, reward_std;
  // and rewards/unscorable_count, rewards/non_finite_count. A NaN statistic is left out.
  std::vector<std::pair<std::string, double>> metrics() const;
};

class RewardSet {
 public:
  // Names must differ (they key the metrics); the weight must be finite.
  void add(std::unique_ptr<RewardFunction> function, double weight = 1.0);
  // TRL's reward_weights: one finite weight per function, in order of add().
  void set_weights(const std::vector<double>& weights);

  size_t size() const { return functions_.size(); }
  const std::vector<double>& weights() const { return weights_; }
  std::vector<std::string> names() const;
  RewardFunction& function(size_t i) { return *functions_.at(i); }

  // Runs every function on the batch (in order) and combines them, with what they logged.
  // Errors of a function (a reward process that failed, a missing column) pass through; a
  // function returning the wrong number of values or logging an extra column of the wrong
  // length is an fp8rl::Error naming it. An extra column several functions log holds the last
  // one's values.
  CombinedRewards score(const RewardBatch& batch);

 private:
  std::vector<std::unique_ptr<RewardFunction>> functions_;
  std::vector<double> weights_;
};

// The combination of per-function values (exposed for tests): [F][B] values and F weights.
CombinedRewards combine_rewards(std::vector<std::string> names, std::vector<double> weights,
                                std::vector<RewardValues> per_function);

}  // namespace fp8rl
