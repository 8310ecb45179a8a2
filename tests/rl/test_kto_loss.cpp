// kto_loss and kto_kl_estimate against TRL's KTOTrainer formulas on hand-computed examples, the
// derivatives against central finite differences of the returned loss, and the KL sequences'
// pairing (kto_kl_partner) against TRL's rotation of each batch's completions.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "rl/kto_loss.h"
#include "rl/kto_trainer.h"
#include "tolerances.h"

namespace fp8rl {
namespace {

using test::kF64FiniteDifference;
using test::kF64Formula;
using test::kFiniteDifferenceStep;

double sig(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

void expect_near(double got, double want, const char* what) {
  EXPECT_NEAR(got, want, kF64Formula * std::max(1.0, std::fabs(want))) << what;
}

// Example 0: desirable, h = -10 - (-12) = 2; example 1: undesirable, h = -11 - (-10) = -1;
// example 2: desirable, h = -20 - (-20.5) = 0.5.
struct Batch {
  std::vector<double> policy{-10, -11, -20}, ref{-12, -10, -20.5};
  std::vector<uint8_t> desirable{1, 0, 1};
  KtoExamples view() const { return {policy, ref, desirable}; }
};

KtoLossConfig weighted() {
  KtoLossConfig c;  // kto, beta 0.1
  c.desirable_weight = 1.5;
  c.undesirable_weight = 0.75;
  return c;
}

TEST(KtoLoss, KtoLossAndMetricsMatchTrlsFormula) {
  const Batch b;
  const double kl = 0.5;
  const KtoLossResult r = kto_loss(b.view(), kl, weighted());
  // TRL: desirable 1 - σ(β (h - kl)), undesirable 1 - σ(β (kl - h)), weighted, nanmean:
  // 0: 1 - σ(0.1 * 1.5) = 0.462570, x 1.5; 1: 1 - σ(0.1 * 1.5), x 0.75; 2: 1 - σ(0) = 0.5, x 1.5.
  const double want = (1.5 * (1 - sig(0.15)) + 0.75 * (1 - sig(0.15)) + 1.5 * 0.5) / 3;
  expect_near(r.loss, want, "loss");
  EXPECT_NEAR(r.loss, 0.596927, 1e-6);
  // d/dh of 1 - σ(β s (h - kl)) is -β s σ (1 - σ), s = +1 desirable, -1 undesirable; / 3 rows.
  expect_near(r.dloss_dlogp[0], 1.5 * -0.1 * sig(0.15) * (1 - sig(0.15)) / 3, "d0");
  expect_near(r.dloss_dlogp[1], 0.75 * 0.1 * sig(0.15) * (1 - sig(0.15)) / 3, "d1");
  expect_near(r.dloss_dlogp[2], 1.5 * -0.1 * 0.25 / 3, "d2");
  // Metrics: rewards β h summed per label (0.2 + 0.05, -0.1), policy logps (-30, -11).
  EXPECT_EQ(r.stats.num_chosen, 2);
  EXPECT_EQ(r.stats.num_rejected, 1);
  expect_near(r.stats.rewards_chosen, 0.25, "rewards_chosen");
  expect_near(r.stats.rewards_rejected, -0.1, "rewards_rejected");
  expect_near(r.stats.logps_chosen, -30, "logps_chosen");
  expect_near(r.stats.logps_rejected, -11, "logps_rejected");

  // Controls: the weights swapped, or the KL left out, give other losses.
  KtoLossConfig swapped = weighted();
  std::swap(swapped.desirable_weight, swapped.undesirable_weight);
  EXPECT_GT(std::fabs(kto_loss(b.view(), kl, swapped).loss - want), 0.1);
  EXPECT_GT(std::fabs(kto_loss(b.view(), 0.0, weighted()).loss - want), 1e-3);
}

TEST(KtoLoss, ApoZeroUnpairedIgnoresTheKl) {
  const Batch b;
  KtoLossConfig c = weighted();
  c.loss_type = KtoLossType::apo_zero_unpaired;
  const KtoLossResult r = kto_loss(b.view(), 0.5, c);
  // desirable 1 - σ(β h), undesirable σ(β h): 1 - σ(0.2), σ(-0.1), 1 - σ(0.05).
  const double want = (1.5 * (1 - sig(0.2)) + 0.75 * sig(-0.1) + 1.5 * (1 - sig(0.05))) / 3;
  expect_near(r.loss, want, "loss");
  expect_near(r.dloss_dlogp[1], 0.75 * 0.1 * sig(-0.1) * (1 - sig(-0.1)) / 3, "d1");
  expect_near(kto_loss(b.view(), 0.0, c).loss, want, "loss without kl");
  EXPECT_FALSE(kto_loss_uses_kl(KtoLossType::apo_zero_unpaired));
  EXPECT_TRUE(kto_loss_uses_kl(KtoLossType::kto));
}

TEST(KtoLoss, GradientMatchesFiniteDifferences) {
  const double h = kFiniteDifferenceStep;
  for (KtoLossType type : {KtoLossType::kto, KtoLossType::apo_zero_unpaired}) {
    KtoLossConfig c = weighted();
    c.loss_type = type;
    c.beta = 0.7;
    const Batch b;
    const KtoLossResult r = kto_loss(b.view(), 0.3, c);
    for (size_t i = 0; i < b.policy.size(); ++i) {
      Batch up = b, down = b;
      up.policy[i] += h;
      down.policy[i] -= h;
      const double fd =
          (kto_loss(up.view(), 0.3, c).loss - kto_loss(down.view(), 0.3, c).loss) / (2 * h);
      EXPECT_NEAR(r.dloss_dlogp[i], fd, kF64FiniteDifference * std::max(1.0, std::fabs(fd)))
          << kto_loss_type_name(type) << " example " << i;
    }
  }
}

// torch.nanmean: a NaN example leaves the loss the mean of the others; its derivative stays NaN
// so that the optimizer's non-finite guard skips the step.
TEST(KtoLoss, NanExamplesLeaveTheMeanOfTheOthers) {
  Batch b;
  b.policy[1] = std::nan("");
  const KtoLossResult r = kto_loss(b.view(), 0.5, weighted());
  expect_near(r.loss, (1.5 * (1 - sig(0.15)) + 1.5 * 0.5) / 2, "loss");
  EXPECT_TRUE(std::isnan(r.dloss_dlogp[1]));
  EXPECT_EQ(r.stats.rewards_rejected, 0.0);  // nansum
}

// One label only (TRL computes the other side's losses as empty tensors).
TEST(KtoLoss, OneLabelOnlyIsTheMeanOfThatSide) {
  Batch b;
  b.desirable = {1, 1, 1};
  const KtoLossResult r = kto_loss(b.view(), 0.0, weighted());
  expect_near(r.loss, 1.5 * ((1 - sig(0.2)) + (1 - sig(-0.1)) + (1 - sig(0.05))) / 3, "loss");
  EXPECT_EQ(r.stats.num_rejected, 0);
}

// TRL: kl = clamp(mean(KL_logps - ref_KL_logps), min=0).
TEST(KtoLoss, KlEstimateIsTheClampedMeanLogRatio) {
  expect_near(kto_kl_estimate(std::vector<double>{-5, -7}, std::vector<double>{-6, -6.5}), 0.25,
              "mean");
  EXPECT_EQ(kto_kl_estimate(std::vector<double>{-7, -3}, std::vector<double>{-6, -3}), 0.0);
  EXPECT_THROW(kto_kl_estimate(std::vector<double>{-7}, std::vector<double>{}), Error);
}

// TRL's add_kl_completion_ids, per block of batch_size rows: [y_n, y_1, ..., y_{n-1}]. Five
// rows in blocks of 2: (0, 1) -> 1, 0; (2, 3) -> 3, 2; (4) -> 4 (a lone row pairs with itself).
TEST(KtoLoss, KlPartnersRotateEachBatchByOne) {
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 5; ++i) got.push_back(kto_kl_partner(i, 5, 2));
  EXPECT_EQ(got, (std::vector<int64_t>{1, 0, 3, 2, 4}));
  got.clear();
  for (int64_t i = 0; i < 4; ++i) got.push_back(kto_kl_partner(i, 4, 4));
  EXPECT_EQ(got, (std::vector<int64_t>{3, 0, 1, 2}));
}

}  // namespace
}  // namespace fp8rl
