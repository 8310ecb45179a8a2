// PPO's per-token rewards, GAE advantages and returns, and its clipped policy and value losses
// with their exact derivatives: TRL's experimental PPOTrainer (trl/experimental/ppo,
// ppo_trainer.py: the rollout's steps 3-6 and the micro-batch loss), on fp8rl's ragged layout.
//
// TRL pads every response to response_length T and keeps two masks. For a response of n tokens
// (EOS included, n <= T): its tokens are positions [0, n) (padding_mask), and its value
// positions are [0, L) with L = min(n + 1, T) (padding_mask_p1): value t is the value head at
// the state before token t, so position n, when it exists, is the state after the last token;
// the sequence-level score is added there (TRL's actual_end), at L - 1 in both cases. Past L,
// TRL's rewards and values are zero, which adds nothing to GAE: the ragged form below, L values
// per response with V_L = 0, is the same arithmetic without the padding.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fp8rl {

// PPOConfig.kl_estimator: k1 = logp - ref (TRL's default), k3 = exp(ref - logp) - (ref - logp) - 1.
enum class KlEstimator { k1, k3 };
KlEstimator parse_kl_estimator(std::string_view name);
std::string_view kl_estimator_name(KlEstimator e);

// PPOConfig's keys of the rollout's arithmetic, with TRL's defaults.
struct PpoAdvantageConfig {
  double kl_coef = 0.05;
  KlEstimator kl_estimator = KlEstimator::k1;
  bool whiten_rewards = false;
  double gamma = 1.0;
  double lam = 0.95;
};

// A rollout of B responses: response i owns tokens [token_offsets[i], token_offsets[i + 1])
// and value positions [value_offsets[i], value_offsets[i + 1]), of length n_i and
// L_i = min(n_i + 1, T) (ppo_value_offsets makes them).
struct PpoRollout {
  std::span<const int64_t> token_offsets;  // [B + 1]
  std::span<const int64_t> value_offsets;  // [B + 1]
  std::span<const double> logp;            // [N] the policy's at rollout (temperature-scaled)
  std::span<const double> ref_logp;        // [N] the reference's
  std::span<const double> values;          // [V] the value head's at rollout
  std::span<const double> scores;          // [B] after missing_eos_penalty
};

// Value offsets for responses of `lengths` tokens under response_length `max_length`.
std::vector<int64_t> ppo_value_offsets(std::span<const int64_t> lengths, int64_t max_length);

struct PpoAdvantages {
  std::vector<double> kl;          // [N] the estimator per token
  std::vector<double> rewards;     // [V] -kl_coef kl (0 at position n), + score at L - 1;
                                   //     whitened without the mean shift if whiten_rewards
  std::vector<double> advantages;  // [N] GAE, whitened over the batch's tokens
  std::vector<double> returns;     // [V] GAE + values, before whitening
  // TRL's objective/ metrics: means over the responses of their sums.
  double mean_kl = 0, mean_non_score_reward = 0, mean_score = 0;
  double rlhf_reward() const { return mean_non_score_reward + mean_score; }
};

// TRL's masked_whiten over the entries of `mask` (all when empty): (x - mean) / sqrt(var + 1e-8)
// with the unbiased (Bessel) variance, + mean again unless shift_mean. Fewer than two entries
// is an error, as TRL's division by zero.
std::vector<double> masked_whiten(std::span<const double> x, std::span<const uint8_t> mask,
                                  bool shift_mean);

PpoAdvantages ppo_advantages(const PpoRollout& r, const PpoAdvantageConfig& cfg);

// One micro-batch's policy term: mean over its tokens of max(-A ratio, -A clip(ratio, 1 -
// cliprange, 1 + cliprange)), ratio = exp(logp - old_logp), and its derivative per token.
struct PpoPolicyLoss {
  double loss = 0;
  std::vector<double> dloss_dlogp;  // [N]
  double clipfrac = 0;              // the fraction of tokens where the clipped term is larger
  double approxkl = 0;              // 0.5 mean((logp - old_logp)^2)
  double ratio_mean = 0;
};
PpoPolicyLoss ppo_policy_loss(std::span<const double> logp, std::span<const double> old_logp,
                              std::span<const double> advantages, double cliprange);

// One micro-batch's value term: 0.5 mean over its value positions of max((v - R)^2,
// (clip(v, v_old - c, v_old + c) - R)^2), and its derivative per position. The trainer's loss is
// policy + vf_coef * value.
struct PpoValueLoss {
  double loss = 0;
  std::vector<double> dloss_dvalue;  // [V]
  double clipfrac = 0;
};
PpoValueLoss ppo_value_loss(std::span<const double> values, std::span<const double> old_values,
                            std::span<const double> returns, double cliprange_value);

}  // namespace fp8rl
