// The GRPO family's loss over one micro-batch of completions, with its exact derivative with
// respect to the current policy's per-token log-probabilities: TRL's GRPOTrainer._compute_loss
// (TRL main 1.10.dev, f2cd5771). The model backward turns dloss_dlogp into parameter
// gradients.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace fp8rl {

// GRPOConfig.loss_type (TRL's default is dapo). vespo is not implemented.
// rloo: TRL's RLOOTrainer loss (not a GRPOConfig loss_type).
enum class GrpoLossType { grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, rloo };
// GRPOConfig.importance_sampling_level: token (default) or sequence (GSPO).
enum class ImportanceSamplingLevel { token, sequence };

GrpoLossType parse_grpo_loss_type(std::string_view name);
std::string_view grpo_loss_type_name(GrpoLossType type);
ImportanceSamplingLevel parse_importance_sampling_level(std::string_view name);
std::string_view importance_sampling_level_name(ImportanceSamplingLevel level);

// GRPOConfig's knobs of the loss, with TRL's defaults, plus the two normalisers the trainer
// loop knows (TRL reads them from the accelerator and the generation batch).
struct GrpoLossConfig {
  GrpoLossType loss_type = GrpoLossType::dapo;
  ImportanceSamplingLevel importance_sampling_level = ImportanceSamplingLevel::token;
  double epsilon = 0.2;                 // ε_low: the ratio's lower clip is 1 - epsilon
  std::optional<double> epsilon_high;   // None = epsilon; for cispo an absolute cap (TRL: 5.0)
  double beta = 0.0;                    // k3 KL coefficient; 0 = no reference logprobs
  std::optional<double> delta;          // two-sided clip: caps the unclipped ratio (INTELLECT-2)
  double sapo_temperature_neg = 1.05;   // sapo's gate temperature where A <= 0
  double sapo_temperature_pos = 1.0;    // and where A > 0
  int64_t max_completion_length = 512;  // dr_grpo's constant L_max
  // grpo, bnpo, dr_grpo divide by the micro-batches of the current optimizer step (TRL's
  // current_gradient_accumulation_steps; 1 in evaluation).
  int64_t gradient_accumulation_steps = 1;
  // dapo, cispo: the active-token count of the whole generation batch across ranks (TRL's
  // num_items_in_batch, the sum of the loss mask before slicing into micro-batches), and the
  // rank count it is divided by. Required (>= 0) for those two; -1 = not given.
  int64_t num_items_in_batch = -1;
  int64_t num_processes = 1;

  double epsilon_low() const { return epsilon; }
  double epsilon_high_value() const { return epsilon_high.value_or(epsilon); }
};

// One micro-batch of B completions in the ragged layout of rl/ragged.h: completion i owns
// tokens [offsets[i], offsets[i + 1]) of the [N] arrays. Values of inactive tokens are not read.
struct GrpoBatch {
  std::span<const int64_t> offsets;  // [B + 1]
  std::span<const double> logp;      // [N] current policy π_θ (temperature-scaled)
  // [N] the policy that sampled (θ_old, recomputed by the trainer at rollout). Empty = on-policy
  // (num_iterations == 1 and steps_per_generation <= gradient_accumulation_steps, no rollout
  // correction): TRL's logp.detach(), i.e. ratio 1 whose derivative is still 1.
  std::span<const double> old_logp;
  std::span<const double> ref_logp;  // [N] reference policy; read only when beta != 0
  // [N] rollout correction weights (compute_rollout_correction); empty = correction off.
  std::span<const double> is_weight;
  std::span<const double> advantages;  // [B] one per completion (compute_advantages)
  // [N] loss mask, 1 = active. mask_truncated_completions is the caller's: it zeroes the whole
  // mask of a truncated completion before counting num_items_in_batch, as TRL does at
  // generation time (the completion still counts in its group's reward statistics and, for
  // grpo and dr_grpo, in the micro-batch's B).
  std::span<const uint8_t> mask;
  // [N] top_entropy_quantile's high-entropy tokens (top_entropy_mask), 1 = in the policy term;
  // empty = every token. It gates the policy term only: the KL term, the normalisers and the
  // metrics still read `mask`, as in TRL.
  std::span<const uint8_t> entropy_mask = {};
};

// TRL's get_high_entropy_mask over one micro-batch: the active tokens whose entropy is at
// least the (1 - quantile) quantile of the active tokens' entropies (torch.quantile's linear
// interpolation). quantile 1 keeps every active token, 0 only those at the maximum; no
// active token gives an all-zero mask.
std::vector<uint8_t> top_entropy_mask(std::span<const double> entropies,
                                      std::span<const uint8_t> mask, double quantile);

// TRL's logged values for this micro-batch under their keys (TRL appends one value per
// micro-batch and averages them over the logging window). Token-level ratios are means over
// active tokens; sequence-level ones are means over the B completions, as TRL's
// global_masked_mean does for (B, 1) tensors.
struct GrpoLossStats {
  double policy_loss = 0.0;  // "policy_loss": the loss before the gradient-accumulation division
  std::optional<double> kl;  // "kl": masked mean of the per-token k3; only when beta != 0
  // grpo, bnpo, dr_grpo, dapo, luspo ("clip_ratio/..."); NaN for cispo and sapo (TRL logs
  // none for them). r is the ratio after delta.
  // low_min / high_max skip completions without active tokens (NaN if none has any).
  double clip_ratio_low_mean = 0.0;     // r < 1 - ε_low and A < 0
  double clip_ratio_high_mean = 0.0;    // r > 1 + ε_high and A > 0
  double clip_ratio_region_mean = 0.0;  // either
  double clip_ratio_low_min = 0.0;      // min over completions of their low-clipped fraction
  double clip_ratio_high_max = 0.0;     // max over completions of their high-clipped fraction
  double cispo_clip_ratio = 0.0;  // "cispo_clip_ratio": r > ε_high and A > 0; NaN but for cispo
  int64_t num_active_tokens = 0;
};

struct GrpoLossResult {
  double loss = 0.0;                // what TRL's _compute_loss returns (backward() is called on it)
  std::vector<double> dloss_dlogp;  // [N] d loss / d logp_t; 0 on inactive tokens
  GrpoLossStats stats;
};

// With r the ratio (token: w_t = exp(logp_t - old_t); sequence: s_i = exp(sum_t m_t (logp_t -
// old_t) / max(1, M_i)), the geometric mean, differentiated through every token), A_i the
// advantage, rho the rollout weight, m the mask and M_i = sum_t m_t:
//
//   grpo/bnpo/dr_grpo/dapo: L = -min(r' A, clamp(r, 1 - ε_low, 1 + ε_high) A),
//                           r' = delta ? min(r, delta) : r
//   luspo: as grpo's L (GSPO's sequence ratio required)
//   rloo (TRL's RLOOTrainer): as grpo's L with q_i = exp(sum_t m_t (logp_t - old_t)), the ratio
//          of the whole completion's probabilities, whatever importance_sampling_level; no
//          delta, beta (RLOO's KL is in the reward), entropy_mask or rollout weights
//   cispo:                  L = -sg[min(r, ε_high)] A logp_t
//   sapo:                   L = -(4 / τ) σ(τ (r - 1)) A, τ = sapo_temperature_pos if A > 0
//                           else sapo_temperature_neg (a soft gate instead of the clip)
//   then L *= entropy_mask;  L *= rho;  L += beta (exp(ref - logp) - (ref - logp) - 1)
//   grpo, sapo: loss = mean_i(sum_t m L / max(1, M_i)) / GA
//   rloo:    loss = mean_i(L_i) / GA (a completion with no active token counts, ratio 1)
//   bnpo:    loss = sum m L / max(1, sum m) / GA
//   dr_grpo: loss = sum m L / (B max_completion_length) / GA
//   dapo, cispo: loss = sum m L / (max(1, num_items_in_batch) / num_processes)
//   luspo:   loss = mean_i(M_i L_i) / GA: each completion weighted by its length. TRL's mean
//            runs over the padded (B, T) grid once any per-token factor enters, so luspo takes
//            no beta, no entropy_mask and only rollout weights constant over a completion.
//
// The derivative follows PyTorch's autograd of the same expression: clamp passes the gradient
// on its closed interval and blocks it outside (the clip's zero-gradient regions), minimum
// splits it evenly on ties, cispo's clipped ratio is a constant.
GrpoLossResult grpo_loss(const GrpoBatch& batch, const GrpoLossConfig& config);

}  // namespace fp8rl
