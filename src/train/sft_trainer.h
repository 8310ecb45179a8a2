// The SFT loop (fp8rl sft): packed batches of the dataset -> the training pass (train/
// logprob_pass.h) -> mean next-token cross-entropy over the accumulated batches' targets
// (transformers' num_items_in_batch normalisation, so gradient accumulation gives the
// gradient of one big batch) -> the guarded optimizer step (train/train_step.h), with
// metrics, checkpoints and resume in the run directory (train/run_dir.h).
//
// Resume is exact: the epoch order is a function of (seed, epoch), the dropout stream of a
// micro-batch a function of (seed, micro-batch index), and a checkpoint stores the adapter,
// the optimizer state and the data position, so on the CPU a resumed run continues bit for bit.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "core/interrupt.h"
#include "model/adapter.h"
#include "model/model.h"
#include "ops/context.h"
#include "train/logprob_pass.h"
#include "train/sft_config.h"
#include "train/sft_data.h"
#include "train/train_step.h"

namespace fp8rl {

struct SftStepInfo {
  int64_t step = 0, total_steps = 0;
  double loss = 0, grad_norm = 0, lr = 0, seconds = 0, tokens_per_second = 0;
  bool skipped = false;
  bool evaluated = false;  // the step ended with an evaluation (eval_strategy)
  double eval_loss = 0, eval_seconds = 0;
};

class SftTrainer {
 public:
  // The adapter must fit the model (the forward runs it with the model). The run's keys come from
  // `config` (batches, epochs or max_steps, optimizer, schedule, checkpoints, resume, lora_dropout,
  // gradient_checkpointing).
  SftTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
             std::vector<SftExample> examples, const SftConfig& config,
             std::string base_model_name);
  int64_t total_steps() const { return total_steps_; }
  // The memory plan of the largest micro-batch of the run (fp8rl sft --dry-run).
  PassPlan plan();
  // Device bytes of the optimizer's state (allocated with the trainer, before any step).
  size_t optimizer_state_bytes() const;
  // The held-out examples of the evaluations (eval_strategy, eval_on_start).
  void set_eval_data(std::vector<SftExample> eval_examples);
  // transformers' evaluation loss over the eval examples with the adapter as it is: the
  // training loss (the same masks: completion_only_loss, assistant_only_loss) without dropout
  // or gradient, per batch of per_device_eval_batch_size examples in file order, the batches'
  // means weighted by their example counts (transformers' evaluation loop).
  double evaluate_loss();
  // Trains to the end (or from the resumed checkpoint to the end); writes metrics.jsonl,
  // checkpoints and the final adapter into output_dir. `stop` is polled between steps: once it
  // is requested, the last completed step is checkpointed and RunInterrupted thrown.
  void run(const std::function<void(const SftStepInfo&)>& on_step = {},
           const StopRequest& stop = {});

 private:
  struct Position {
    int64_t epoch = 0, batch = 0, micro = 0;  // next batch; micro-batches run so far
    int64_t tokens = 0;                       // tokens trained on so far
  };
  nlohmann::json position_json() const;
  const std::vector<std::vector<size_t>>& epoch_plan(int64_t epoch);

  Context& ctx_;
  const Model& model_;
  LoraAdapter& adapter_;
  std::vector<SftExample> examples_;
  std::vector<SftExample> eval_examples_;
  std::unique_ptr<LogprobPass> pass_object_;  // the run's pass (training and evaluation)
  SftConfig cfg_;
  std::string base_model_name_;
  PassOptions pass_;
  std::unique_ptr<TrainStep> train_step_;
  int64_t batches_per_epoch_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
  int64_t plan_epoch_ = -1;
  std::vector<std::vector<size_t>> plan_;
  Position pos_;
};

}  // namespace fp8rl
