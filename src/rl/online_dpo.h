// Online DPO's step over one micro-batch of prompts, each with two sampled completions: TRL's
// OnlineDPOTrainer.training_step (TRL main 1.10.dev, f2cd5771,
// trl/experimental/online_dpo/online_dpo_trainer.py). The rewards (reward functions or models,
// TRL's nansum of the weighted functions) lose missing_eos_penalty where a completion has no
// EOS; the better completion of each prompt is the chosen one (the first on a tie); DPO's loss
// (rl/dpo_loss.h) runs on each pair's summed log-probabilities against the reference's. The
// derivative is per token of the policy's log-probabilities, for the trainer's backward.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rl/dpo_loss.h"

namespace fp8rl {

// OnlineDPOConfig's loss keys (the GRPO loop runs online DPO with these set: rl/grpo_config.h).
struct OnlineDpoOptions {
  DpoLossType loss_type = DpoLossType::sigmoid;  // sigmoid or ipo (TRL's two)
  // β per epoch (TRL's list): epoch e uses beta[e], later epochs the last one.
  std::vector<double> beta{0.1};
  std::optional<double> missing_eos_penalty;  // null: no penalty

  // TRL's `beta` property at the trainer's epoch (a fraction: epochs done + progress).
  double beta_at(double epoch) const;
};

// TRL: rewards[~contain_eos_token] -= missing_eos_penalty.
std::vector<double> apply_missing_eos_penalty(std::span<const double> rewards,
                                              std::span<const uint8_t> contain_eos,
                                              std::optional<double> penalty);

// P prompts' pairs in the ragged layout of rl/ragged.h: completions 2i and 2i + 1 (prompt i's)
// own tokens [offsets[c], offsets[c + 1]) of the [N] arrays.
struct OnlineDpoBatch {
  std::span<const int64_t> offsets;      // [2P + 1]
  std::span<const double> logp;          // [N] the policy's, per token (no temperature, as TRL)
  std::span<const double> ref_logp;      // [N] the reference's
  std::span<const double> rewards;       // [2P] after the missing-EOS penalty
  std::span<const uint8_t> contain_eos;  // [2P] the completion holds an EOS token
};

// TRL's logged values of the micro-batch. Per completion c: S_c = sum_t logp, K_c = sum_t (logp
// - ref). Means over the 2P completions: objective/kl (K), objective/entropy (-S),
// objective/non_score_reward (-β K), objective/rlhf_reward (reward - β K), objective/scores
// (reward), val/contain_eos_token; over the pairs: objective/scores_margin (reward_chosen -
// reward_rejected) and DPO's rewards/chosen, rewards/rejected, rewards/accuracies,
// rewards/margins, logps/chosen, logps/rejected; and beta. A pair with a non-finite reward
// (fp8rl's unscorable or non-finite rows, rl/reward_set.h) is left out of the loss and the pair
// means; its rewards out of the reward means.
struct OnlineDpoStats {
  double kl = 0, entropy = 0, non_score_reward = 0, rlhf_reward = 0, scores = 0, scores_margin = 0,
         contain_eos_token = 0, beta = 0;
  DpoStats dpo;
  int64_t pairs = 0;  // the pairs in the loss
  // Every value under TRL's metric name.
  std::vector<std::pair<std::string, double>> named() const;
};

struct OnlineDpoLossResult {
  double loss = 0;  // the pairs' mean loss / gradient_accumulation_steps (0 without a pair)
  std::vector<double> dloss_dlogp;       // [N]
  std::vector<size_t> chosen, rejected;  // [P] completion indices (of the pairs in the loss)
  OnlineDpoStats stats;
};

// Online DPO's loss: TRL's mask = first >= second picks chosen and rejected of each pair; with
// h = sum_t (logp - ref) of each, sigmoid -log σ(β (h_c - h_r)) or ipo (h_c - h_r - 1 / (2β))^2
// (summed log-probabilities, unlike offline DPO's length-normalised IPO), mean over the pairs,
// divided by gradient_accumulation_steps (the accelerator's division of each micro-batch).
OnlineDpoLossResult online_dpo_loss(const OnlineDpoBatch& batch, DpoLossType loss_type, double beta,
                                    int64_t gradient_accumulation_steps = 1);

}  // namespace fp8rl
