// The keys every fp8rl run shares (sft, grpo, dpo): the subset of transformers'
// TrainingArguments that fp8rl implements, by the same names and with the same defaults and
// meanings, plus fp8rl's own run keys (data, dry_run). TRL's configs derive from
// TrainingArguments and override some defaults; SftConfig, GrpoConfig and DpoConfig do the same.
// Plain values: reading them from YAML or flags is cli/run_config.h's job.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace fp8rl {

// TrainingArguments.optim, the optimizers fp8rl has (train/optimizer.h). The config also
// accepts transformers' spellings adamw_torch and adamw_torch_fused for adamw.
enum class OptimizerKind { adamw, sgd };
std::string_view optimizer_name(OptimizerKind kind);  // "adamw" | "sgd"

// TrainingArguments.eval_strategy: when a run evaluates on eval_dataset.
enum class EvalStrategy { no, steps, epoch };
std::string_view eval_strategy_name(EvalStrategy strategy);  // "no" | "steps" | "epoch"

struct TrainingArguments {
  // fp8rl's run keys.
  std::string data;  // the training dataset, a JSONL file
  // TRL's chat_template_kwargs: extra variables of the chat template when chat rows are
  // rendered (apply_chat_template's keyword arguments), e.g. {"enable_thinking": false} for
  // Qwen3. A mapping (null: none); they override the template's other variables.
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
  // The run directory. transformers' default since 4.50 ("trainer_output" in the working
  // directory), kept so that a TRL config means the same here.
  std::string output_dir = "trainer_output";
  // "" or "false": start fresh; "true": the newest checkpoint in output_dir (transformers'
  // resume_from_checkpoint=True); anything else: a checkpoint directory.
  std::string resume_from_checkpoint;
  // transformers' overwrite_output_dir (removed in transformers 5, whose runs write into any
  // directory): here a run into an output_dir that holds a run (run_dir.h) is an error without
  // it; with it, the old run's files are removed first (the user's other files stay).
  bool overwrite_output_dir = false;
  bool dry_run = false;  // plan and print the memory, train nothing
  // Activation checkpointing per decoder layer (model/tape.h). transformers' default is off;
  // SFTConfig turns it on (TRL >= 0.20), and so does SftConfig here.
  bool gradient_checkpointing = false;
  // TRL's activation_offloading: with checkpointing, each layer's checkpointed input waits in
  // host memory (page-locked on CUDA) between the forward and the backward.
  bool activation_offloading = false;

  double learning_rate = 5e-5;  // AdamW's/SGD's base rate; each config sets TRL's default
  double num_train_epochs = 3.0;
  int64_t max_steps = -1;  // > 0 overrides num_train_epochs; -1: epochs decide
  int64_t per_device_train_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  double max_grad_norm = 1.0;  // global-norm clipping; 0: off
  LrSchedulerType lr_scheduler_type = LrSchedulerType::linear;
  // transformers 5: warmup_steps is a whole number of steps, or a fraction in [0, 1) of the
  // total optimizer steps (rounded up); warmup_ratio (deprecated there) replaces it when given.
  double warmup_steps = 0;
  std::optional<double> warmup_ratio;  // in [0, 1]; null: warmup_steps decides
  double weight_decay = 0.0;           // decoupled (AdamW) / L2 (SGD), as torch.optim
  OptimizerKind optim = OptimizerKind::adamw;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  int64_t seed = 42;
  int64_t save_steps = 500;    // a checkpoint every this many optimizer steps; 0: only at the end
  int64_t logging_steps = 10;  // TRL's override of transformers' 500
  // transformers' report_to: the trackers the per-step metrics also go to, besides
  // metrics.jsonl. fp8rl has one, "tensorboard"; "all" (every installed integration in
  // transformers) means it here; "none" or an empty list: none (the default, as in
  // transformers >= 5). Other trackers (wandb, mlflow, ...) are an error.
  std::vector<std::string> report_to;
  // transformers' logging_dir: where TensorBoard's event files go; "" (None): a new
  // output_dir/runs/<Mon DD_HH-MM-SS>_<hostname> per run, transformers' default.
  std::string logging_dir;

  // Evaluation during training, as transformers' Trainer schedules it: after optimizer step s
  // when eval_strategy is steps and s is a multiple of the interval, or when it is epoch and
  // step s ended an epoch of the training data (or the run: transformers evaluates at the end
  // of a last epoch cut short by max_steps). No evaluation at the end otherwise. The eval_
  // metrics go on step s's line of metrics.jsonl; eval_on_start writes a line of step 0 (a
  // resumed run has it already).
  std::string eval_dataset;  // held-out rows in the training data's format, a JSONL file
  EvalStrategy eval_strategy = EvalStrategy::no;
  // The interval in optimizer steps; below 1, a fraction of the run's steps (rounded up);
  // null: logging_steps (transformers).
  std::optional<double> eval_steps;
  int64_t per_device_eval_batch_size = 8;
  bool eval_on_start = false;  // also evaluate before the first step (transformers' key)

  // Throws fp8rl::Error naming the key, its value and the allowed range.
  void validate() const;
  // transformers 5's TrainingArguments.get_warmup_steps, after __post_init__ has copied a
  // given warmup_ratio into warmup_steps: w = warmup_ratio or warmup_steps, then
  // ceil(w * total_steps) for w < 1, else w steps. (A warmup_ratio of 1 is the whole run here;
  // transformers would read the copied 1.0 as one step.)
  int64_t num_warmup_steps(int64_t total_steps) const;
  // Whether the run evaluates at all (eval_strategy or eval_on_start).
  bool evaluates() const { return eval_strategy != EvalStrategy::no || eval_on_start; }
  // The steps between evaluations of a run of total_steps (eval_strategy steps).
  int64_t eval_interval(int64_t total_steps) const;
  // Whether to evaluate after optimizer step `step` of total_steps; epoch_ended: the step
  // finished an epoch of the training data.
  bool should_evaluate(int64_t step, int64_t total_steps, bool epoch_ended) const;
};

// The optimizer these arguments name, over `num_params` fp32 values: AdamW(adam_beta1,
// adam_beta2, adam_epsilon, weight_decay) or SGD(weight_decay), as transformers builds it,
// its state on ctx's device (that of the masters it steps).
std::unique_ptr<Optimizer> make_optimizer(const TrainingArguments& args, int64_t num_params,
                                          const Context& ctx);
// The guarded update of a run of `total_steps` optimizer steps: learning rate, schedule
// (lr_scheduler_type with its warmup) and clipping.
TrainStepConfig train_step_config(const TrainingArguments& args, int64_t total_steps);

}  // namespace fp8rl
