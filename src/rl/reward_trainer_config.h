// `fp8rl reward`'s configuration: TRL's RewardConfig keys fp8rl implements, by TRL's names,
// meanings and defaults (trl/trainer/reward_config.py), on top of the shared TrainingArguments
// and model/LoRA keys.
#pragma once

#include <cstdint>
#include <optional>

#include "train/model_arguments.h"
#include "train/training_arguments.h"

namespace fp8rl {

struct RewardConfig : TrainingArguments, ModelArguments {
  RewardConfig() {  // RewardConfig's overrides
    learning_rate = 1e-4;
    disable_dropout = true;
    sequence_classification = true;
  }

  int64_t max_length = 1024;  // tokens of prompt + completion
  // TRL drops longer rows; fp8rl makes a row over max_length an error unless this is set
  // (then its first max_length tokens are kept).
  bool truncation = false;
  // Adds center * mean((r_chosen + r_rejected)^2) to the loss, pulling the scores toward zero
  // mean (TRL's None: off). Finite and >= 0.
  std::optional<double> center_rewards_coefficient;

  // Throws fp8rl::Error naming the key, its value and the allowed range.
  void validate() const;
};

}  // namespace fp8rl
