// The KTO loop (fp8rl kto): TRL's KTOTrainer with LoRA, the reference being the base without
// the adapter (or the frozen adapter the run starts from). The examples are read in file order
// (TRL's sequential sampling, which its KL estimate needs): each micro-batch packs its
// prompt + completion sequences and, for the KL estimate, each prompt with the completion of
// the previous example of its batch (TRL's rotation) into one pass; the reference's summed
// log-probs of both are computed once per example and kept (the base is frozen). The loss of
// rl/kto_loss.h has its derivative with respect to each summed log-prob, which is the
// derivative with respect to each of its tokens; the KL sequences get none (TRL detaches the
// estimate). Checkpoints, metrics and resume as the DPO loop.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/interrupt.h"
#include "model/adapter.h"
#include "model/model.h"
#include "ops/context.h"
#include "rl/kto_config.h"
#include "rl/preference_data.h"
#include "train/logprob_pass.h"

namespace fp8rl {

struct KtoStepInfo {
  int64_t step = 0, total_steps = 0;
  double loss = 0, kl = 0, seconds = 0;
  bool evaluated = false;  // the step ended with an evaluation (eval_strategy)
  double eval_loss = 0;
};

// The example whose completion the mismatched KL sequence of example i (of n) takes: the
// previous one of its block of batch_size consecutive examples, the block's last for its first
// (TRL's rotation of each batch's completions by one; the same blocks for the eval set).
int64_t kto_kl_partner(int64_t i, int64_t n, int64_t batch_size);

// Tokens of example i's sequences as the trainer packs them: prompt + completion and prompt +
// its KL partner's completion, each cut at max_length.
int64_t kto_sequence_length(const UnpairedExample& example, const std::vector<int32_t>& completion,
                            int64_t max_length);

class KtoTrainer {
 public:
  KtoTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
             std::vector<UnpairedExample> examples, const KtoConfig& config,
             std::string base_model_name);
  ~KtoTrainer();
  int64_t total_steps() const;
  // The memory plan of the run's largest batch (fp8rl kto --dry-run), by the pass's dry run.
  PassPlan plan();
  size_t optimizer_state_bytes() const;
  // Device bytes of the frozen starting adapter the reference runs with (0: the base model).
  size_t reference_adapter_bytes() const;
  // The held-out examples of the evaluations (eval_strategy, eval_on_start), run in file order
  // per batch of per_device_eval_batch_size without dropout or gradient. TRL's metrics under
  // eval_ names: eval_loss (the batches' losses weighted by their sizes, transformers'
  // evaluation loop), eval_kl, eval_entropy, eval_rewards/chosen, /rejected, /margins,
  // eval_logps/chosen, /rejected (each the mean of the batches' values where the batch has
  // them, TRL's log), eval_num_tokens (the training tokens so far) and eval_runtime.
  void set_eval_data(std::vector<UnpairedExample> eval_examples);
  nlohmann::json evaluate();
  // Trains to the end; `stop` is polled between steps: once it is requested, the last completed
  // step is checkpointed and RunInterrupted thrown.
  void run(const std::function<void(const KtoStepInfo&)>& on_step = {},
           const StopRequest& stop = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8rl
