// Importance-sampling correction for the rollout engine vs trainer mismatch: TRL's
// vllm_importance_sampling_correction (truncated / masked IS, "TIS" / "MIS"), computed once per
// generation batch in GRPOTrainer._generate_and_score_completions and applied to the loss as a
// constant per-token weight.
//
// It is separate from grpo_loss() because TRL computes it at generation time from the trainer's
// logprobs of the rollout (old_logp, θ_old) and the engine's, then reuses the same weights for
// every one of the num_iterations passes over the batch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace fp8rl {

// GRPOConfig.vllm_importance_sampling_mode, TRL's names.
enum class RolloutCorrectionMode { token_truncate, token_mask, sequence_truncate, sequence_mask };

RolloutCorrectionMode parse_rollout_correction_mode(std::string_view name);
std::string_view rollout_correction_mode_name(RolloutCorrectionMode mode);

// TRL's defaults (>= 0.26): sequence_mask, C_max = vllm_importance_sampling_clip_max = 3.0,
// C_min = vllm_importance_sampling_clip_min = None. vllm_importance_sampling_cap is the
// deprecated alias of clip_max. The on/off switch (vllm_importance_sampling_correction, default
// true) is the caller's: off means no weights at all.
struct RolloutCorrectionConfig {
  RolloutCorrectionMode mode = RolloutCorrectionMode::sequence_mask;
  std::optional<double> clip_min;
  std::optional<double> clip_max = 3.0;
};

// TRL's logged values (keys sampling/sampling_logp_difference/{mean,max} and
// sampling/importance_sampling_ratio/{min,mean,max}) and NeMo RL's token-level probability
// error (sampling/token_prob_error/mean); 0 where there is nothing to reduce, as TRL does.
struct RolloutCorrectionStats {
  double logp_difference_mean = 0.0;  // |old_logp - engine_logp| over active tokens
  double logp_difference_max = 0.0;
  // exp(|old_logp - engine_logp|) over active tokens: 1 when the two agree, and a ratio of
  // probabilities (>= 1) that reads the same whichever side is larger.
  double token_prob_error_mean = 0.0;
  double ratio_min = 0.0;  // over active tokens (token_*) or over all sequences (sequence_*)
  double ratio_mean = 0.0;
  double ratio_max = 0.0;
};

struct RolloutCorrection {
  std::vector<double> weight;  // [N] per token; a sequence mode repeats its sequence's weight
  RolloutCorrectionStats stats;
};

// Completion i's tokens are [offsets[i], offsets[i + 1]) of the [N] arrays (offsets [B + 1],
// offsets[0] = 0, non-decreasing). mask [N] is the loss mask (1 = active; after
// mask_truncated_completions and any tool mask).
//
//   d_t = (old_logp_t - engine_logp_t) * m_t
//   token_*:    rho_t = exp(d_t)                 sequence_*: rho_i = exp(sum_t d_t)  (a product
//                                                of token ratios, not GSPO's geometric mean)
//   *_truncate: rho = clamp(rho, C_min, C_max)   (TIS; at least one bound is required)
//   *_mask:     rho = 0 where rho < C_min or rho > C_max (MIS; a missing bound is -inf / +inf)
//
// Masked tokens get the weight the formula gives them (exp(0) = 1 for token modes); the loss
// ignores them. The weights are constants: no gradient flows through them.
RolloutCorrection compute_rollout_correction(std::span<const int64_t> offsets,
                                             std::span<const double> old_logp,
                                             std::span<const double> engine_logp,
                                             std::span<const uint8_t> mask,
                                             const RolloutCorrectionConfig& config);

}  // namespace fp8rl
