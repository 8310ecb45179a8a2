// Advantages from one generation batch's rewards: GRPO's as TRL's GRPOTrainer computes them in
// _generate_and_score_completions (multi_objective_aggregation="sum_then_normalize"), RLOO's as
// TRL's RLOOTrainer, and REINFORCE++ (with and without its group baseline) as verl's
// compute_reinforce_plus_plus*_outcome_advantage.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fp8rl {

// GRPOConfig.scale_rewards. "group" (default; also the bool true), "batch" (Lite PPO: the mean
// stays per group, the std is over the whole batch), "none" (Dr. GRPO; also the bool false).
enum class ScaleRewards { group, batch, none };

// Accepts TRL's names and its bool aliases ("true" = group, "false" = none).
ScaleRewards parse_scale_rewards(std::string_view name);
std::string_view scale_rewards_name(ScaleRewards scale);

// The advantage_estimator key, in verl's names (TRL selects RLOO by its trainer instead).
enum class AdvantageEstimator { grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline };

std::string_view advantage_estimator_name(AdvantageEstimator estimator);

struct AdvantageOptions {
  AdvantageEstimator estimator = AdvantageEstimator::grpo;
  ScaleRewards scale = ScaleRewards::group;  // grpo only
  bool normalize_advantages = false;         // rloo only (RLOOConfig.normalize_advantages)
};

// TRL's logged values for the batch, under their TRL keys.
struct AdvantageStats {
  double reward = 0.0;                // "reward": nanmean of the rewards
  double reward_std = 0.0;            // "reward_std": nanstd (unbiased) over the whole batch
  double frac_reward_zero_std = 0.0;  // "frac_reward_zero_std": rows whose scaling std is ~0
  int64_t num_unscorable = 0;         // NaN rewards (not a TRL key): excluded, advantage 0
};

struct Advantages {
  std::vector<double> advantages;  // [P * G] one per completion, broadcast to its tokens
  AdvantageStats stats;
};

// rewards: [P * G] f64, the weighted sum of the reward functions per completion, the G
// completions of each prompt consecutive (TRL's RepeatSampler order), over the whole
// generation batch (TRL gathers all ranks before these statistics).
//
//   mean_g = nanmean of the group's rewards;  A_i = r_i - mean_g
//   group: A_i /= nanstd(group) + 1e-4      batch: A_i /= nanstd(all) + 1e-4      none: as is
//
// nanstd is torch.std's unbiased (N - 1) estimator over the non-NaN values, NaN when fewer
// than two remain (TRL's trl.trainer.utils.nanstd); the std is 0 when G == 1 (group) or
// P * G == 1 (batch), as in TRL. frac_reward_zero_std counts the rows whose std (the group's,
// or the batch's for "batch"; for "none" the group's, which TRL computes for this metric only)
// is torch.isclose to 0, i.e. <= 1e-8 and not NaN.
//
// NaN rewards are TRL's "unscorable" rows (every reward function returned None): they are left
// out of the means and stds and their advantage is 0 (TRL's nan_to_num), so the caller passes
// them as NaN instead of removing them (removal would break the groups of G). Any other NaN
// advantage (a group with one scorable row under "group"/"batch" scaling) is also 0, as in TRL.
// Infinite rewards are rejected: the caller maps them to NaN (skipped and counted) or fails.
Advantages compute_advantages(std::span<const double> rewards, int64_t num_generations,
                              ScaleRewards scale);

// The same batch under options.estimator; the stats are GRPO's (frac_reward_zero_std from the
// group std, as TRL's RLOOTrainer logs it). NaN rewards are left out and get advantage 0 in
// every estimator.
//
//   rloo: A_i = r_i - (sum of the group's other scorable rewards) / (their count); a row whose
//     group has no other scorable reward gets 0 (TRL: nansum, scorable_counts, nan_to_num).
//     normalize_advantages: A = (A - nanmean(A)) / (nanstd(A) + 1e-4) over the whole batch.
//   reinforce_plus_plus: A_i = (r_i - m) / sqrt(v + 1e-8), m and v (unbiased) the mean and
//     variance over the batch's tokens (verl's masked_whiten of the returns; gamma = 1 and the
//     reward at the last token, so every token of a completion has the return r_i).
//   reinforce_plus_plus_baseline: r_i - nanmean(group) first, then the same token whitening.
//
// num_tokens: [P * G] tokens per completion, the whitening's weights (reinforce_plus_plus*
// only; the others take it empty). verl raises when the batch has fewer than two tokens; here
// the batch then has advantage 0.
Advantages compute_advantages(std::span<const double> rewards, int64_t num_generations,
                              const AdvantageOptions& options,
                              std::span<const int64_t> num_tokens = {});

}  // namespace fp8rl
