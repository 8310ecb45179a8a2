// Online DPO's step (rl/online_dpo.h) against TRL's OnlineDPOTrainer.training_step on a
// hand-computed micro-batch: the missing-EOS penalty, the chosen/rejected choice, the sigmoid and
// IPO losses on summed log-probabilities and TRL's metrics; the derivative against central
// finite differences; the negative controls show the case tells those parts apart.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "core/check.h"
#include "rl/logistic.h"
#include "rl/online_dpo.h"
#include "tolerances.h"

namespace fp8rl {
namespace {

using test::kF64FiniteDifference;
using test::kF64Formula;
using test::kFiniteDifferenceStep;

using test::expect_near;
using test::nls;
using test::sig;

// Two prompts, completions 0, 1 (prompt 0) and 2, 3 (prompt 1). Per completion the summed
// policy log-probability S, the reference's R and K = S - R:
//   c0: logp -1, -2 (S -3), ref -1.5, -2.5 (R -4): K 1
//   c1: logp -0.5 (S -0.5), ref -0.25: K -0.25
//   c2: logp -2, -1, -1 (S -4), ref -2, -1.5, -0.5 (R -4): K 0
//   c3: logp -0.75, ref -1.25: K 0.5
// Rewards 0.2, 0.6, 1, 1; c1 has no EOS: missing_eos_penalty 0.5 makes it 0.1, so prompt 0's
// chosen is c0 (without the penalty it would be c1); prompt 1 ties, TRL's first >= second picks
// c2. Δ = K_chosen - K_rejected: pair 0: 1 - (-0.25) = 1.25; pair 1: 0 - 0.5 = -0.5.
struct Case {
  std::vector<int64_t> offsets{0, 2, 3, 6, 7};
  std::vector<double> logp{-1, -2, -0.5, -2, -1, -1, -0.75};
  std::vector<double> ref{-1.5, -2.5, -0.25, -2, -1.5, -0.5, -1.25};
  std::vector<double> raw{0.2, 0.6, 1.0, 1.0};
  std::vector<uint8_t> eos{1, 0, 1, 1};
  std::vector<double> rewards = apply_missing_eos_penalty(raw, eos, 0.5);
  OnlineDpoBatch batch() const { return {offsets, logp, ref, rewards, eos}; }
};

TEST(OnlineDpo, MissingEosPenaltyAndBetaPerEpoch) {
  const Case k;
  EXPECT_EQ(k.rewards, (std::vector<double>{0.2, 0.6 - 0.5, 1.0, 1.0}));
  EXPECT_EQ(apply_missing_eos_penalty(k.raw, k.eos, std::nullopt), k.raw);
  OnlineDpoOptions o;
  o.beta = {0.1, 0.05};
  EXPECT_EQ(o.beta_at(0.0), 0.1);
  EXPECT_EQ(o.beta_at(0.99), 0.1);
  EXPECT_EQ(o.beta_at(1.0), 0.05);
  EXPECT_EQ(o.beta_at(7.5), 0.05);  // the last for later epochs
  EXPECT_THROW(apply_missing_eos_penalty(k.raw, std::vector<uint8_t>{1}, 0.5), Error);
}

TEST(OnlineDpo, SigmoidLossChoiceAndTrlMetrics) {
  const Case k;
  const double beta = 0.1;
  const OnlineDpoLossResult r = online_dpo_loss(k.batch(), DpoLossType::sigmoid, beta, 2);
  EXPECT_EQ(r.chosen, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(r.rejected, (std::vector<size_t>{1, 3}));
  // TRL: losses = -logsigmoid(β logits), mean over pairs; the accelerator divides by the 2
  // accumulation steps.
  expect_near(r.loss, (nls(beta * 1.25) + nls(beta * -0.5)) / 2 / 2, "loss");
  // d/dS_chosen = -β σ(-βΔ) / pairs / accumulation, the same in each of its tokens.
  const double g0 = -beta * sig(-beta * 1.25) / 4, g1 = -beta * sig(beta * 0.5) / 4;
  const std::vector<double> want{g0, g0, -g0, g1, g1, g1, -g1};
  for (size_t t = 0; t < want.size(); ++t) expect_near(r.dloss_dlogp[t], want[t], "dloss_dlogp");
  // TRL's metrics (means over the 4 completions, or over the 2 pairs).
  std::map<std::string, double> m;
  for (const auto& [name, v] : r.stats.named()) m[name] = v;
  expect_near(m.at("objective/kl"), (1 - 0.25 + 0 + 0.5) / 4, "kl");
  expect_near(m.at("objective/entropy"), (3 + 0.5 + 4 + 0.75) / 4, "entropy");
  expect_near(m.at("objective/non_score_reward"), -beta * 0.3125, "non_score_reward");
  expect_near(m.at("objective/scores"), (0.2 + 0.1 + 1 + 1) / 4, "scores");
  expect_near(m.at("objective/rlhf_reward"), 0.575 - beta * 0.3125, "rlhf_reward");
  expect_near(m.at("objective/scores_margin"), ((0.2 - 0.1) + 0.0) / 2, "scores_margin");
  expect_near(m.at("rewards/chosen"), beta * (1 + 0) / 2, "rewards/chosen");
  expect_near(m.at("rewards/rejected"), beta * (-0.25 + 0.5) / 2, "rewards/rejected");
  expect_near(m.at("rewards/accuracies"), 0.5, "rewards/accuracies");  // 0.1 > -0.025; 0 < 0.05
  expect_near(m.at("rewards/margins"), beta * (1.25 - 0.5) / 2, "rewards/margins");
  expect_near(m.at("logps/chosen"), (-3 + -4) / 2.0, "logps/chosen");
  expect_near(m.at("logps/rejected"), (-0.5 + -0.75) / 2, "logps/rejected");
  expect_near(m.at("val/contain_eos_token"), 0.75, "val/contain_eos_token");
  expect_near(m.at("beta"), beta, "beta");
  EXPECT_EQ(m.size(), 14u);
}

TEST(OnlineDpo, IpoOnSummedLogprobs) {
  const Case k;
  const double beta = 0.1;  // 1 / (2β) = 5
  const OnlineDpoLossResult r = online_dpo_loss(k.batch(), DpoLossType::ipo, beta);
  const double want = (std::pow(1.25 - 5, 2) + std::pow(-0.5 - 5, 2)) / 2;
  expect_near(r.loss, want, "ipo loss");
  expect_near(r.dloss_dlogp[0], 2 * (1.25 - 5) / 2, "ipo d chosen");
  expect_near(r.dloss_dlogp[6], -2 * (-0.5 - 5) / 2, "ipo d rejected");
  // Negative control: offline DPO's IPO (dpo_loss with the completion lengths) normalises by
  // them and gives another loss on this case.
  const std::vector<double> pc{-3, -4}, pr{-0.5, -0.75}, rc{-4, -4}, rr{-0.25, -1.25};
  const std::vector<int64_t> lc{2, 3}, lr{1, 1};
  DpoLossConfig dc;
  dc.loss_type = DpoLossType::ipo;
  dc.beta = beta;
  EXPECT_GT(std::fabs(dpo_loss({pc, pr, rc, rr, lc, lr}, dc).loss - want), 0.1);
}

TEST(OnlineDpo, NegativeControlsChangeTheLoss) {
  const Case k;
  const double want = (nls(0.1 * 1.25) + nls(0.1 * -0.5)) / 2;
  // Without the missing-EOS penalty prompt 0's pair flips (c1 0.6 > c0 0.2): Δ0 = -1.25.
  Case unpenalized;
  unpenalized.rewards = unpenalized.raw;
  const OnlineDpoLossResult u = online_dpo_loss(unpenalized.batch(), DpoLossType::sigmoid, 0.1);
  EXPECT_EQ(u.chosen[0], 1u);
  expect_near(u.loss, (nls(0.1 * -1.25) + nls(0.1 * -0.5)) / 2, "unpenalized loss");
  EXPECT_GT(std::fabs(u.loss - want), 1e-3);
  // Without the reference (ref = 0) the loss is another number.
  Case no_ref;
  no_ref.ref.assign(no_ref.ref.size(), 0.0);
  EXPECT_GT(std::fabs(online_dpo_loss(no_ref.batch(), DpoLossType::sigmoid, 0.1).loss - want),
            1e-3);
}

TEST(OnlineDpo, DerivativeMatchesFiniteDifferences) {
  for (DpoLossType type : {DpoLossType::sigmoid, DpoLossType::ipo}) {
    Case k;
    const OnlineDpoLossResult r = online_dpo_loss(k.batch(), type, 0.3, 3);
    for (size_t t = 0; t < k.logp.size(); ++t) {
      Case hi = k, lo = k;
      hi.logp[t] += kFiniteDifferenceStep;
      lo.logp[t] -= kFiniteDifferenceStep;
      const double fd = (online_dpo_loss(hi.batch(), type, 0.3, 3).loss -
                         online_dpo_loss(lo.batch(), type, 0.3, 3).loss) /
                        (2 * kFiniteDifferenceStep);
      EXPECT_NEAR(r.dloss_dlogp[t], fd, kF64FiniteDifference) << dpo_loss_type_name(type) << t;
    }
  }
}

TEST(OnlineDpo, UnscoredPairsLeaveTheLossAndBadInputIsAnError) {
  Case k;
  k.rewards[3] = std::numeric_limits<double>::quiet_NaN();  // prompt 1's pair left out
  const OnlineDpoLossResult r = online_dpo_loss(k.batch(), DpoLossType::sigmoid, 0.1);
  EXPECT_EQ(r.chosen, (std::vector<size_t>{0}));
  expect_near(r.loss, nls(0.1 * 1.25), "one pair's loss");
  for (size_t t = 3; t < 7; ++t) EXPECT_EQ(r.dloss_dlogp[t], 0.0);
  k.rewards.assign(4, std::numeric_limits<double>::quiet_NaN());
  const OnlineDpoLossResult none = online_dpo_loss(k.batch(), DpoLossType::sigmoid, 0.1);
  EXPECT_EQ(none.loss, 0.0);
  EXPECT_TRUE(std::isnan(none.stats.dpo.rewards_chosen));
  const Case ok;
  EXPECT_THROW(online_dpo_loss(ok.batch(), DpoLossType::hinge, 0.1), Error);
  EXPECT_THROW(online_dpo_loss(ok.batch(), DpoLossType::sigmoid, 0.1, 0), Error);
  Case odd = ok;
  odd.rewards.pop_back();
  odd.eos.pop_back();
  odd.offsets.pop_back();
  EXPECT_THROW(online_dpo_loss(odd.batch(), DpoLossType::sigmoid, 0.1), Error);
}

}  // namespace
}  // namespace fp8rl
