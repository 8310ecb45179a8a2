// grpo_loss and compute_rollout_correction against TRL's GRPOTrainer formulas on
// hand-computed cases, and every
// derivative against central finite differences of the returned loss.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/check.h"
#include "rl/grpo_loss.h"
#include "rl/rollout_correction.h"
#include "tolerances.h"

namespace fp8rl {
namespace {

using test::kF64FiniteDifference;
using test::kF64Formula;
using test::kFiniteDifferenceStep;

// Owns the arrays a GrpoBatch points into.
struct Batch {
  std::vector<int64_t> offsets;
  std::vector<double> logp, old_logp, ref_logp, is_weight, advantages;
  std::vector<uint8_t> mask, entropy_mask;

  GrpoBatch view() const {
    return {offsets, logp, old_logp, ref_logp, is_weight, advantages, mask, entropy_mask};
  }
};

// B single-token completions with old_logp -1 and ratio r_i (logp = -1 + ln r_i).
Batch single_tokens(const std::vector<double>& ratios, const std::vector<double>& advantages) {
  Batch b;
  b.offsets.push_back(0);
  for (size_t i = 0; i < ratios.size(); ++i) {
    b.offsets.push_back(int64_t(i + 1));
    b.old_logp.push_back(-1.0);
    b.logp.push_back(-1.0 + std::log(ratios[i]));
    b.mask.push_back(1);
  }
  b.advantages = advantages;
  return b;
}

void expect_near(double got, double want, const char* what) {
  EXPECT_NEAR(got, want, kF64Formula * std::max(1.0, std::fabs(want))) << what;
}

void expect_values(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], kF64Formula * std::max(1.0, std::fabs(want[i]))) << "token " << i;
  }
}

// ---- aggregation, on-policy ----------------------------------------------------------------

// Two completions: 3 active tokens with A = 0.5, and 2 tokens of which the second is masked,
// A = -1. On-policy (old_logp empty = logp.detach()): every ratio is 1 with derivative 1, so
// each active token has L = -A and dL/dlogp = -A: L = -0.5 (x3) and +1 (x1).
Batch on_policy_batch() {
  Batch b;
  b.offsets = {0, 3, 5};
  b.logp = {-0.5, -1.0, -2.0, -0.25, -3.0};
  b.advantages = {0.5, -1.0};
  b.mask = {1, 1, 1, 1, 0};
  return b;
}

GrpoLossConfig config_of(GrpoLossType type) {
  GrpoLossConfig c;
  c.loss_type = type;
  return c;
}

TEST(GrpoLoss, GrpoIsTheMeanOfPerCompletionTokenMeansOverGa) {
  GrpoLossConfig c = config_of(GrpoLossType::grpo);
  c.gradient_accumulation_steps = 2;
  const GrpoLossResult r = grpo_loss(on_policy_batch().view(), c);
  // Completion means: -1.5 / 3 = -0.5 and 1 / 1 = 1; their mean 0.25; / GA 2 = 0.125.
  expect_near(r.loss, 0.125, "loss");
  expect_near(r.stats.policy_loss, 0.25, "policy_loss");
  // d/dlogp: -A / (B M_i GA): -0.5 / (2 * 3 * 2) = -1/24; 1 / (2 * 1 * 2) = 0.25; masked 0.
  expect_values(r.dloss_dlogp, {-1.0 / 24, -1.0 / 24, -1.0 / 24, 0.25, 0.0});
}

TEST(GrpoLoss, BnpoIsTheMicroBatchTokenMeanOverGa) {
  GrpoLossConfig c = config_of(GrpoLossType::bnpo);
  c.gradient_accumulation_steps = 2;
  const GrpoLossResult r = grpo_loss(on_policy_batch().view(), c);
  // (-1.5 + 1) / 4 active tokens = -0.125; / 2 = -0.0625. d/dlogp = -A / (4 * 2).
  expect_near(r.loss, -0.0625, "loss");
  expect_values(r.dloss_dlogp, {-0.0625, -0.0625, -0.0625, 0.125, 0.0});
}

TEST(GrpoLoss, DrGrpoDividesByTheConstantBTimesMaxCompletionLength) {
  GrpoLossConfig c = config_of(GrpoLossType::dr_grpo);
  c.gradient_accumulation_steps = 2;
  c.max_completion_length = 5;
  const GrpoLossResult r = grpo_loss(on_policy_batch().view(), c);
  // -0.5 / (B 2 * L_max 5) = -0.05; / 2 = -0.025. d/dlogp = -A / 20.
  expect_near(r.loss, -0.025, "loss");
  expect_values(r.dloss_dlogp, {-0.025, -0.025, -0.025, 0.05, 0.0});
  // The normaliser is the constant: doubling L_max halves the loss, and appending inactive
  // (e.g. padding) tokens leaves it unchanged, where grpo's per-completion mean of this batch
  // (0.125) differs: the lengths do not enter.
  c.max_completion_length = 10;
  expect_near(grpo_loss(on_policy_batch().view(), c).loss, -0.0125, "L_max 10");
  c.max_completion_length = 5;
  Batch padded = on_policy_batch();
  padded.offsets = {0, 3, 8};
  padded.logp.insert(padded.logp.end(), {-1.0, -1.0, -1.0});
  padded.mask.insert(padded.mask.end(), {0, 0, 0});
  expect_near(grpo_loss(padded.view(), c).loss, -0.025, "padded");
}

TEST(GrpoLoss, DapoDividesByTheGenerationBatchTokenCountPerProcess) {
  GrpoLossConfig c = config_of(GrpoLossType::dapo);
  c.gradient_accumulation_steps = 2;  // not used by dapo
  c.num_items_in_batch = 10;
  c.num_processes = 2;
  const GrpoLossResult r = grpo_loss(on_policy_batch().view(), c);
  // -0.5 / (10 / 2) = -0.1; d/dlogp = -A / 5.
  expect_near(r.loss, -0.1, "loss");
  expect_near(r.stats.policy_loss, -0.1, "policy_loss");
  expect_values(r.dloss_dlogp, {-0.1, -0.1, -0.1, 0.2, 0.0});
  // TRL clamps the count at 1: 0 items gives the plain sum -0.5 * 2 processes = -1.
  c.num_items_in_batch = 0;
  expect_near(grpo_loss(on_policy_batch().view(), c).loss, -1.0, "0 items");
  // dapo without the count is an error, not a silent micro-batch normaliser.
  c.num_items_in_batch = -1;
  EXPECT_THROW(grpo_loss(on_policy_batch().view(), c), Error);
}

TEST(GrpoLoss, CispoWeighsLogpByTheCappedDetachedRatio) {
  GrpoLossConfig c = config_of(GrpoLossType::cispo);
  c.num_items_in_batch = 10;
  c.epsilon_high = 5.0;  // ScaleRL's absolute cap
  const GrpoLossResult r = grpo_loss(on_policy_batch().view(), c);
  // Ratio 1 < 5: L = -1 * A * logp: -0.5 * (-0.5 - 1 - 2) = 1.75 and -(-1)(-0.25) = -0.25;
  // (1.75 - 0.25) / 10 = 0.15. d/dlogp = -A / 10.
  expect_near(r.loss, 0.15, "loss");
  expect_values(r.dloss_dlogp, {-0.05, -0.05, -0.05, 0.1, 0.0});
  // TRL's epsilon_high is an absolute cap for cispo: left at epsilon (0.2), the weight is
  // min(1, 0.2) = 0.2: loss 0.03, gradient scaled by 0.2.
  c.epsilon_high.reset();
  const GrpoLossResult capped = grpo_loss(on_policy_batch().view(), c);
  expect_near(capped.loss, 0.03, "capped loss");
  expect_values(capped.dloss_dlogp, {-0.01, -0.01, -0.01, 0.02, 0.0});
  // cispo_clip_ratio = (r > 0.2) & (A > 0): the 3 tokens of completion 0 of 4.
  expect_near(capped.stats.cispo_clip_ratio, 0.75, "cispo_clip_ratio");
  EXPECT_TRUE(std::isnan(capped.stats.clip_ratio_low_mean));
}

TEST(GrpoLoss, OnPolicyEqualsOldLogpEqualToLogp) {
  // TRL's logp.detach(): the same values and derivatives as passing old_logp = logp.
  Batch detached = on_policy_batch();
  Batch explicit_old = on_policy_batch();
  explicit_old.old_logp = explicit_old.logp;
  for (GrpoLossType type : {GrpoLossType::grpo, GrpoLossType::bnpo, GrpoLossType::dr_grpo,
                            GrpoLossType::dapo, GrpoLossType::cispo}) {
    GrpoLossConfig c = config_of(type);
    c.num_items_in_batch = 4;
    const GrpoLossResult a = grpo_loss(detached.view(), c);
    const GrpoLossResult b = grpo_loss(explicit_old.view(), c);
    EXPECT_EQ(a.loss, b.loss) << grpo_loss_type_name(type);
    EXPECT_EQ(a.dloss_dlogp, b.dloss_dlogp) << grpo_loss_type_name(type);
  }
}

// ---- the clipped surrogate ------------------------------------------------------------------

// Six single-token completions (r, A): outside high (1.5, +1), outside high with A < 0
// (1.5, -1), outside low (0.5, +1), outside low with A < 0 (0.5, -1), inside (1.1, +-1);
// bnpo over 6 tokens, epsilon 0.2: clip range [0.8, 1.2].
TEST(GrpoLoss, ClipRegionsBlockTheGradientOnlyWhereTheClippedBranchIsTaken) {
  const Batch b = single_tokens({1.5, 1.5, 0.5, 0.5, 1.1, 1.1}, {1, -1, 1, -1, 1, -1});
  const GrpoLossResult r = grpo_loss(b.view(), config_of(GrpoLossType::bnpo));
  // L = -min(r A, clamp(r) A):
  //   (1.5, +1): -min(1.5, 1.2) = -1.2   clipped branch: dL/dlogp = 0
  //   (1.5, -1): -min(-1.5, -1.2) = 1.5  unclipped:      dL/dlogp = -A r = 1.5
  //   (0.5, +1): -min(0.5, 0.8) = -0.5   unclipped:      -A r = -0.5
  //   (0.5, -1): -min(-0.5, -0.8) = 0.8  clipped:        0
  //   (1.1, +1): -1.1                    inside:         -1.1
  //   (1.1, -1): 1.1                     inside:         1.1
  // Sum 0.6, / 6 = 0.1.
  expect_near(r.loss, 0.1, "loss");
  expect_values(r.dloss_dlogp, {0.0, 1.5 / 6, -0.5 / 6, 0.0, -1.1 / 6, 1.1 / 6});
  // Negative control: the tokens inside the clip range do get gradient.
  EXPECT_NE(r.dloss_dlogp[4], 0.0);
  EXPECT_NE(r.dloss_dlogp[5], 0.0);
  // clip_ratio: low = r < 0.8 and A < 0 (token 3), high = r > 1.2 and A > 0 (token 0).
  expect_near(r.stats.clip_ratio_low_mean, 1.0 / 6, "low_mean");
  expect_near(r.stats.clip_ratio_high_mean, 1.0 / 6, "high_mean");
  expect_near(r.stats.clip_ratio_region_mean, 2.0 / 6, "region_mean");
  EXPECT_EQ(r.stats.clip_ratio_low_min, 0.0);   // completions without a low clip
  EXPECT_EQ(r.stats.clip_ratio_high_max, 1.0);  // completion 0 is all high-clipped
  EXPECT_TRUE(std::isnan(r.stats.cispo_clip_ratio));
  EXPECT_FALSE(r.stats.kl.has_value());  // beta 0
}

TEST(GrpoLoss, EpsilonHighWidensOnlyTheUpperBound) {
  // (1.25, +1): clipped at 1.2 with epsilon_high = epsilon: L = -1.2, no gradient; DAPO's
  // clip-higher 0.28 puts it inside [0.8, 1.28]: L = -1.25, dL/dlogp = -1.25.
  // (0.75, -1) stays low-clipped either way: L = 0.8, no gradient.
  const Batch b = single_tokens({1.25, 0.75}, {1, -1});
  GrpoLossConfig c = config_of(GrpoLossType::bnpo);
  const GrpoLossResult sym = grpo_loss(b.view(), c);
  expect_near(sym.loss, (-1.2 + 0.8) / 2, "symmetric");
  expect_values(sym.dloss_dlogp, {0.0, 0.0});
  c.epsilon_high = 0.28;
  const GrpoLossResult high = grpo_loss(b.view(), c);
  expect_near(high.loss, (-1.25 + 0.8) / 2, "clip-higher");
  expect_values(high.dloss_dlogp, {-1.25 / 2, 0.0});
}

TEST(GrpoLoss, DeltaCapsTheUnclippedBranch) {
  // delta 1.3. (1.5, -1): the unclipped branch is min(1.5, 1.3) = 1.3: L = -min(-1.3, -1.2) =
  // 1.3, and the cap blocks the gradient (1.5 > delta). Without delta: 1.5 with gradient 1.5.
  // (1.1, -1) is below the cap: unchanged, L = 1.1, dL/dlogp = 1.1.
  const Batch b = single_tokens({1.5, 1.1}, {-1, -1});
  GrpoLossConfig c = config_of(GrpoLossType::bnpo);
  c.delta = 1.3;
  const GrpoLossResult r = grpo_loss(b.view(), c);
  expect_near(r.loss, (1.3 + 1.1) / 2, "loss");
  expect_values(r.dloss_dlogp, {0.0, 1.1 / 2});
  c.delta.reset();
  const GrpoLossResult uncapped = grpo_loss(b.view(), c);
  expect_near(uncapped.loss, (1.5 + 1.1) / 2, "no delta");
  expect_values(uncapped.dloss_dlogp, {1.5 / 2, 1.1 / 2});
}

// ---- sapo and luspo ------------------------------------------------------------------------

TEST(GrpoLoss, SapoIsASoftGateWithTheAdvantageSignsTemperature) {
  // grpo's aggregation over two one-token completions: (L1 + L2) / 2.
  //   (r 1.5, A 1, τ_pos 1):     σ(0.5) = 0.622459; L1 = -(4/1) 0.622459 = -2.489837;
  //     dL1/dr = -4 σ (1 - σ) A = -0.940015; dL1/dlogp = dL1/dr · r = -1.410022
  //   (r 0.8, A -1, τ_neg 1.05): σ(1.05 · -0.2) = σ(-0.21) = 0.447692;
  //     L2 = -(4/1.05) 0.447692 · (-1) = 1.705494; dL2/dr = 4 σ (1 - σ) = 0.989056;
  //     dL2/dlogp = 0.791244
  //   loss = (-2.489837 + 1.705494) / 2 = -0.392172; d/dlogp = -0.705011, 0.395622
  const Batch b = single_tokens({1.5, 0.8}, {1, -1});
  GrpoLossConfig c = config_of(GrpoLossType::sapo);
  const GrpoLossResult r = grpo_loss(b.view(), c);
  EXPECT_NEAR(r.loss, -0.392172, 1e-6);
  EXPECT_NEAR(r.dloss_dlogp[0], -0.705011, 1e-6);
  EXPECT_NEAR(r.dloss_dlogp[1], 0.395622, 1e-6);
  EXPECT_NEAR(r.stats.policy_loss, -0.392172, 1e-6);
  // TRL logs no clip ratios for sapo.
  EXPECT_TRUE(std::isnan(r.stats.clip_ratio_region_mean));
  EXPECT_TRUE(std::isnan(r.stats.cispo_clip_ratio));
  // Negative controls: the clipped surrogate (grpo) gives -min(1.5, 1.2) = -1.2 and
  // -min(-0.8, -0.8) = 0.8: (-1.2 + 0.8) / 2 = -0.2. τ_neg 2 moves only L2:
  // -(4/2) σ(-0.4) · (-1) = 2 · 0.401312 = 0.802625, loss (-2.489837 + 0.802625) / 2.
  EXPECT_NEAR(grpo_loss(b.view(), config_of(GrpoLossType::grpo)).loss, -0.2, 1e-12);
  c.sapo_temperature_neg = 2.0;
  EXPECT_NEAR(grpo_loss(b.view(), c).loss, (-2.489837 + 0.802625) / 2, 1e-6);
}

// Two completions, epsilon 0.2: (2 tokens, log-ratios 0.1 and 0.1, A 1) and (1 token, ratio
// 0.5, A -1).
Batch luspo_batch() {
  Batch b;
  b.offsets = {0, 2, 3};
  b.old_logp = {-1.0, -2.0, -1.5};
  b.logp = {-0.9, -1.9, -1.5 + std::log(0.5)};
  b.advantages = {1.0, -1.0};
  b.mask = {1, 1, 1};
  return b;
}

TEST(GrpoLoss, LuspoWeighsEachCompletionsSequenceLossByItsLength) {
  // Sequence level: s_0 = e^0.1 = 1.105171 inside [0.8, 1.2]: L_0 = -1.105171, M_0 = 2;
  // s_1 = 0.5 < 0.8 with A < 0: L_1 = -min(-0.5, -0.8) = 0.8 (clipped, no gradient), M_1 = 1.
  // loss = (2 · -1.105171 + 1 · 0.8) / B 2 = -0.705171. d/dlogp_u on completion 0:
  // (M_0 / B) · (-A) · s_0 / M_0 = -1.105171 / 2 = -0.552585 for both tokens; 0 on the last.
  GrpoLossConfig c = config_of(GrpoLossType::luspo);
  c.importance_sampling_level = ImportanceSamplingLevel::sequence;
  const GrpoLossResult r = grpo_loss(luspo_batch().view(), c);
  EXPECT_NEAR(r.loss, -0.705171, 1e-6);
  EXPECT_NEAR(r.dloss_dlogp[0], -0.552585, 1e-6);
  EXPECT_NEAR(r.dloss_dlogp[1], -0.552585, 1e-6);
  EXPECT_EQ(r.dloss_dlogp[2], 0.0);
  // Clip metrics as grpo's, over completions: the second is low-clipped.
  EXPECT_EQ(r.stats.clip_ratio_low_mean, 0.5);
  // Negative control: grpo's per-completion mean, (-1.105171 + 0.8) / 2 = -0.152585.
  c.loss_type = GrpoLossType::grpo;
  EXPECT_NEAR(grpo_loss(luspo_batch().view(), c).loss, -0.152585, 1e-6);
  // GA divides luspo's loss as grpo's.
  c.loss_type = GrpoLossType::luspo;
  c.gradient_accumulation_steps = 2;
  EXPECT_NEAR(grpo_loss(luspo_batch().view(), c).loss, -0.705171 / 2, 1e-6);
}

TEST(GrpoLoss, LuspoRejectsPerTokenFactors) {
  GrpoLossConfig c = config_of(GrpoLossType::luspo);
  EXPECT_THROW(grpo_loss(luspo_batch().view(), c), Error);  // token level
  c.importance_sampling_level = ImportanceSamplingLevel::sequence;
  Batch b = luspo_batch();
  b.is_weight = {1.0, 0.5, 1.0};  // two weights within completion 0
  EXPECT_THROW(grpo_loss(b.view(), c), Error);
  b.is_weight = {0.5, 0.5, 1.0};  // one per completion: fine
  EXPECT_NO_THROW(grpo_loss(b.view(), c));
  b.entropy_mask = {1, 0, 1};
  EXPECT_THROW(grpo_loss(b.view(), c), Error);
}

// ---- top_entropy_quantile --------------------------------------------------------------------

TEST(TopEntropyMask, KeepsTokensAtOrAboveTorchsInterpolatedQuantile) {
  // Active entropies 0.5, 2, 1, 3 (sorted 0.5, 1, 2, 3); the fifth token is inactive.
  const std::vector<double> h = {0.5, 2.0, 1.0, 3.0, 9.0};
  const std::vector<uint8_t> m = {1, 1, 1, 1, 0};
  using V = std::vector<uint8_t>;
  // quantile 0.5: q = 0.5 at rank 0.5 · 3 = 1.5, between 1 and 2: threshold 1.5.
  EXPECT_EQ(top_entropy_mask(h, m, 0.5), (V{0, 1, 0, 1, 0}));
  // quantile 0.2 (the paper's): q = 0.8 at rank 2.4: 2 + 0.4 (3 - 2) = 2.4.
  EXPECT_EQ(top_entropy_mask(h, m, 0.2), (V{0, 0, 0, 1, 0}));
  // quantile 0.75: q = 0.25 at rank 0.75: 0.5 + 0.75 (1 - 0.5) = 0.875: three tokens.
  EXPECT_EQ(top_entropy_mask(h, m, 0.75), (V{0, 1, 1, 1, 0}));
  // 1 keeps every active token (the minimum), 0 only the maximum; inactive never.
  EXPECT_EQ(top_entropy_mask(h, m, 1.0), (V{1, 1, 1, 1, 0}));
  EXPECT_EQ(top_entropy_mask(h, m, 0.0), (V{0, 0, 0, 1, 0}));
  EXPECT_EQ(top_entropy_mask(h, V(5, 0), 0.5), V(5, 0));
  EXPECT_THROW(top_entropy_mask(h, m, 1.5), Error);
}

TEST(GrpoLoss, EntropyMaskGatesThePolicyTermOnly) {
  // on_policy_batch, bnpo: L = -A per active token: -0.5 (x3), 1; 4 active tokens. The mask
  // keeps tokens 0 and 2: loss = (-0.5 - 0.5) / 4 = -0.25, d/dlogp = -0.125 on those two, 0 on
  // the others; the normaliser still counts 4 tokens.
  Batch b = on_policy_batch();
  b.entropy_mask = {1, 0, 1, 0, 0};
  GrpoLossConfig c = config_of(GrpoLossType::bnpo);
  const GrpoLossResult r = grpo_loss(b.view(), c);
  expect_near(r.loss, -0.25, "loss");
  expect_values(r.dloss_dlogp, {-0.125, 0.0, -0.125, 0.0, 0.0});
  // Negative control: no mask, (-1.5 + 1) / 4.
  b.entropy_mask.clear();
  expect_near(grpo_loss(b.view(), c).loss, -0.125, "no mask");
  // The KL term is not gated: token 1 (masked out) keeps beta dk3/dlogp / 4, with ref - logp
  // = 0.5: 0.04 (1 - e^0.5) / 4.
  b.entropy_mask = {1, 0, 1, 0, 0};
  b.ref_logp = {-0.5, -0.5, -2.0, -0.25, -3.0};
  c.beta = 0.04;
  expect_near(grpo_loss(b.view(), c).dloss_dlogp[1], 0.04 * (1 - std::exp(0.5)) / 4, "kl");
  // Sequence level: the gate removes token 1's policy term from completion 0's sum, so its
  // completion sum is 2 L_0 (tokens 0 and 2) and the gradient through s reaches all three.
  c.beta = 0.0;
  c.importance_sampling_level = ImportanceSamplingLevel::sequence;
  const GrpoLossResult seq = grpo_loss(b.view(), c);
  expect_near(seq.loss, -0.25, "sequence loss");
  expect_values(seq.dloss_dlogp, {-1.0 / 12, -1.0 / 12, -1.0 / 12, 0.0, 0.0});
}

// ---- GSPO -----------------------------------------------------------------------------------

TEST(GrpoLoss, SequenceLevelUsesTheGeometricMeanRatio) {
  // One completion, two tokens with log-ratios 0.3 and -0.1, A = 1, grpo, epsilon 0.2.
  Batch b;
  b.offsets = {0, 2};
  b.old_logp = {-1.0, -2.0};
  b.logp = {-0.7, -2.1};
  b.advantages = {1.0};
  b.mask = {1, 1};
  GrpoLossConfig c = config_of(GrpoLossType::grpo);
  // Token level: r1 = e^0.3 = 1.3499 > 1.2 clipped: L1 = -1.2, no gradient; r2 = e^-0.1 =
  // 0.9048 inside: L2 = -e^-0.1, dL2/dlogp2 = -e^-0.1. grpo: (L1 + L2) / 2.
  const GrpoLossResult token = grpo_loss(b.view(), c);
  expect_near(token.loss, (-1.2 - std::exp(-0.1)) / 2, "token loss");
  expect_values(token.dloss_dlogp, {0.0, -std::exp(-0.1) / 2});
  // Sequence level: s = exp((0.3 - 0.1) / 2) = e^0.1 = 1.1052, inside: every token's L = -s,
  // the completion mean is -s. d(-s)/dlogp_u = -s / M = -e^0.1 / 2 for both tokens: the
  // clipped first token now gets gradient through the mean.
  c.importance_sampling_level = ImportanceSamplingLevel::sequence;
  const GrpoLossResult seq = grpo_loss(b.view(), c);
  expect_near(seq.loss, -std::exp(0.1), "sequence loss");
  expect_values(seq.dloss_dlogp, {-std::exp(0.1) / 2, -std::exp(0.1) / 2});
  EXPECT_GT(std::fabs(seq.loss - token.loss), 1e-2);  // they differ when the tokens differ
  // Sequence-level clip metrics count completions: s inside, nothing clipped.
  EXPECT_EQ(seq.stats.clip_ratio_region_mean, 0.0);
  EXPECT_EQ(token.stats.clip_ratio_high_mean, 0.5);
}

TEST(GrpoLoss, SequenceLevelOnPolicyEqualsTokenLevel) {
  // s = exp(0) = 1 with ds/dlogp_u = 1 / M: summed over the completion's tokens the same as
  // the token level's per-token gradient for grpo's per-completion mean.
  GrpoLossConfig c = config_of(GrpoLossType::grpo);
  const GrpoLossResult token = grpo_loss(on_policy_batch().view(), c);
  c.importance_sampling_level = ImportanceSamplingLevel::sequence;
  const GrpoLossResult seq = grpo_loss(on_policy_batch().view(), c);
  expect_near(seq.loss, token.loss, "loss");
  expect_values(seq.dloss_dlogp, token.dloss_dlogp);
}

// ---- KL and the rollout correction ----------------------------------------------------------

TEST(GrpoLoss, K3KlIsAddedPerTokenAfterTheRolloutWeight) {
  // Two on-policy tokens of one completion, A = 1, beta 0.04, rollout weights 2 and 0.5,
  // ref - logp = 0.5 and -0.5; bnpo over 2 tokens.
  //   k3(0.5)  = e^0.5 - 0.5 - 1 = 0.148721, d/dlogp = 1 - e^0.5 = -0.648721
  //   k3(-0.5) = e^-0.5 + 0.5 - 1 = 0.106531, d/dlogp = 1 - e^-0.5 = 0.393469
  //   L_t = -A * rho_t + beta k3_t; dL_t/dlogp_t = -A rho_t + beta dk3_t (rho scales the policy
  //   term only, not the KL)
  Batch b;
  b.offsets = {0, 2};
  b.logp = {-1.0, -2.0};
  b.ref_logp = {-0.5, -2.5};
  b.is_weight = {2.0, 0.5};
  b.advantages = {1.0};
  b.mask = {1, 1};
  GrpoLossConfig c = config_of(GrpoLossType::bnpo);
  c.beta = 0.04;
  const GrpoLossResult r = grpo_loss(b.view(), c);
  const double k1 = std::exp(0.5) - 1.5, k2 = std::exp(-0.5) - 0.5;
  expect_near(r.loss, ((-2.0 + 0.04 * k1) + (-0.5 + 0.04 * k2)) / 2, "loss");
  expect_values(r.dloss_dlogp, {(-2.0 + 0.04 * (1 - std::exp(0.5))) / 2,
                                (-0.5 + 0.04 * (1 - std::exp(-0.5))) / 2});
  ASSERT_TRUE(r.stats.kl.has_value());
  expect_near(*r.stats.kl, (k1 + k2) / 2, "kl");
  // Negative control: beta 0 drops the KL term and the metric.
  c.beta = 0.0;
  const GrpoLossResult no_kl = grpo_loss(b.view(), c);
  expect_near(no_kl.loss, (-2.0 - 0.5) / 2, "beta 0");
  EXPECT_FALSE(no_kl.stats.kl.has_value());
}

// Two completions: tokens with old - engine = ln 3 and ln 1.5 (completion 0), and ln 2, ln 2
// plus a masked token (completion 1).
struct RolloutCase {
  std::vector<int64_t> offsets = {0, 2, 5};
  std::vector<double> old_logp = {std::log(3.0), std::log(1.5), std::log(2.0), std::log(2.0), 7.0};
  std::vector<double> engine_logp = {0.0, 0.0, 0.0, 0.0, 0.0};
  std::vector<uint8_t> mask = {1, 1, 1, 1, 0};

  RolloutCorrection run(RolloutCorrectionMode mode, std::optional<double> lo,
                        std::optional<double> hi) const {
    return compute_rollout_correction(offsets, old_logp, engine_logp, mask, {mode, lo, hi});
  }
};

TEST(RolloutCorrection, TokenTruncateClampsAtTheCap) {
  const RolloutCase rc;
  // Ratios 3, 1.5, 2, 2; the masked token's difference counts as 0 (ratio 1). Cap 2.0 (TRL
  // 0.23-0.25's TIS): 3 -> 2.
  const RolloutCorrection r = rc.run(RolloutCorrectionMode::token_truncate, {}, 2.0);
  expect_values(r.weight, {2.0, 1.5, 2.0, 2.0, 1.0});
  // Negative control: a cap of 3 leaves them all.
  expect_values(rc.run(RolloutCorrectionMode::token_truncate, {}, 3.0).weight,
                {3.0, 1.5, 2.0, 2.0, 1.0});
  // Stats over the 4 active tokens: |d| = ln 3, ln 1.5, ln 2, ln 2.
  expect_near(r.stats.logp_difference_mean, (std::log(3.0) + std::log(1.5) + 2 * std::log(2.0)) / 4,
              "diff mean");
  expect_near(r.stats.logp_difference_max, std::log(3.0), "diff max");
  expect_near(r.stats.ratio_min, 1.5, "ratio min");
  expect_near(r.stats.ratio_mean, (2.0 + 1.5 + 2.0 + 2.0) / 4, "ratio mean");
  expect_near(r.stats.ratio_max, 2.0, "ratio max");
}

TEST(RolloutCorrection, TokenMaskZeroesOutsideTheBounds) {
  const RolloutCase rc;
  // Cap 2.0: 3 -> 0, 2 stays (the bound is inclusive). clip_min 1.6 also masks 1.5, and the
  // masked token's ratio 1 (TRL masks every position; the loss ignores that one).
  expect_values(rc.run(RolloutCorrectionMode::token_mask, {}, 2.0).weight,
                {0.0, 1.5, 2.0, 2.0, 1.0});
  expect_values(rc.run(RolloutCorrectionMode::token_mask, 1.6, 2.0).weight,
                {0.0, 0.0, 2.0, 2.0, 0.0});
}

TEST(RolloutCorrection, SequenceModesUseTheProductOfTokenRatios) {
  const RolloutCase rc;
  // Completion 0: exp(ln 3 + ln 1.5) = 4.5; completion 1: exp(ln 2 + ln 2) = 4 (not the
  // geometric mean 2). Truncate at 3: 3 and 3. Mask at the default 3: 0 and 0; at 4.2: 0, 4.
  expect_values(rc.run(RolloutCorrectionMode::sequence_truncate, {}, 3.0).weight,
                {3.0, 3.0, 3.0, 3.0, 3.0});
  const RolloutCorrection masked = rc.run(RolloutCorrectionMode::sequence_mask, {}, 4.2);
  expect_values(masked.weight, {0.0, 0.0, 4.0, 4.0, 4.0});
  // Sequence-level ratio stats run over completions: 0 and 4.
  expect_near(masked.stats.ratio_min, 0.0, "min");
  expect_near(masked.stats.ratio_mean, 2.0, "mean");
  expect_near(masked.stats.ratio_max, 4.0, "max");
  // TRL's default config is sequence_mask with C_max 3.
  const RolloutCorrectionConfig defaults;
  EXPECT_EQ(defaults.mode, RolloutCorrectionMode::sequence_mask);
  EXPECT_EQ(defaults.clip_max, 3.0);
  EXPECT_FALSE(defaults.clip_min.has_value());
}

// NeMo RL's token probability error: the mean of exp(|d|) over the active tokens, whichever
// side is larger. Completion 0: d = 0 and ln 2 (the trainer's the larger); completion 1:
// d = -ln 2 (the engine's) and a masked token far off. Mean of 1, 2 and 2.
TEST(RolloutCorrection, TokenProbErrorIsTheMeanOfExpAbsDifference) {
  const std::vector<int64_t> offsets = {0, 2, 4};
  const std::vector<double> old_logp = {-1.0, std::log(2.0) - 1.0, -3.0, 5.0};
  const std::vector<double> engine_logp = {-1.0, -1.0, std::log(2.0) - 3.0, -2.0};
  const std::vector<uint8_t> mask = {1, 1, 1, 0};
  const auto run = [&](const std::vector<uint8_t>& m) {
    return compute_rollout_correction(offsets, old_logp, engine_logp, m, {}).stats;
  };
  expect_near(run(mask).token_prob_error_mean, (1.0 + 2.0 + 2.0) / 3, "prob error");
  expect_near(run(mask).logp_difference_mean, 2 * std::log(2.0) / 3, "|d| mean");
  // Negative control: unmasked, the fourth token (d = 7) enters the mean.
  expect_near(run({1, 1, 1, 1}).token_prob_error_mean, (5.0 + std::exp(7.0)) / 4, "unmasked");
  // Nothing active: 0, as the other statistics.
  EXPECT_EQ(run({0, 0, 0, 0}).token_prob_error_mean, 0.0);
}

TEST(RolloutCorrection, TruncateNeedsABound) {
  const RolloutCase rc;
  EXPECT_THROW(rc.run(RolloutCorrectionMode::token_truncate, {}, {}), Error);
  EXPECT_NO_THROW(rc.run(RolloutCorrectionMode::token_mask, {}, {}));
  EXPECT_THROW(parse_rollout_correction_mode("tis"), Error);
  for (auto m : {RolloutCorrectionMode::token_truncate, RolloutCorrectionMode::token_mask,
                 RolloutCorrectionMode::sequence_truncate, RolloutCorrectionMode::sequence_mask}) {
    EXPECT_EQ(parse_rollout_correction_mode(rollout_correction_mode_name(m)), m);
  }
}

// ---- derivatives vs finite differences -----------------------------------------------------

// Three completions (4, 3 and 2 tokens; one masked token in the first, the last fully masked
// but for one token) with log-ratios spread over both sides of the clip range, a reference,
// rollout weights and mixed-sign advantages.
Batch off_policy_batch() {
  Batch b;
  b.offsets = {0, 4, 7, 9};
  const std::vector<double> log_ratio = {-0.5, 0.3, -0.1, 0.05, 0.5, -0.3, 0.1, 0.7, -0.05};
  b.old_logp = {-1.2, -0.4, -2.3, -0.9, -1.7, -0.6, -3.1, -0.8, -1.4};
  for (size_t t = 0; t < log_ratio.size(); ++t) b.logp.push_back(b.old_logp[t] + log_ratio[t]);
  b.ref_logp = {-1.0, -0.7, -2.0, -1.1, -1.5, -0.9, -2.8, -1.0, -1.3};
  b.is_weight = {1.0, 0.7, 2.0, 1.3, 1.0, 0.0, 1.5, 0.9, 1.1};
  b.advantages = {0.8, -1.3, 0.6};
  b.mask = {1, 1, 0, 1, 1, 1, 1, 1, 0};
  return b;
}

// Requires every ratio the loss clips on to lie >= 1e-3 away (in log space) from the clip
// bounds, so that the loss is smooth around the test point.
void expect_smooth(const Batch& b, const GrpoLossConfig& c) {
  std::vector<double> bounds = {std::log(1 - c.epsilon_low()),
                                std::log(1 + c.epsilon_high_value())};
  if (c.delta) bounds.push_back(std::log(*c.delta));
  const auto check = [&](double log_r) {
    for (double x : bounds) ASSERT_GT(std::fabs(log_r - x), 1e-3) << "ratio at a kink";
  };
  for (size_t i = 0; i + 1 < b.offsets.size(); ++i) {
    double sum = 0.0;
    int64_t m = 0;
    for (int64_t t = b.offsets[i]; t < b.offsets[i + 1]; ++t) {
      if (!b.mask[size_t(t)]) continue;
      check(b.logp[size_t(t)] - b.old_logp[size_t(t)]);
      sum += b.logp[size_t(t)] - b.old_logp[size_t(t)];
      ++m;
    }
    check(sum / double(std::max<int64_t>(1, m)));
  }
}

// Central differences of the loss in logp_t for every token t (old_logp fixed); for cispo
// the ratio is detached, so the difference moves logp_t and old_logp_t together, which keeps
// the ratio and varies only the logp factor (and the KL).
void expect_gradient_matches_finite_differences(const Batch& base, const GrpoLossConfig& c) {
  expect_smooth(base, c);
  const GrpoLossResult r = grpo_loss(base.view(), c);
  const double h = kFiniteDifferenceStep;
  const bool move_old = c.loss_type == GrpoLossType::cispo;
  for (size_t t = 0; t < base.logp.size(); ++t) {
    Batch plus = base, minus = base;
    plus.logp[t] += h;
    minus.logp[t] -= h;
    if (move_old) {
      plus.old_logp[t] += h;
      minus.old_logp[t] -= h;
    }
    const double fd = (grpo_loss(plus.view(), c).loss - grpo_loss(minus.view(), c).loss) / (2 * h);
    EXPECT_NEAR(r.dloss_dlogp[t], fd, kF64FiniteDifference * std::max(1.0, std::fabs(fd)))
        << grpo_loss_type_name(c.loss_type) << " "
        << importance_sampling_level_name(c.importance_sampling_level) << " token " << t;
  }
}

TEST(GrpoLoss, GradientMatchesFiniteDifferencesForEveryConfiguration) {
  const Batch b = off_policy_batch();
  int64_t nonzero = 0;
  Batch gated = b;
  gated.entropy_mask = {1, 0, 1, 1, 0, 1, 1, 1, 1};
  int64_t configurations = 0;
  for (GrpoLossType type :
       {GrpoLossType::grpo, GrpoLossType::bnpo, GrpoLossType::dr_grpo, GrpoLossType::dapo,
        GrpoLossType::cispo, GrpoLossType::sapo, GrpoLossType::luspo}) {
    for (ImportanceSamplingLevel level :
         {ImportanceSamplingLevel::token, ImportanceSamplingLevel::sequence}) {
      for (int variant = 0; variant < 8; ++variant) {
        const bool luspo = type == GrpoLossType::luspo;
        // luspo: sequence level, no KL, no gate, one rollout weight per completion.
        if (luspo && (level == ImportanceSamplingLevel::token || (variant & 5))) continue;
        GrpoLossConfig c = config_of(type);
        c.importance_sampling_level = level;
        c.num_items_in_batch = 17;
        c.max_completion_length = 6;
        c.gradient_accumulation_steps = 3;
        if (variant & 1) c.beta = 0.05;
        if (variant & 2) {
          c.epsilon_high = type == GrpoLossType::cispo ? 1.2 : 0.28;
          c.delta = 1.5;
          c.sapo_temperature_neg = 2.0;
        }
        Batch x = (variant & 4) ? gated : b;
        if (luspo) x.is_weight.clear();
        expect_gradient_matches_finite_differences(x, c);
        for (double g : grpo_loss(x.view(), c).dloss_dlogp) nonzero += g != 0.0;
        ++configurations;
      }
    }
  }
  // The check is not vacuous: most active tokens get gradient.
  EXPECT_EQ(configurations, 6 * 2 * 8 + 2);
  EXPECT_GT(nonzero, configurations * 4);
}

// TRL's RLOOTrainer loss: q_i = exp(Σ_t logp - Σ_t old), the ratio of the whole completion's
// probabilities, clipped as PPO's; loss = mean_i -min(q A, clamp(q) A), before the GA division.
// Completion 0: log ratios 0.1 + 0.2 = 0.3, q = e^0.3 = 1.34986 > 1.2, A = 1: the clipped
// branch, L = -1.2, no gradient. Completion 1: log ratio -0.05, q = 0.951229, A = -0.5: L =
// 0.475615, dL/dlogp = -A q. Loss = (-1.2 + 0.475615) / 2 / GA.
TEST(GrpoLoss, RlooIsTheClippedWholeSequenceRatioMeanOverCompletions) {
  Batch b;
  b.offsets = {0, 2, 3};
  b.logp = {-1.0, -2.0, -0.5};
  b.old_logp = {-1.1, -2.2, -0.45};
  b.advantages = {1.0, -0.5};
  b.mask = {1, 1, 1};
  GrpoLossConfig c = config_of(GrpoLossType::rloo);
  c.gradient_accumulation_steps = 2;
  const GrpoLossResult r = grpo_loss(b.view(), c);
  const double q1 = std::exp(-0.05);
  expect_near(r.loss, (-1.2 + 0.5 * q1) / 2 / 2, "loss");
  EXPECT_NEAR(r.loss, -0.181096, 1e-6);
  expect_values(r.dloss_dlogp, {0.0, 0.0, 0.5 * q1 / 2 / 2});
  expect_near(r.stats.policy_loss, (-1.2 + 0.5 * q1) / 2, "policy_loss");
  // Clip metrics per completion: completion 0 is high-clipped.
  expect_near(r.stats.clip_ratio_high_mean, 0.5, "high");
  expect_near(r.stats.clip_ratio_low_mean, 0.0, "low");
  // Controls: GSPO's ratio, the geometric mean per token (e^0.15, inside the clip), and the
  // token-level ratios give other losses.
  for (ImportanceSamplingLevel level :
       {ImportanceSamplingLevel::sequence, ImportanceSamplingLevel::token}) {
    GrpoLossConfig g = config_of(GrpoLossType::grpo);
    g.gradient_accumulation_steps = 2;
    g.importance_sampling_level = level;
    EXPECT_GT(std::fabs(grpo_loss(b.view(), g).loss - r.loss), 0.005)
        << importance_sampling_level_name(level);
  }
  // A completion with no active token still counts in the mean (ratio 1, L = -A), as TRL's
  // per-sequence mean does, without gradient.
  Batch empty = b;
  empty.mask = {1, 1, 0};
  expect_near(grpo_loss(empty.view(), c).loss, (-1.2 + 0.5) / 2 / 2, "empty completion");
  EXPECT_EQ(grpo_loss(empty.view(), c).dloss_dlogp[2], 0.0);
}

TEST(GrpoLoss, RlooGradientMatchesFiniteDifferencesAndRejectsPerTokenFactors) {
  Batch b = off_policy_batch();
  b.is_weight.clear();
  GrpoLossConfig c = config_of(GrpoLossType::rloo);
  c.gradient_accumulation_steps = 3;
  expect_gradient_matches_finite_differences(b, c);
  int64_t nonzero = 0;
  for (double g : grpo_loss(b.view(), c).dloss_dlogp) nonzero += g != 0.0;
  // Completions 0 and 1 (3 active tokens each); completion 2's ratio e^0.7 with A > 0 takes the
  // clipped branch.
  EXPECT_EQ(nonzero, 6);
  GrpoLossConfig kl = c;
  kl.beta = 0.05;
  EXPECT_THROW(grpo_loss(b.view(), kl), Error);
  EXPECT_THROW(grpo_loss(off_policy_batch().view(), c), Error);  // rollout weights
  Batch gated = b;
  gated.entropy_mask = {1, 0, 1, 1, 0, 1, 1, 1, 1};
  EXPECT_THROW(grpo_loss(gated.view(), c), Error);
}

TEST(GrpoLoss, MaskedTokensGetNoGradientAndAreNotRead) {
  Batch b = off_policy_batch();
  GrpoLossConfig c = config_of(GrpoLossType::grpo);
  c.beta = 0.05;
  const GrpoLossResult r = grpo_loss(b.view(), c);
  EXPECT_EQ(r.dloss_dlogp[2], 0.0);
  EXPECT_EQ(r.dloss_dlogp[8], 0.0);
  b.logp[2] = b.old_logp[2] = b.ref_logp[2] = std::nan("");
  EXPECT_EQ(grpo_loss(b.view(), c).loss, r.loss);
}

TEST(GrpoLoss, RejectsInconsistentInput) {
  Batch b = on_policy_batch();
  GrpoLossConfig c = config_of(GrpoLossType::grpo);
  c.beta = 0.1;  // no ref_logp
  EXPECT_THROW(grpo_loss(b.view(), c), Error);
  c.beta = 0.0;
  b.advantages.pop_back();
  EXPECT_THROW(grpo_loss(b.view(), c), Error);
  b = on_policy_batch();
  b.offsets = {0, 3, 6};
  EXPECT_THROW(grpo_loss(b.view(), c), Error);
  EXPECT_THROW(parse_grpo_loss_type("vespo"), Error);
  EXPECT_EQ(parse_importance_sampling_level("sequence"), ImportanceSamplingLevel::sequence);
  for (GrpoLossType t :
       {GrpoLossType::grpo, GrpoLossType::bnpo, GrpoLossType::dr_grpo, GrpoLossType::dapo,
        GrpoLossType::cispo, GrpoLossType::sapo, GrpoLossType::luspo}) {
    EXPECT_EQ(parse_grpo_loss_type(grpo_loss_type_name(t)), t);
  }
}

TEST(GrpoLoss, DefaultsAreTrls) {
  const GrpoLossConfig c;
  EXPECT_EQ(c.loss_type, GrpoLossType::dapo);
  EXPECT_EQ(c.importance_sampling_level, ImportanceSamplingLevel::token);
  EXPECT_EQ(c.epsilon, 0.2);
  EXPECT_EQ(c.epsilon_high_value(), 0.2);
  EXPECT_EQ(c.beta, 0.0);
  EXPECT_FALSE(c.delta.has_value());
  EXPECT_EQ(c.sapo_temperature_neg, 1.05);
  EXPECT_EQ(c.sapo_temperature_pos, 1.0);
  EXPECT_EQ(c.max_completion_length, 512);
}

}  // namespace
}  // namespace fp8rl
