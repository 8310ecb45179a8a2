// compute_advantages against TRL's GRPOTrainer formulas on
// hand-computed cases: each scale_rewards mode, the unbiased std with its +1e-4, TRL's NaN
// ("unscorable") handling and frac_reward_zero_std; RLOO against TRL's RLOOTrainer and
// REINFORCE++ (-baseline) against verl's compute_reinforce_plus_plus*_outcome_advantage.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/nan.h"
#include "rl/advantages.h"
#include "tolerances.h"

namespace fp8rl {
namespace {

using test::kF64Formula;

void expect_values(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], kF64Formula * std::max(1.0, std::fabs(want[i]))) << "row " << i;
  }
}

// Two prompts, G = 3: rewards {1, 2, 3} and {0, 0, 0}.
const std::vector<double> kRewards = {1, 2, 3, 0, 0, 0};

TEST(Advantages, GroupScalingUsesUnbiasedGroupStdPlus1e4) {
  // Group 0: mean 2, deviations -1, 0, 1; unbiased variance (1 + 0 + 1) / (3 - 1) = 1, std 1:
  // A = -1 / 1.0001, 0, 1 / 1.0001. Group 1: mean 0, std 0: A = 0 / 1e-4 = 0.
  const Advantages a = compute_advantages(kRewards, 3, ScaleRewards::group);
  expect_values(a.advantages, {-1 / 1.0001, 0, 1 / 1.0001, 0, 0, 0});
  // Negative control: the biased (N) std, sqrt(2/3), would give -1 / (0.8165 + 1e-4).
  EXPECT_GT(std::fabs(a.advantages[0] - (-1 / (std::sqrt(2.0 / 3.0) + 1e-4))), 0.1);
  // Group 1's three rows have std 0: 3 of 6.
  EXPECT_NEAR(a.stats.frac_reward_zero_std, 0.5, kF64Formula);
  // reward = 6 / 6 = 1; reward_std over the batch: deviations 0, 1, 2, -1, -1, -1, squares
  // sum 8, unbiased variance 8 / 5 = 1.6.
  EXPECT_NEAR(a.stats.reward, 1.0, kF64Formula);
  EXPECT_NEAR(a.stats.reward_std, std::sqrt(1.6), kF64Formula);
  EXPECT_EQ(a.stats.num_unscorable, 0);
}

TEST(Advantages, BatchScalingKeepsGroupMeanAndUsesBatchStd) {
  // Means per group (2 and 0) as before; std over all six rows sqrt(1.6) = 1.2649:
  // A = (-1, 0, 1, 0, 0, 0) / (sqrt(1.6) + 1e-4).
  const Advantages a = compute_advantages(kRewards, 3, ScaleRewards::batch);
  const double s = std::sqrt(1.6) + 1e-4;
  expect_values(a.advantages, {-1 / s, 0, 1 / s, 0, 0, 0});
  // The batch std is not ~0, so no row counts as zero-std (TRL tests the batch's std here).
  EXPECT_EQ(a.stats.frac_reward_zero_std, 0.0);
  // Negative control: group scaling differs on the same rewards.
  const Advantages g = compute_advantages(kRewards, 3, ScaleRewards::group);
  EXPECT_GT(std::fabs(a.advantages[0] - g.advantages[0]), 0.1);
}

TEST(Advantages, NoScalingOnlySubtractsTheGroupMean) {
  // Dr. GRPO: A = r - mean_g = (-1, 0, 1, 0, 0, 0); the zero-std metric still uses the group
  // std (TRL computes it for logging): 0.5.
  const Advantages a = compute_advantages(kRewards, 3, ScaleRewards::none);
  expect_values(a.advantages, {-1, 0, 1, 0, 0, 0});
  EXPECT_NEAR(a.stats.frac_reward_zero_std, 0.5, kF64Formula);
  // A second case where the std is not 1, so that dividing would show: {0, 4}: A = -2, 2.
  expect_values(compute_advantages(std::vector<double>{0, 4}, 2, ScaleRewards::none).advantages,
                {-2, 2});
}

TEST(Advantages, NanRewardsAreLeftOutAndGetZeroAdvantage) {
  // G = 4: {1, NaN, 3, 5}: nanmean (1 + 3 + 5) / 3 = 3, deviations -2, 0, 2; nanstd:
  // nanmean of squares (4 + 0 + 4) / 3 = 8/3, times 3 / (3 - 1): 4, std 2.
  // A = -2 / 2.0001, 0 (NaN), 0, 2 / 2.0001.
  const std::vector<double> rewards = {1, kNaN, 3, 5};
  const Advantages a = compute_advantages(rewards, 4, ScaleRewards::group);
  expect_values(a.advantages, {-2 / 2.0001, 0, 0, 2 / 2.0001});
  EXPECT_EQ(a.stats.num_unscorable, 1);
  EXPECT_NEAR(a.stats.reward, 3.0, kF64Formula);
  EXPECT_NEAR(a.stats.reward_std, 2.0, kF64Formula);
}

TEST(Advantages, GroupWithOneScorableRowGetsZero) {
  // {NaN, 4}: mean 4, nanstd of one value is NaN, so A = 0 / NaN -> NaN -> 0 and the std is not
  // "close to 0"; without scaling A = 4 - 4 = 0 as well. {2, 6}: mean 4, std sqrt(8) = 2.828.
  const std::vector<double> rewards = {kNaN, 4, 2, 6};
  const Advantages a = compute_advantages(rewards, 2, ScaleRewards::group);
  const double s = std::sqrt(8.0) + 1e-4;
  expect_values(a.advantages, {0, 0, -2 / s, 2 / s});
  EXPECT_EQ(a.stats.frac_reward_zero_std, 0.0);
  expect_values(compute_advantages(rewards, 2, ScaleRewards::none).advantages, {0, 0, -2, 2});
}

TEST(Advantages, SingleGenerationHasZeroStd) {
  // G = 1 (TRL's eval case): std is 0 by definition, A = (r - r) / 1e-4 = 0, all rows zero-std.
  const Advantages a = compute_advantages(std::vector<double>{3, 7}, 1, ScaleRewards::group);
  expect_values(a.advantages, {0, 0});
  EXPECT_EQ(a.stats.frac_reward_zero_std, 1.0);
}

TEST(Advantages, RejectsBadInput) {
  EXPECT_THROW(compute_advantages(std::vector<double>{1, 2, 3}, 2, ScaleRewards::group), Error);
  EXPECT_THROW(compute_advantages(std::vector<double>{1, 2}, 0, ScaleRewards::group), Error);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_THROW(compute_advantages(std::vector<double>{1, inf}, 2, ScaleRewards::group), Error);
}

TEST(Advantages, ParsesTrlNamesAndBoolAliases) {
  EXPECT_EQ(parse_scale_rewards("group"), ScaleRewards::group);
  EXPECT_EQ(parse_scale_rewards("true"), ScaleRewards::group);
  EXPECT_EQ(parse_scale_rewards("batch"), ScaleRewards::batch);
  EXPECT_EQ(parse_scale_rewards("none"), ScaleRewards::none);
  EXPECT_EQ(parse_scale_rewards("false"), ScaleRewards::none);
  EXPECT_THROW(parse_scale_rewards("std"), Error);
  for (ScaleRewards s : {ScaleRewards::group, ScaleRewards::batch, ScaleRewards::none}) {
    EXPECT_EQ(parse_scale_rewards(scale_rewards_name(s)), s);
  }
}

AdvantageOptions estimator(AdvantageEstimator e, bool normalize = false) {
  AdvantageOptions o;
  o.estimator = e;
  o.normalize_advantages = normalize;
  return o;
}

TEST(Advantages, RlooSubtractsTheLeaveOneOutMean) {
  // TRL: baselines = (grouped_sum - grouped_rewards) / (G - 1). Group 0: sum 6, baselines
  // 5/2, 4/2, 3/2: A = 1 - 2.5, 2 - 2, 3 - 1.5. Group 1: all 0.
  const Advantages a = compute_advantages(kRewards, 3, estimator(AdvantageEstimator::rloo));
  expect_values(a.advantages, {-1.5, 0, 1.5, 0, 0, 0});
  // Negative control: GRPO's group-mean baseline (scale_rewards none) gives -1, 0, 1, smaller
  // by G / (G - 1).
  const Advantages grpo = compute_advantages(kRewards, 3, ScaleRewards::none);
  EXPECT_NEAR(grpo.advantages[0], -1.0, kF64Formula);
  EXPECT_GT(std::fabs(a.advantages[0] - grpo.advantages[0]), 0.4);
  // The logged stats are GRPO's: half the rows in a zero-std group.
  EXPECT_NEAR(a.stats.frac_reward_zero_std, 0.5, kF64Formula);
}

TEST(Advantages, RlooNormalizeAdvantagesWhitensTheBatch) {
  // normalize_advantages: (A - mean(A)) / (std(A) + 1e-4) over the batch. A = {-1.5, 0, 1.5,
  // 0, 0, 0}: mean 0, unbiased variance (2.25 + 2.25) / 5 = 0.9.
  const Advantages a = compute_advantages(kRewards, 3, estimator(AdvantageEstimator::rloo, true));
  const double s = std::sqrt(0.9) + 1e-4;
  expect_values(a.advantages, {-1.5 / s, 0, 1.5 / s, 0, 0, 0});
  // Negative control: GRPO's group scaling divides by the group's std (1): -1 / 1.0001.
  EXPECT_GT(std::fabs(a.advantages[0] - (-1 / 1.0001)), 0.5);
}

TEST(Advantages, RlooLeavesNanRowsOutOfTheBaseline) {
  // TRL: nansum and scorable_counts. Group 0 {1, NaN, 3}: two scorable, sum 4: A_0 = 1 - 3,
  // A_2 = 3 - 1, the NaN row 0. Group 1 {5, NaN, NaN}: one scorable, (5 - 5) / 0 is NaN: 0.
  const std::vector<double> r = {1, kNaN, 3, 5, kNaN, kNaN};
  const Advantages a = compute_advantages(r, 3, estimator(AdvantageEstimator::rloo));
  expect_values(a.advantages, {-2, 0, 2, 0, 0, 0});
  EXPECT_EQ(a.stats.num_unscorable, 3);
  // Negative control: counting the NaN row in the baseline's divisor, (4 - 1) / 2, gives -0.5.
  EXPECT_GT(std::fabs(a.advantages[0] - (1 - 1.5)), 1.0);
}

// Token counts of kRewards' completions: 8 tokens in all.
const std::vector<int64_t> kTokens = {2, 1, 1, 1, 1, 2};

TEST(Advantages, ReinforcePlusPlusWhitensOverTheBatchTokens) {
  // verl: masked_whiten(returns, response_mask), every token of a completion has return r_i.
  // Token mean (2*1 + 2 + 3) / 8 = 0.875; squared deviations 2*0.125^2 + 1.125^2 + 2.125^2 +
  // (1 + 1 + 2) * 0.875^2 = 8.875; unbiased variance 8.875 / 8 * 8 / 7 = 8.875 / 7.
  const Advantages a =
      compute_advantages(kRewards, 3, estimator(AdvantageEstimator::reinforce_plus_plus), kTokens);
  const double s = std::sqrt(8.875 / 7 + 1e-8);
  expect_values(a.advantages,
                {0.125 / s, 1.125 / s, 2.125 / s, -0.875 / s, -0.875 / s, -0.875 / s});
  // Negative control: whitening over completions (mean 1, variance 10 / 5 = 2) instead of
  // tokens gives row 0 the advantage 0.
  EXPECT_GT(std::fabs(a.advantages[0]), 0.1);
  // And GRPO's group scaling gives the all-zero group 0, not the batch-relative -0.875 / s.
  EXPECT_EQ(compute_advantages(kRewards, 3, ScaleRewards::group).advantages[3], 0.0);
}

TEST(Advantages, ReinforcePlusPlusBaselineSubtractsTheGroupMeanThenWhitens) {
  // verl: scores - group mean = {-1, 0, 1, 0, 0, 0}, then the token whitening. Token mean
  // (-2 + 0 + 1) / 8 = -0.125; squared deviations 2*0.875^2 + 0.125^2 + 1.125^2 + 4*0.125^2 =
  // 2.875; unbiased variance 2.875 / 7.
  const Advantages a = compute_advantages(
      kRewards, 3, estimator(AdvantageEstimator::reinforce_plus_plus_baseline), kTokens);
  const double s = std::sqrt(2.875 / 7 + 1e-8);
  expect_values(a.advantages, {-0.875 / s, 0.125 / s, 1.125 / s, 0.125 / s, 0.125 / s, 0.125 / s});
  // Negative control: GRPO (group scaling) gives -1 / 1.0001 and 0 to the zero-std group.
  const Advantages grpo = compute_advantages(kRewards, 3, ScaleRewards::group);
  EXPECT_GT(std::fabs(a.advantages[0] - grpo.advantages[0]), 0.1);
  EXPECT_GT(std::fabs(a.advantages[3] - grpo.advantages[3]), 0.1);
}

TEST(Advantages, ReinforcePlusPlusNanRowsAndTooFewTokens) {
  // A NaN row is out of the whitening: {1, NaN, 3} with tokens {1, 5, 1}: mean 2, unbiased
  // variance 2 / 2 * 2 / 1 = 2.
  const std::vector<double> r = {1, kNaN, 3};
  const Advantages a = compute_advantages(r, 3, estimator(AdvantageEstimator::reinforce_plus_plus),
                                          std::vector<int64_t>{1, 5, 1});
  const double s = std::sqrt(2 + 1e-8);
  expect_values(a.advantages, {-1 / s, 0, 1 / s});
  // One token in all: verl's masked_var raises; here the batch has advantage 0.
  const Advantages one = compute_advantages(
      r, 3, estimator(AdvantageEstimator::reinforce_plus_plus), std::vector<int64_t>{1, 0, 0});
  expect_values(one.advantages, {0, 0, 0});
  // The token counts are required.
  EXPECT_THROW(compute_advantages(r, 3, estimator(AdvantageEstimator::reinforce_plus_plus)), Error);
}

}  // namespace
}  // namespace fp8rl
