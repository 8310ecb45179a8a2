// The DPO loop (fp8rl dpo): TRL's DPOTrainer with LoRA, the reference being the same base
// without the adapter (no second model). Per micro-batch of pairs, the prompt + chosen and
// prompt + rejected sequences are packed into one pass; the summed completion log-probs of
// the policy (with the adapter) and of the reference (the forward without it, computed once
// per pair and kept: the base is frozen) give the loss of rl/dpo_loss.h, whose derivative with
// respect to a summed log-prob is the derivative with respect to each of its tokens.
// Checkpoints, metrics and resume as the SFT loop.
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
#include "rl/dpo_config.h"
#include "rl/preference_data.h"
#include "train/logprob_pass.h"

namespace fp8rl {

struct DpoStepInfo {
  int64_t step = 0, total_steps = 0;
  double loss = 0, accuracy = 0, margin = 0, seconds = 0;
  bool evaluated = false;  // the step ended with an evaluation (eval_strategy)
  double eval_loss = 0, eval_accuracy = 0;
};

class DpoTrainer {
 public:
  DpoTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
             std::vector<PreferencePair> pairs, const DpoConfig& config,
             std::string base_model_name);
  ~DpoTrainer();
  int64_t total_steps() const;
  // The memory plan of the run's largest batch (the per_device_train_batch_size pairs with the
  // most tokens; fp8rl dpo --dry-run), by the pass's dry run.
  PassPlan plan();
  // Device bytes of the optimizer's state (allocated with the trainer, before any step).
  size_t optimizer_state_bytes() const;
  // Device bytes of the frozen starting adapter the reference runs with (0: the base model).
  size_t reference_adapter_bytes() const;
  // The held-out pairs of the evaluations (eval_strategy, eval_on_start). An evaluation runs
  // the loss over them with the adapter as it is, without dropout or gradient, per batch of
  // per_device_eval_batch_size pairs in file order, and returns TRL's metrics under eval_
  // names: eval_loss (the batches' losses weighted by their pair counts, transformers'
  // evaluation loop), eval_rewards/chosen, /rejected, /accuracies, /margins, eval_logps/chosen,
  // /rejected (each the mean of its batches' values, TRL's log), and eval_runtime (seconds).
  void set_eval_data(std::vector<PreferencePair> eval_pairs);
  nlohmann::json evaluate();
  // Trains to the end; `stop` is polled between steps: once it is requested, the last completed
  // step is checkpointed and RunInterrupted thrown.
  void run(const std::function<void(const DpoStepInfo&)>& on_step = {},
           const StopRequest& stop = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8rl
