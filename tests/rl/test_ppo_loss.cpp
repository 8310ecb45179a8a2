// ppo_loss against TRL's experimental PPOTrainer arithmetic on a hand-made rollout: the expected
// values are tools/goldens/ppo_cases.py's output, a step-for-step transcription of TRL's code on
// padded rows (padding_mask, padding_mask_p1, INVALID_LOGPROB, the score at actual_end), which
// the ragged form here must equal. Derivatives against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "rl/ppo_loss.h"
#include "tolerances.h"

namespace fp8rl {
namespace {

using test::kF64FiniteDifference;
using test::kF64Formula;
using test::kFiniteDifferenceStep;

// ppo_cases.py's CASE: response_length 4, responses of 2, 4 and 3 tokens (value positions 3, 4
// and 4: the first and last have a position after their last token), ragged.
struct Case {
  std::vector<int64_t> lengths{2, 4, 3};
  std::vector<double> logp{-1.0, -0.5, -2.0, -0.3, -0.7, -1.1, -0.2, -0.9, -1.4};
  std::vector<double> ref{-1.2, -0.4, -1.5, -0.6, -0.7, -1.0, -0.3, -1.0, -1.1};
  std::vector<double> values{0.1, 0.4, 0.3, 0.2, -0.1, 0.5, 0.6, 0.0, 0.3, -0.2, 0.7};
  std::vector<double> scores{1.0, -0.5, 2.0};
  std::vector<int64_t> token_offsets{0, 2, 6, 9};
  std::vector<int64_t> value_offsets = ppo_value_offsets(lengths, 4);

  PpoRollout rollout() const { return {token_offsets, value_offsets, logp, ref, values, scores}; }
};

void expect_all_near(const std::vector<double>& got, const std::vector<double>& want,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], kF64Formula * std::max(1.0, std::fabs(want[i])))
        << what << "[" << i << "]";
}

TEST(PpoLoss, ValuePositionsFollowTrlsSecondMask) {
  EXPECT_EQ(Case().value_offsets, (std::vector<int64_t>{0, 3, 7, 11}));
  EXPECT_THROW(ppo_value_offsets(std::vector<int64_t>{5}, 4), Error);
}

TEST(PpoLoss, K1RolloutEqualsTrl) {
  const Case c;
  const PpoAdvantages a = ppo_advantages(c.rollout(), PpoAdvantageConfig{});
  expect_all_near(a.kl, {0.2, -0.1, -0.5, 0.3, 0.0, -0.1, 0.1, 0.1, -0.3}, "kl");
  expect_all_near(a.rewards,
                  {-0.01, 0.005, 1.0, 0.025, -0.015, 0.0, -0.495, -0.005, -0.005, 0.015, 2.0},
                  "rewards");
  expect_all_near(a.advantages,
                  {0.32388687088599244, 0.10917493906965141, -0.8250688009452073,
                   -0.6119266678846649, -1.1308583115063675, -1.2579201526099193,
                   1.0826657006748115, 0.9035680328834563, 1.4064783894322472},
                  "advantages");
  expect_all_near(
      a.returns,
      {0.9315, 0.97, 1.0, -0.367825625, -0.4082375, -0.44025, -0.495, 1.755625, 1.8375, 1.95, 2.0},
      "returns");
  EXPECT_NEAR(a.mean_kl, -0.1, kF64Formula);
  EXPECT_NEAR(a.mean_non_score_reward, 0.005, kF64Formula);
  EXPECT_NEAR(a.rlhf_reward(), 0.005 + 2.5 / 3, kF64Formula);
}

TEST(PpoLoss, K3WhitenedRewardsDiscountedEqualsTrl) {
  const Case c;
  PpoAdvantageConfig cfg;
  cfg.kl_estimator = KlEstimator::k3;
  cfg.whiten_rewards = true;
  cfg.gamma = 0.9;
  cfg.lam = 0.8;
  const PpoAdvantages a = ppo_advantages(c.rollout(), cfg);
  expect_all_near(
      a.kl,
      {0.018730753077981888, 0.005170918075647513, 0.1487212707001282, 0.040818220681717865, 0.0,
       0.005170918075647624, 0.004837418035959606, 0.004837418035959606, 0.04985880757600314},
      "kl");
  expect_all_near(
      a.rewards,
      {-0.10543241351933513, -0.10444224325761486, 1.3563812343362764, -0.11492461934875076,
       -0.10704529107825556, -0.10406465095627665, -0.8346651859038914, -0.10441789031957949,
       -0.10441789031957949, -0.107705455474775, 2.8168271196288295},
      "rewards");
  expect_all_near(a.advantages,
                  {0.29256713429241066, 0.28638455804615415, -0.7213057249545809,
                   -0.45864754676836034, -1.0987730477243547, -1.3869037745757589,
                   0.6133828490625624, 0.7189072416771757, 1.7543883109447516},
                  "advantages");
  expect_all_near(a.returns,
                  {0.633397203215108, 0.9261522454645043, 1.3563812343362764, -0.4546942552890843,
                   -0.4469022721393521, -0.5970235848070784, -0.8346651859038913,
                   0.9093402092794214, 1.3329973605541678, 2.046410070657982, 2.8168271196288295},
                  "returns");
  EXPECT_NEAR(a.mean_kl, 0.09271524141968181, kF64Formula);
}

// Negative control: the score at the last token (n - 1) instead of TRL's position after it
// changes every advantage of the response.
TEST(PpoLoss, ScoreAtTheLastTokenIsNotTrls) {
  Case c;
  c.value_offsets = {0, 2, 6, 9};  // one value position per token
  c.values = {0.1, 0.4, 0.2, -0.1, 0.5, 0.6, 0.0, 0.3, -0.2};
  const PpoAdvantages a = ppo_advantages(c.rollout(), PpoAdvantageConfig{});
  EXPECT_GT(std::fabs(a.advantages[0] - 0.32388687088599244), 1e-3);
}

TEST(PpoLoss, WhiteningNeedsTwoValues) {
  EXPECT_THROW(masked_whiten(std::vector<double>{1.0}, {}, true), Error);
  const std::vector<double> w =
      masked_whiten(std::vector<double>{1.0, 2.0, 100.0}, std::vector<uint8_t>{1, 1, 0}, true);
  // mean 1.5, unbiased variance 0.5
  EXPECT_NEAR(w[0], -0.5 / std::sqrt(0.5 + 1e-8), kF64Formula);
  EXPECT_NEAR(w[2], 98.5 / std::sqrt(0.5 + 1e-8), kF64Formula);
}

template <class Loss>
void expect_derivative_matches(std::vector<double> x, Loss loss, const std::vector<double>& grad) {
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + kFiniteDifferenceStep;
    const double up = loss(x);
    x[i] = keep - kFiniteDifferenceStep;
    const double down = loss(x);
    x[i] = keep;
    EXPECT_NEAR(grad[i], (up - down) / (2 * kFiniteDifferenceStep), kF64FiniteDifference)
        << "entry " << i;
  }
}

TEST(PpoLoss, PolicyLossEqualsTrlAndItsDerivative) {
  const std::vector<double> logp{-1.0, -0.5, -2.0, -0.3}, old{-1.3, -0.5, -1.9, -0.6},
      adv{0.8, -0.4, -1.2, 0.5};
  const PpoPolicyLoss l = ppo_policy_loss(logp, old, adv, 0.2);
  EXPECT_NEAR(l.loss, -0.018548774589212114, kF64Formula);
  EXPECT_NEAR(l.clipfrac, 0.5, kF64Formula);
  EXPECT_NEAR(l.approxkl, 0.02375, kF64Formula);
  expect_derivative_matches(
      logp, [&](const std::vector<double>& x) { return ppo_policy_loss(x, old, adv, 0.2).loss; },
      l.dloss_dlogp);
  // Token 0 (ratio e^0.3, A > 0) is past the clip: no gradient; token 1 inside: -A ratio / n.
  EXPECT_EQ(l.dloss_dlogp[0], 0.0);
  EXPECT_NEAR(l.dloss_dlogp[1], 0.4 / 4, kF64Formula);
}

TEST(PpoLoss, ValueLossEqualsTrlAndItsDerivative) {
  const std::vector<double> v{0.1, 0.9, -0.4, 0.4}, old{0.2, 0.5, -0.1, 0.0},
      ret{0.6, 0.0, 0.2, 0.5};
  const PpoValueLoss l = ppo_value_loss(v, old, ret, 0.2);
  EXPECT_NEAR(l.loss, 0.18875, kF64Formula);
  EXPECT_NEAR(l.clipfrac, 0.25, kF64Formula);
  expect_derivative_matches(
      v, [&](const std::vector<double>& x) { return ppo_value_loss(x, old, ret, 0.2).loss; },
      l.dloss_dvalue);
}

TEST(PpoLoss, KlEstimatorNames) {
  EXPECT_EQ(parse_kl_estimator("k3"), KlEstimator::k3);
  EXPECT_EQ(kl_estimator_name(KlEstimator::k1), "k1");
  EXPECT_THROW(parse_kl_estimator("k2"), Error);
}

}  // namespace
}  // namespace fp8rl
