// The PPO loop (fp8rl ppo): TRL's experimental PPOTrainer over one model in one memory. Each
// update samples one response for each of batch_size prompts from the engine with the policy
// adapter as it is, scores them (the rewards' weighted sum, missing_eos_penalty), computes the
// policy's and the reference's logprobs and the value model's values, then per-token rewards
// (KL penalty, the score at the end), GAE advantages and returns (rl/ppo_loss.h); then
// num_ppo_epochs passes over the batch in num_mini_batches shuffled mini-batches, each an
// optimizer step of pg_loss + vf_coef * vf_loss accumulated over its micro-batches of
// per_device_train_batch_size.
//
// One frozen base: the policy (its adapter), the reference (no adapter, or the starting one), the
// value model (a second adapter with a score head, rl/value_model.h) and reward models over the
// policy's directory all run the same Model. One optimizer steps policy and value together (TRL's
// PolicyAndValueWrapper): its parameters are the two adapters' masters side by side, so gradient
// clipping takes the norm over both.
//
// Deviations from TRL: an optimizer step per mini-batch (TRL's accelerate counts accumulation
// across mini-batches when num_mini_batches > 1) and the learning-rate schedule per optimizer
// step (TRL's per update: equal for a constant schedule); no LoRA dropout (TRL disables dropout
// in every PPO model). A step of metrics.jsonl and a checkpoint are an update, as TRL's
// global_step; checkpoints are taken between updates, so a resumed run replays exactly.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/interrupt.h"
#include "model/adapter.h"
#include "model/model.h"
#include "ops/context.h"
#include "rl/ppo_config.h"
#include "rl/prompt_data.h"
#include "rl/reward_model.h"
#include "rl/reward_set.h"
#include "rl/rollout_memory_plan.h"
#include "train/logprob_pass.h"

namespace fp8rl {

namespace tok {
class Tokenizer;
}

struct PpoStepInfo {
  int64_t step = 0, total_steps = 0;
  double score = 0, kl = 0, policy_loss = 0, value_loss = 0, seconds = 0;
};

// checkpoint-N/ holds the policy adapter and trainer_state.safetensors as every trainer's, and
// the value adapter (a PEFT SEQ_CLS adapter with its head) in this subdirectory; so does the run
// directory at the end.
inline constexpr const char* kValueAdapterDir = "value";

class PpoTrainer {
 public:
  // `policy` and `value` (make_value_adapter) must fit the model; both are trained in place.
  PpoTrainer(Context& ctx, const Model& model, LoraAdapter& policy, LoraAdapter& value,
             const tok::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
             std::vector<PromptExample> prompts, const PpoConfig& config, RewardSet rewards,
             std::string base_model_name);
  ~PpoTrainer();
  int64_t total_steps() const;  // updates
  // The run's memory: its pass the largest (policy or value) over a micro-batch or a rollout
  // chunk of the longest prompt and a full response.
  RolloutMemoryPlan memory_plan() const;
  // Trains total_steps() updates (from config.resume_from_checkpoint, if set); writes
  // metrics.jsonl, checkpoints and the final adapters into output_dir. `stop` is polled between
  // updates: the last completed one is checkpointed and RunInterrupted thrown.
  void run(const std::function<void(const PpoStepInfo&)>& on_step = {},
           const StopRequest& stop = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8rl
