// `fp8rl online-dpo`'s configuration: TRL's OnlineDPOConfig keys and defaults
// (trl/experimental/online_dpo/online_dpo_config.py), run by the GRPO loop (rl/grpo_trainer.h)
// with two completions per prompt and TRL's online DPO loss (rl/online_dpo.h) in place of the
// GRPO family's. The sampling, engine, reward and training keys are GrpoConfig's; the loss keys
// are online DPO's own, copied into GrpoConfig::online_dpo by trainer_config().
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "rl/dpo_loss.h"
#include "rl/grpo_config.h"

namespace fp8rl {

struct OnlineDpoConfig : GrpoConfig {
  OnlineDpoConfig() {  // OnlineDPOConfig's defaults where they differ from GRPOConfig's
    learning_rate = 5e-7;
    disable_dropout = true;
    temperature = 0.9;
    max_completion_length = 64;  // max_new_tokens
    num_generations = 2;
    max_prompt_length.reset();  // max_length bounds prompt + completion instead
    // TRL's OnlineDPOTrainer has no engine-vs-trainer importance-sampling correction.
    vllm_importance_sampling_correction = false;
  }

  // beta: per epoch, the last for the later epochs (a single number is a list of one).
  std::vector<double> dpo_beta{0.1};
  DpoLossType dpo_loss_type = DpoLossType::sigmoid;  // loss_type: sigmoid or ipo
  std::optional<double> missing_eos_penalty;  // subtracted from a reward without EOS; null: none
  // Tokens of prompt + completion. TRL cuts a longer prompt's first tokens silently; here a
  // prompt over max_length - max_new_tokens is an error unless `truncation` keeps its last ones.
  int64_t max_length = 512;

  // The ranges of the keys above, then trainer_config()'s GrpoConfig checks. Throws
  // fp8rl::Error naming the key.
  void validate() const;
  // What the GRPO loop runs: these keys with online_dpo set, per_device_train_batch_size (TRL:
  // prompts per micro-batch) as two completions per prompt, one completion per eval prompt,
  // and max_prompt_length = max_length - max_new_tokens.
  GrpoConfig trainer_config() const;
};

}  // namespace fp8rl
