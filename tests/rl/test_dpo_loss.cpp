// dpo_loss against TRL's DPOTrainer formulas on hand-computed pairs,
// and its derivatives against central finite differences of the returned loss.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "rl/dpo_loss.h"
#include "rl/logistic.h"
#include "tolerances.h"

namespace fp8rl {
namespace {

using test::kF64FiniteDifference;
using test::kF64Formula;
using test::kFiniteDifferenceStep;

struct Pairs {
  std::vector<double> policy_chosen, policy_rejected, ref_chosen, ref_rejected;
  std::vector<int64_t> chosen_length, rejected_length;

  DpoPairs view() const {
    return {policy_chosen, policy_rejected, ref_chosen,
            ref_rejected,  chosen_length,   rejected_length};
  }
};

// Pair 0: h_c = -10 - (-12) = 2, h_r = -11 - (-10) = -1, Δ = 3 (lengths 4 and 2).
// Pair 1: h_c = -20 - (-20.5) = 0.5, h_r = -7 - (-8) = 1, Δ = -0.5 (lengths 5 and 10).
Pairs two_pairs() {
  return {{-10, -20}, {-11, -7}, {-12, -20.5}, {-10, -8}, {4, 5}, {2, 10}};
}

using test::expect_near;
using test::nls;
using test::sig;

TEST(DpoLoss, SigmoidAndTheRewardMetrics) {
  const DpoLossResult r = dpo_loss(two_pairs().view(), {});  // sigmoid, beta 0.1
  // βΔ = 0.3 and -0.05: loss = (log(1 + e^-0.3) + log(1 + e^0.05)) / 2 = (0.554355 + 0.718406)/2.
  expect_near(r.loss, (nls(0.3) + nls(-0.05)) / 2, "loss");
  // d/dh_c -log σ(βΔ) = -β σ(-βΔ) = -0.1 * 0.425557 (pair 0), -0.1 * 0.512497 (pair 1); / 2
  // pairs; d/dh_r is the negative.
  expect_near(r.dloss_dchosen_logp[0], -0.1 * sig(-0.3) / 2, "dchosen 0");
  expect_near(r.dloss_dchosen_logp[1], -0.1 * sig(0.05) / 2, "dchosen 1");
  expect_near(r.dloss_drejected_logp[0], 0.1 * sig(-0.3) / 2, "drejected 0");
  expect_near(r.dloss_drejected_logp[1], 0.1 * sig(0.05) / 2, "drejected 1");
  // rewards: β h_c = 0.2, 0.05 (mean 0.125); β h_r = -0.1, 0.1 (mean 0); accuracies: 0.2 >
  // -0.1 yes, 0.05 > 0.1 no: 0.5; margins 0.3 and -0.05: 0.125. logps: -15 and -9.
  expect_near(r.stats.rewards_chosen, 0.125, "rewards/chosen");
  expect_near(r.stats.rewards_rejected, 0.0, "rewards/rejected");
  expect_near(r.stats.rewards_accuracies, 0.5, "rewards/accuracies");
  expect_near(r.stats.rewards_margins, 0.125, "rewards/margins");
  expect_near(r.stats.logps_chosen, -15.0, "logps/chosen");
  expect_near(r.stats.logps_rejected, -9.0, "logps/rejected");
}

TEST(DpoLoss, LdAlphaWeighsTheTokensBeyondTheSharedLength) {
  // A pair of 3 chosen and 2 rejected tokens: shared length 2, so only the chosen completion's
  // third token is beyond it. ld_alpha 0.5:
  //   policy chosen [-1, -2, -3]:    -1 - 2 + 0.5 (-3) = -4.5 (plain sum -6)
  //   policy rejected [-0.5, -1.5]:  -2 (no tail)
  //   ref chosen [-1.5, -2, -2]:     -3.5 + 0.5 (-2) = -4.5 (plain -5.5)
  //   ref rejected [-0.25, -1.25]:   -1.5
  // Δ = (-4.5 + 4.5) - (-2 + 1.5) = 0.5; sigmoid, β 0.1: -log σ(0.05) = 0.668460.
  // Plain sums: Δ = (-6 + 5.5) - (-0.5) = 0, loss log 2 = 0.693147 (the negative control).
  const std::vector<double> pc = {-1, -2, -3}, pr = {-0.5, -1.5}, rc = {-1.5, -2, -2},
                            rr = {-0.25, -1.25};
  const int64_t shared = 2;
  EXPECT_EQ(ld_logp(pc, shared, 0.5), -4.5);
  EXPECT_EQ(ld_logp(pr, shared, 0.5), -2.0);
  EXPECT_EQ(ld_logp(pc, shared, 1.0), -6.0);  // ld_alpha 1: the plain sum
  EXPECT_EQ(ld_logp(pc, shared, 0.0), -3.0);  // 0: the tail masked
  const auto loss_at = [&](double alpha) {
    const std::vector<double> c = {ld_logp(pc, shared, alpha)}, r = {ld_logp(pr, shared, alpha)},
                              c0 = {ld_logp(rc, shared, alpha)}, r0 = {ld_logp(rr, shared, alpha)};
    const std::vector<int64_t> lc = {3}, lr = {2};
    return dpo_loss({c, r, c0, r0, lc, lr}, {});
  };
  const DpoLossResult ld = loss_at(0.5);
  EXPECT_NEAR(ld.loss, 0.668460, 1e-6);
  EXPECT_NEAR(loss_at(1.0).loss, std::log(2.0), 1e-12);
  // d loss / d logp_t = d loss / d chosen · w_t: -β σ(-0.05) = -0.048750 on the shared tokens,
  // half that on the third.
  EXPECT_NEAR(ld.dloss_dchosen_logp[0] * ld_token_weight(0, shared, 0.5), -0.048750, 1e-6);
  EXPECT_NEAR(ld.dloss_dchosen_logp[0] * ld_token_weight(2, shared, 0.5), -0.024375, 1e-6);
  EXPECT_EQ(ld_token_weight(1, shared, 0.5), 1.0);
}

TEST(DpoLoss, SigmoidLabelSmoothingIsConservativeDpo) {
  DpoLossConfig c;
  c.label_smoothing = 0.1;
  Pairs p = two_pairs();
  for (auto* v : {&p.policy_chosen, &p.policy_rejected, &p.ref_chosen, &p.ref_rejected}) {
    v->resize(1);
  }
  const DpoLossResult r = dpo_loss(p.view(), c);
  // -(0.9) log σ(0.3) - 0.1 log σ(-0.3) = 0.9 * 0.554355 + 0.1 * 0.854355 = 0.584355.
  expect_near(r.loss, 0.9 * nls(0.3) + 0.1 * nls(-0.3), "loss");
  // d/dh_c = β (-(0.9) σ(-0.3) + 0.1 σ(0.3)) = 0.1 (-0.383002 + 0.057444) = -0.0325558.
  expect_near(r.dloss_dchosen_logp[0], 0.1 * (-0.9 * sig(-0.3) + 0.1 * sig(0.3)), "dchosen");
  // Negative control: without smoothing the loss is log(1 + e^-0.3) = 0.554355.
  EXPECT_GT(std::fabs(r.loss - nls(0.3)), 1e-2);
}

TEST(DpoLoss, RobustIsUnbiasedUnderLabelFlips) {
  DpoLossConfig c;
  c.loss_type = DpoLossType::robust;
  c.label_smoothing = 0.1;
  const DpoLossResult r = dpo_loss(two_pairs().view(), c);
  // (-(0.9) log σ(x) + 0.1 log σ(-x)) / 0.8 = (0.9 nls(x) - 0.1 nls(-x)) / 0.8 for x = 0.3
  // (0.9 * 0.554355 - 0.1 * 0.854355) / 0.8 = 0.516855, and x = -0.05; mean over 2 pairs.
  const auto robust = [](double x) { return (0.9 * nls(x) - 0.1 * nls(-x)) / 0.8; };
  expect_near(r.loss, (robust(0.3) + robust(-0.05)) / 2, "loss");
  // d/dh_c = β (-(0.9) σ(-x) - 0.1 σ(x)) / 0.8, / 2 pairs.
  expect_near(r.dloss_dchosen_logp[0], 0.1 * (-0.9 * sig(-0.3) - 0.1 * sig(0.3)) / 0.8 / 2,
              "dchosen 0");
  // Negative control: it is not the conservative sigmoid of the same ε.
  c.loss_type = DpoLossType::sigmoid;
  EXPECT_GT(std::fabs(dpo_loss(two_pairs().view(), c).loss - r.loss), 1e-2);
  // With ε = 0 it is plain sigmoid DPO.
  c.label_smoothing = 0.0;
  const double sigmoid_loss = dpo_loss(two_pairs().view(), c).loss;
  c.loss_type = DpoLossType::robust;
  expect_near(dpo_loss(two_pairs().view(), c).loss, sigmoid_loss, "robust at 0");
}

TEST(DpoLoss, HingeHasNoGradientPastTheMargin) {
  DpoLossConfig c;
  c.loss_type = DpoLossType::hinge;
  c.beta = 0.5;
  const DpoLossResult r = dpo_loss(two_pairs().view(), c);
  // relu(1 - βΔ): pair 0: 1 - 1.5 = -0.5 -> 0, no gradient; pair 1: 1 + 0.25 = 1.25, d/dh_c =
  // -β = -0.5. Mean over 2 pairs.
  expect_near(r.loss, 1.25 / 2, "loss");
  EXPECT_EQ(r.dloss_dchosen_logp[0], 0.0);
  EXPECT_EQ(r.dloss_drejected_logp[0], 0.0);
  expect_near(r.dloss_dchosen_logp[1], -0.5 / 2, "dchosen 1");
  expect_near(r.dloss_drejected_logp[1], 0.5 / 2, "drejected 1");
}

TEST(DpoLoss, IpoNormalisesByCompletionLength) {
  DpoLossConfig c;
  c.loss_type = DpoLossType::ipo;
  const DpoLossResult r = dpo_loss(two_pairs().view(), c);
  // x = h_c/|y_c| - h_r/|y_r| - 1/(2β), 1/(2β) = 5:
  //   pair 0: 2/4 - (-1)/2 - 5 = -4;     x^2 = 16; d/dh_c = 2x/4 = -2,   d/dh_r = -2x/2 = 4
  //   pair 1: 0.5/5 - 1/10 - 5 = -5;     x^2 = 25; d/dh_c = 2x/5 = -2,   d/dh_r = -2x/10 = 1
  expect_near(r.loss, (16 + 25) / 2.0, "loss");
  expect_near(r.dloss_dchosen_logp[0], -2.0 / 2, "dchosen 0");
  expect_near(r.dloss_drejected_logp[0], 4.0 / 2, "drejected 0");
  expect_near(r.dloss_dchosen_logp[1], -2.0 / 2, "dchosen 1");
  expect_near(r.dloss_drejected_logp[1], 1.0 / 2, "drejected 1");
  // The reward metrics stay on the summed log-ratios (TRL): 0.125 as for sigmoid.
  expect_near(r.stats.rewards_chosen, 0.125, "rewards/chosen");
  // Negative control: unnormalised, pair 0 would be (3 - 5)^2 = 4.
  EXPECT_GT(std::fabs(r.loss - (4 + 30.25) / 2), 1.0);
}

// TRL main's other loss types on the two pairs (β = 0.1: βΔ = 0.3 and -0.05; β h_c = 0.2 and
// 0.05; β h_r = -0.1 and 0.1), each against its formula written out here, with a control.
TEST(DpoLoss, TrlsPairLossesOnHandComputedPairs) {
  const Pairs pairs = two_pairs();
  auto loss_of = [&](DpoLossType t, double eps = 0.0) {
    DpoLossConfig c;
    c.loss_type = t;
    c.label_smoothing = eps;
    return dpo_loss(pairs.view(), c);
  };
  const double sigmoid_loss = (nls(0.3) + nls(-0.05)) / 2;
  // exo_pair, ε = 0.1: σ(x)(log σ(x) - log 0.9) + σ(-x)(log σ(-x) - log 0.1).
  const auto exo = [](double x) {
    return sig(x) * (-nls(x) - std::log(0.9)) + sig(-x) * (-nls(-x) - std::log(0.1));
  };
  const DpoLossResult e = loss_of(DpoLossType::exo_pair, 0.1);
  expect_near(e.loss, (exo(0.3) + exo(-0.05)) / 2, "exo_pair");
  // d/dh_c = β σ(x) σ(-x) (x - log 0.9 + log 0.1), / 2 pairs.
  expect_near(e.dloss_dchosen_logp[0],
              0.1 * sig(0.3) * sig(-0.3) * (0.3 - std::log(0.9) + std::log(0.1)) / 2, "exo d");
  // nca_pair: -log σ(a) - log σ(-a)/2 - log σ(-b)/2 with a = β h_c, b = β h_r.
  const auto nca = [](double a, double b) { return nls(a) + 0.5 * nls(-a) + 0.5 * nls(-b); };
  const DpoLossResult nc = loss_of(DpoLossType::nca_pair);
  expect_near(nc.loss, (nca(0.2, -0.1) + nca(0.05, 0.1)) / 2, "nca_pair");
  expect_near(nc.dloss_drejected_logp[1], 0.5 * 0.1 * sig(0.1) / 2, "nca d rejected");
  // bco_pair: -log σ(a) - log σ(-b).
  const DpoLossResult bc = loss_of(DpoLossType::bco_pair);
  expect_near(bc.loss, (nls(0.2) + nls(0.1) + nls(0.05) + nls(-0.1)) / 2, "bco_pair");
  expect_near(bc.dloss_dchosen_logp[0], -0.1 * sig(-0.2) / 2, "bco d chosen");
  // sppo_hard: (h_c - 5)^2 + (h_r + 5)^2: pair 0 9 + 16, pair 1 20.25 + 36.
  const DpoLossResult sp = loss_of(DpoLossType::sppo_hard);
  expect_near(sp.loss, (25 + 56.25) / 2, "sppo_hard");
  expect_near(sp.dloss_dchosen_logp[0], 2 * (2 - 5.0) / 2, "sppo d chosen");
  expect_near(sp.dloss_drejected_logp[1], 2 * (1 + 5.0) / 2, "sppo d rejected");
  // apo_zero: 1 - σ(a) + σ(b); apo_down: σ(a) + 1 - σ(βΔ).
  expect_near(loss_of(DpoLossType::apo_zero).loss,
              (1 - sig(0.2) + sig(-0.1) + 1 - sig(0.05) + sig(0.1)) / 2, "apo_zero");
  expect_near(loss_of(DpoLossType::apo_down).loss,
              (sig(0.2) + 1 - sig(0.3) + sig(0.05) + 1 - sig(-0.05)) / 2, "apo_down");
  // discopop, τ = 0.05: -log σ(x)(1 - σ(x/τ)) + e^-x σ(x/τ).
  const auto disco = [](double x) {
    const double m = sig(x / 0.05);
    return nls(x) * (1 - m) + std::exp(-x) * m;
  };
  expect_near(loss_of(DpoLossType::discopop).loss, (disco(0.3) + disco(-0.05)) / 2, "discopop");
  // sft: the chosen completions' token-mean NLL, 30 / 9, the same gradient for every pair.
  const DpoLossResult sf = loss_of(DpoLossType::sft);
  expect_near(sf.loss, 30.0 / 9.0, "sft");
  expect_near(sf.dloss_dchosen_logp[1], -1.0 / 9.0, "sft d chosen");
  EXPECT_EQ(sf.dloss_drejected_logp[0], 0.0);
  // Controls: none of them is sigmoid DPO.
  for (DpoLossType t : {DpoLossType::nca_pair, DpoLossType::bco_pair, DpoLossType::apo_zero,
                        DpoLossType::apo_down, DpoLossType::discopop})
    EXPECT_GT(std::fabs(loss_of(t).loss - sigmoid_loss), 1e-3) << dpo_loss_type_name(t);
  EXPECT_GT(std::fabs(e.loss - sigmoid_loss), 1e-3);
}

// aot sorts the policy's and the reference's log-ratio gaps over the batch before pairing them;
// aot_unpaired sorts h_c and h_r. Pair A: π_c 0, π_r 0, ref 0 and -5; pair B: π_c 0, π_r -2,
// ref 0 and 1 (β = 0.1).
TEST(DpoLoss, AotPairsTheSortedGaps) {
  const Pairs p = {{0, 0}, {0, -2}, {0, 0}, {-5, 1}, {1, 1}, {1, 1}};
  DpoLossConfig c;
  c.loss_type = DpoLossType::aot;
  const DpoLossResult r = dpo_loss(p.view(), c);
  // Policy gaps A 0, B 2 (sorted A, B); reference gaps A 5, B -1 (sorted B, A): δ = 0 - (-1) = 1
  // and 2 - 5 = -3, each through pair A's then pair B's policy.
  expect_near(r.loss, (nls(0.1) + nls(-0.3)) / 2, "aot");
  expect_near(r.dloss_dchosen_logp[0], -0.1 * sig(-0.1) / 2, "aot d chosen A");
  expect_near(r.dloss_drejected_logp[0], 0.1 * sig(-0.1) / 2, "aot d rejected A");
  expect_near(r.dloss_dchosen_logp[1], -0.1 * sig(0.3) / 2, "aot d chosen B");
  // Control: unsorted, the gaps would pair as A: 0 - 5, B: 2 + 1 (sigmoid DPO).
  EXPECT_GT(std::fabs(r.loss - (nls(-0.5) + nls(0.3)) / 2), 1e-2);
  // aot_unpaired: h_c A 0, B 0 (stable: A, B); h_r A 5, B -3 (sorted B, A): δ = 3 and -5;
  // δ_0 is chosen A against rejected B, δ_1 chosen B against rejected A.
  c.loss_type = parse_dpo_loss_type("aot_pair");  // TRL's earlier name
  ASSERT_EQ(c.loss_type, DpoLossType::aot_unpaired);
  const DpoLossResult u = dpo_loss(p.view(), c);
  expect_near(u.loss, (nls(0.3) + nls(-0.5)) / 2, "aot_unpaired");
  expect_near(u.dloss_dchosen_logp[0], -0.1 * sig(-0.3) / 2, "unpaired d chosen A");
  expect_near(u.dloss_drejected_logp[1], 0.1 * sig(-0.3) / 2, "unpaired d rejected B");
  expect_near(u.dloss_drejected_logp[0], 0.1 * sig(0.5) / 2, "unpaired d rejected A");
}

TEST(DpoLoss, GradientMatchesFiniteDifferences) {
  const Pairs base = two_pairs();
  const double h = kFiniteDifferenceStep;
  for (DpoLossType type : dpo_loss_types()) {
    for (double smoothing : {0.0, 0.2}) {
      if (smoothing != 0.0 && !dpo_loss_takes_label_smoothing(type)) continue;
      if (smoothing == 0.0 && type == DpoLossType::exo_pair) continue;
      DpoLossConfig c;
      c.loss_type = type;
      c.label_smoothing = smoothing;
      c.beta = 0.5;  // hinge: 1 - βΔ = -0.5 and 1.25, both away from the kink at 0
      const DpoLossResult r = dpo_loss(base.view(), c);
      for (size_t i = 0; i < 2; ++i) {
        for (int side = 0; side < 2; ++side) {
          Pairs plus = base, minus = base;
          (side == 0 ? plus.policy_chosen : plus.policy_rejected)[i] += h;
          (side == 0 ? minus.policy_chosen : minus.policy_rejected)[i] -= h;
          const double fd =
              (dpo_loss(plus.view(), c).loss - dpo_loss(minus.view(), c).loss) / (2 * h);
          const double g = side == 0 ? r.dloss_dchosen_logp[i] : r.dloss_drejected_logp[i];
          EXPECT_NEAR(g, fd, kF64FiniteDifference * std::max(1.0, std::fabs(fd)))
              << dpo_loss_type_name(type) << " pair " << i << " side " << side;
        }
      }
    }
  }
}

TEST(DpoLoss, LargeMarginsStayFinite) {
  // βΔ = ±1000: log σ would overflow a naive log(1 / (1 + exp(1000))).
  Pairs p = {{0, 0}, {-10000, 0}, {0, 0}, {0, -10000}, {}, {}};
  const DpoLossResult r = dpo_loss(p.view(), {});
  // Pair 0: -log σ(1000) = log(1 + e^-1000) = 0; pair 1: -log σ(-1000) = 1000 (to fp64).
  expect_near(r.loss, 500.0, "loss");
  expect_near(r.dloss_dchosen_logp[1], -0.1 / 2, "dchosen 1");
}

// discopop far below the margin: e^-βΔ overflows while σ(βΔ/τ) vanishes faster; the loss is
// then -log σ(βΔ), finite, where TRL's product would be inf * 0 = NaN.
TEST(DpoLoss, DiscopopStaysFiniteFarBelowTheMargin) {
  Pairs p = {{0}, {0}, {0}, {-10000}, {1}, {1}};  // βΔ = 0.1 * -10000 = -1000
  DpoLossConfig c;
  c.loss_type = DpoLossType::discopop;
  const DpoLossResult r = dpo_loss(p.view(), c);
  expect_near(r.loss, 1000.0, "loss");
  expect_near(r.dloss_dchosen_logp[0], -0.1, "dchosen");
}

TEST(DpoLoss, RejectsBadInput) {
  Pairs p = two_pairs();
  DpoLossConfig c;
  c.loss_type = DpoLossType::ipo;
  p.chosen_length.clear();
  EXPECT_THROW(dpo_loss(p.view(), c), Error);
  c.loss_type = DpoLossType::hinge;
  c.label_smoothing = 0.1;
  EXPECT_THROW(dpo_loss(two_pairs().view(), c), Error);
  c = {};
  c.beta = 0.0;
  EXPECT_THROW(dpo_loss(two_pairs().view(), c), Error);
  EXPECT_THROW(parse_dpo_loss_type("kto"), Error);
  c = {};
  c.loss_type = DpoLossType::robust;
  c.label_smoothing = 0.5;
  EXPECT_THROW(dpo_loss(two_pairs().view(), c), Error);
  EXPECT_EQ(dpo_loss_types().size(), 14u);
  for (DpoLossType t : dpo_loss_types()) {
    EXPECT_EQ(parse_dpo_loss_type(dpo_loss_type_name(t)), t);
  }
  c = {};
  c.loss_type = DpoLossType::exo_pair;  // ε = 0 would make TRL's loss infinite
  EXPECT_THROW(dpo_loss(two_pairs().view(), c), Error);
  c.loss_type = DpoLossType::discopop;
  c.discopop_tau = 0.0;
  EXPECT_THROW(dpo_loss(two_pairs().view(), c), Error);
  c = {};
  c.loss_type = DpoLossType::sft;
  p = two_pairs();
  p.chosen_length.clear();
  EXPECT_THROW(dpo_loss(p.view(), c), Error);
  const DpoLossConfig defaults;
  EXPECT_EQ(defaults.beta, 0.1);
  EXPECT_EQ(defaults.loss_type, DpoLossType::sigmoid);
}

}  // namespace
}  // namespace fp8rl
