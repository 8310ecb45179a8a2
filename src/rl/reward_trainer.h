// The reward-model loop (fp8rl reward): TRL's RewardTrainer with LoRA and the score head
// (PEFT's SEQ_CLS: the head is trained as modules_to_save) over the frozen (FP8) base. Per
// micro-batch of pairs, the chosen and rejected sequences are packed into one scoring pass
// (train/logprob_pass.h, PassOptions::pooled_rows): the final normed hidden state at each
// sequence's last non-pad token times the head is its score; rl/reward_loss.h's
// Bradley-Terry loss gives each score's derivative, which reaches the head directly and the
// LoRA matrices through the pooled states' backward. Checkpoints, metrics and resume as the
// DPO loop.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/interrupt.h"
#include "model/adapter.h"
#include "model/model.h"
#include "ops/context.h"
#include "rl/reward_data.h"
#include "rl/reward_trainer_config.h"
#include "train/logprob_pass.h"

namespace fp8rl {

struct RewardStepInfo {
  int64_t step = 0, total_steps = 0;
  double loss = 0, accuracy = 0, margin = 0, seconds = 0;
  bool evaluated = false;
  double eval_loss = 0, eval_accuracy = 0;
};

class RewardTrainer {
 public:
  // `adapter` must carry a score head (LoraConfig::sequence_classification).
  RewardTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
                std::vector<RewardPair> pairs, const RewardConfig& config,
                std::string base_model_name);
  ~RewardTrainer();
  int64_t total_steps() const;
  PassPlan plan();  // the largest batch's pass (fp8rl reward --dry-run)
  size_t optimizer_state_bytes() const;
  // The held-out pairs: evaluate() scores them per_device_eval_batch_size pairs at a time with
  // the adapter as it is and returns eval_loss (weighted by pairs), eval_accuracy,
  // eval_margin, eval_min_reward, eval_mean_reward, eval_max_reward (TRL's names under eval_),
  // eval_rewards/accuracies (the fraction of pairs whose chosen scores higher) and eval_runtime.
  void set_eval_data(std::vector<RewardPair> eval_pairs);
  nlohmann::json evaluate();
  // The scores [2P] (chosen, rejected of each pair) of these pairs with the adapter as it is.
  std::vector<double> scores(std::span<const RewardPair> pairs);
  // The loss of these pairs (one micro-batch, no dropout) with grads (f32 [P] on the context's
  // device, like the masters) += its gradient: the head's and, through the backward, the LoRA
  // matrices'. For tests.
  double loss_and_gradient(std::span<const RewardPair> pairs, const TensorView& grads);
  void run(const std::function<void(const RewardStepInfo&)>& on_step = {},
           const StopRequest& stop = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8rl
