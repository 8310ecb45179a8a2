// KTO's loss over a batch of unpaired examples from their summed completion log-probabilities,
// with its derivative with respect to the policy's, the batch's KL estimate and TRL's metrics:
// KTOTrainer._compute_loss (TRL main 1.10.dev, f2cd5771).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fp8rl {

// KTOConfig.loss_type.
enum class KtoLossType { kto, apo_zero_unpaired };

std::string_view kto_loss_type_name(KtoLossType type);
// Whether the loss reads the KL estimate (TRL's calculate_KL): every type but apo_zero_unpaired.
bool kto_loss_uses_kl(KtoLossType type);

struct KtoLossConfig {
  KtoLossType loss_type = KtoLossType::kto;
  double beta = 0.1;
  double desirable_weight = 1.0;
  double undesirable_weight = 1.0;
};

// One value per example [N]: log π(y|x) summed over the completion's tokens, for the policy and
// the reference; desirable[i] is the row's label (1: desirable).
struct KtoExamples {
  std::span<const double> policy_logp;
  std::span<const double> ref_logp;
  std::span<const uint8_t> desirable;
};

// TRL's KL estimate of a batch: the mean over its mismatched (prompt_i, completion_j) sequences
// of log π - log π_ref (their summed completion log-probs), clamped at 0. It enters the loss as
// a constant (TRL detaches it): no derivative flows through it.
double kto_kl_estimate(std::span<const double> policy_kl_logp, std::span<const double> ref_kl_logp);

// The batch's sums behind TRL's logged means (each a nansum, as TRL's): "rewards/chosen" is
// rewards_chosen / num_chosen, "logps/chosen" logps_chosen / num_chosen, likewise rejected;
// "rewards/margins" their difference when the batch has both.
struct KtoStats {
  int64_t num_chosen = 0, num_rejected = 0;
  double rewards_chosen = 0.0, rewards_rejected = 0.0;  // Σ β (policy - ref)
  double logps_chosen = 0.0, logps_rejected = 0.0;      // Σ policy logps
};

struct KtoLossResult {
  double loss = 0.0;                // nanmean over the examples of the weighted losses
  std::vector<double> dloss_dlogp;  // [N] d loss / d policy_logp (KL held constant)
  KtoStats stats;
};

// With h = policy - ref and z the KL estimate:
//   kto:                desirable 1 - σ(β (h - z)),  undesirable 1 - σ(β (z - h))
//   apo_zero_unpaired:  desirable 1 - σ(β h),        undesirable σ(β h)
// each desirable loss times desirable_weight, each undesirable one times undesirable_weight;
// loss = their mean over the finite ones (torch.nanmean; NaN when none is).
KtoLossResult kto_loss(const KtoExamples& examples, double kl, const KtoLossConfig& config);

}  // namespace fp8rl
