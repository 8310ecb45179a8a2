// `fp8rl rloo`'s configuration: TRL's RLOOConfig, which is GRPOConfig's keys with RLOO's
// defaults (beta 0.05, num_generations 2), normalize_advantages and reward_clip_range, run by
// the GRPO trainer with the leave-one-out baseline, the KL in the reward and TRL's RLOO loss.
#pragma once

#include "rl/grpo_config.h"

namespace fp8rl {

struct RlooConfig : GrpoConfig {
  RlooConfig() {  // RLOOConfig's defaults where they differ from GRPOConfig's
    beta = 0.05;
    num_generations = 2;
    advantage_estimator = AdvantageEstimator::rloo;
    loss_type = GrpoLossType::rloo;
    // TRL's RLOOTrainer has no engine-vs-trainer importance-sampling correction.
    vllm_importance_sampling_correction = false;
  }

  // GrpoConfig's checks, and that the run stays TRL's RLOO (the leave-one-out baseline and
  // its loss; other combinations are fp8rl grpo's).
  void validate() const;
};

}  // namespace fp8rl
