// The GRPO loop (fp8rl grpo): TRL's GRPOTrainer over one model in one memory. Each generation
// round, the engine (engine/engine.h) samples num_generations completions of a batch of
// prompts from the very model and adapter tensors the trainer updates; the rewards score
// them; advantages are normalised per group; then the trainer (train/logprob_pass.h)
// recomputes the completions' log-probabilities and takes steps_per_generation x
// num_iterations micro-steps of the GRPO-family loss (rl/grpo_loss.h) over slices of the
// round, an optimizer step every gradient_accumulation_steps of them. After each step the
// adapter's masters have changed in place: the next round samples from them with no copy.
//
// The engine's logprobs and the trainer's recomputation of them (both under the
// temperature-scaled full-vocabulary distribution) are compared every round (the mismatch
// metrics) and the difference corrected by TRL's truncated importance sampling
// (vllm_importance_sampling_correction, rl/rollout_correction.h).
//
// Resume is exact on the CPU: prompts are drawn in a (seed, epoch) order, every sampling
// stream is keyed by (seed, round, prompt), and a checkpoint taken inside a round stores the
// round itself.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/interrupt.h"
#include "model/adapter.h"
#include "model/model.h"
#include "ops/context.h"
#include "rl/grpo_config.h"
#include "rl/prompt_data.h"
#include "rl/reward_model.h"
#include "rl/reward_set.h"
#include "rl/rollout_memory_plan.h"
#include "train/logprob_pass.h"

namespace fp8rl {

namespace tok {
class Tokenizer;
}
struct ChatTemplateConfig;

struct GrpoStepInfo {
  int64_t step = 0, total_steps = 0;
  double reward = 0, reward_std = 0, kl = 0, loss = 0;
  double seconds = 0, tokens_per_second = 0;
  bool has_kl = false;
  bool evaluated = false;  // the step ended with an evaluation (eval_strategy)
  double eval_reward = 0, eval_seconds = 0;
};

// The order of a generation round's `n` completions before it is cut into
// steps_per_generation micro-batches: TRL shuffles the generation batch (whole, across groups)
// so that a micro-batch mixes prompts. A Fisher-Yates permutation drawn from the counter-based
// stream of (seed, round): the same seed replays it, a resumed run included.
std::vector<size_t> generation_batch_order(uint64_t seed, int64_t round, size_t n);

class GrpoTrainer {
 public:
  // The adapter must fit the model (LoraAdapter::check_fits): the rollouts and the policy's
  // logprobs run the model with it, the reference's without. The tokenizer decodes completions for
  // the rewards (null: no text, for rewards of token ids only); eos_ids end generation.
  GrpoTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
              const tok::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
              std::vector<PromptExample> prompts, const GrpoConfig& config, RewardSet rewards,
              std::string base_model_name);
  ~GrpoTrainer();
  int64_t total_steps() const;
  RolloutMemoryPlan memory_plan() const;
  // The held-out prompts of the evaluations (eval_strategy, eval_on_start): each evaluation
  // samples num_generations_eval completions of every one with the adapter as it is, scores
  // them with the run's reward functions and logs TRL's generation metrics under eval_ names
  // (eval_reward, eval_rewards/<name>/mean, eval_completions/mean_length, ...) on the step's
  // line. It trains on none of them and leaves the run's sampling streams and data order
  // alone: a run trains the same adapter with or without evaluations. Unlike TRL's, it logs no
  // eval_loss, eval_entropy, eval_kl or eval_clip_ratio: those take a trainer forward over the
  // eval completions, which the reward metrics do not need.
  void set_eval_data(std::vector<PromptExample> eval_prompts);
  // The model's chat template (null: none), which turns an environment's messages into the
  // tokens of an episode (config.environment; rl/conversation_tokens.h). It must outlive the
  // trainer.
  void set_chat_template(const ChatTemplateConfig* chat);
  // Trains max_steps optimizer steps (from the checkpoint in config.resume_from_checkpoint, if
  // set); writes metrics.jsonl, samples.jsonl, checkpoints and the final adapter into
  // output_dir. `stop` is polled between steps: once it is requested, the last completed step
  // is checkpointed (its round with it) and RunInterrupted thrown.
  void run(const std::function<void(const GrpoStepInfo&)>& on_step = {},
           const StopRequest& stop = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8rl
