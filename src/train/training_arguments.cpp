#include "train/training_arguments.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/tensor.h"
#include "formats/json_read.h"
#include "train/config_checks.h"
#include "train/step_metrics.h"

namespace fp8rl {

std::string_view optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adamw:
      return "adamw";
    case OptimizerKind::sgd:
      return "sgd";
  }
  RAISE("unknown OptimizerKind {}", int(kind));
}

std::string_view eval_strategy_name(EvalStrategy strategy) {
  switch (strategy) {
    case EvalStrategy::no:
      return "no";
    case EvalStrategy::steps:
      return "steps";
    case EvalStrategy::epoch:
      return "epoch";
  }
  RAISE("unknown EvalStrategy {}", int(strategy));
}

void TrainingArguments::validate() const {
  namespace c = config_checks;
  c::positive("learning_rate", learning_rate);
  c::positive("num_train_epochs", num_train_epochs);
  CHECK(max_steps == -1 || max_steps >= 1,
        "max_steps = {} is out of range (must be >= 1, or -1 for num_train_epochs)", max_steps);
  c::at_least<int64_t>("per_device_train_batch_size", per_device_train_batch_size, 1);
  c::at_least<int64_t>("gradient_accumulation_steps", gradient_accumulation_steps, 1);
  c::at_least("max_grad_norm", max_grad_norm, 0.0);
  c::at_least("warmup_steps", warmup_steps, 0.0);
  CHECK(warmup_steps < 1 || warmup_steps == std::floor(warmup_steps),
        "warmup_steps = {} is neither a whole number of steps nor a fraction in [0, 1) of them",
        warmup_steps);
  if (warmup_ratio) c::in_closed("warmup_ratio", *warmup_ratio, 0.0, 1.0);
  c::at_least("weight_decay", weight_decay, 0.0);
  CHECK(!activation_offloading || gradient_checkpointing,
        "activation_offloading needs gradient_checkpointing (the checkpointed layer inputs are "
        "what is offloaded)");
  // torch.optim.AdamW's own checks.
  c::in_half_open("adam_beta1", adam_beta1, 0.0, 1.0);
  c::in_half_open("adam_beta2", adam_beta2, 0.0, 1.0);
  c::at_least("adam_epsilon", adam_epsilon, 0.0);
  c::at_least<int64_t>("seed", seed, 0);
  c::at_least<int64_t>("save_steps", save_steps, 0);
  c::at_least<int64_t>("logging_steps", logging_steps, 1);
  check_report_to(report_to);
  CHECK(chat_template_kwargs.is_object() || chat_template_kwargs.is_null(),
        "chat_template_kwargs = {} is not a mapping of template variables (e.g. "
        "{{\"enable_thinking\": false}})",
        json_excerpt(chat_template_kwargs));
  // transformers' own checks, plus a clear error for eval keys with nothing to evaluate on
  // (transformers raises for eval_strategy only; an eval_steps or eval_on_start with no
  // dataset is as surely a mistake).
  if (eval_steps) {
    CHECK(*eval_steps > 0,
          "eval_steps = {} is out of range (must be > 0: a number of steps, or below 1 a "
          "fraction of the run's steps)",
          *eval_steps);
    CHECK(*eval_steps < 1 || *eval_steps == std::floor(*eval_steps),
          "eval_steps = {} must be an integer if bigger than 1", *eval_steps);
  }
  c::at_least<int64_t>("per_device_eval_batch_size", per_device_eval_batch_size, 1);
  if (eval_dataset.empty()) {
    CHECK(eval_strategy == EvalStrategy::no,
          "eval_strategy = {} needs an eval_dataset (a JSONL file of held-out rows); set "
          "eval_dataset, or eval_strategy: no",
          eval_strategy_name(eval_strategy));
    CHECK(!eval_on_start, "eval_on_start needs an eval_dataset (a JSONL file of held-out rows)");
    CHECK(!eval_steps, "eval_steps = {} needs an eval_dataset (a JSONL file of held-out rows)",
          *eval_steps);
  }
}

int64_t TrainingArguments::num_warmup_steps(int64_t total_steps) const {
  if (warmup_ratio) return int64_t(std::ceil(double(total_steps) * *warmup_ratio));
  if (warmup_steps < 1) return int64_t(std::ceil(double(total_steps) * warmup_steps));
  return int64_t(warmup_steps);
}

int64_t TrainingArguments::eval_interval(int64_t total_steps) const {
  if (!eval_steps) return logging_steps;
  if (*eval_steps < 1)
    return std::max<int64_t>(1, int64_t(std::ceil(double(total_steps) * *eval_steps)));
  return int64_t(*eval_steps);
}

bool TrainingArguments::should_evaluate(int64_t step, int64_t total_steps, bool epoch_ended) const {
  switch (eval_strategy) {
    case EvalStrategy::no:
      return false;
    case EvalStrategy::steps:
      return step % eval_interval(total_steps) == 0;
    case EvalStrategy::epoch:
      return epoch_ended || step == total_steps;
  }
  return false;
}

}  // namespace fp8rl

namespace fp8rl {

std::unique_ptr<Optimizer> make_optimizer(const TrainingArguments& a, int64_t num_params,
                                          const Context& ctx) {
  if (ctx.device == Device::cpu) {
    // What training the adapter holds at least: its f32 masters, their gradients and AdamW's
    // two moments, all in host memory on the CPU. Checked before allocating, so that an absurd
    // lora_r is named rather than reported as "out of memory".
    const size_t per_param = a.optim == OptimizerKind::sgd ? 8 : 16;
    check_host_bytes(size_t(num_params) * per_param,
                     fmt::format("training the adapter's {} parameters (their number follows "
                                 "lora_r and the target modules) with {}",
                                 num_params, a.optim == OptimizerKind::sgd ? "SGD" : "AdamW"));
  }
  if (a.optim == OptimizerKind::sgd) {
    SgdConfig c;
    c.weight_decay = a.weight_decay;
    return std::make_unique<Sgd>(num_params, c, ctx);
  }
  AdamWConfig c;
  c.beta1 = a.adam_beta1;
  c.beta2 = a.adam_beta2;
  c.eps = a.adam_epsilon;
  c.weight_decay = a.weight_decay;
  return std::make_unique<AdamW>(num_params, c, ctx);
}

TrainStepConfig train_step_config(const TrainingArguments& a, int64_t total_steps) {
  TrainStepConfig c;
  c.learning_rate = a.learning_rate;
  c.max_grad_norm = a.max_grad_norm;
  c.schedule.type = a.lr_scheduler_type;
  c.schedule.num_training_steps = total_steps;
  c.schedule.num_warmup_steps = a.num_warmup_steps(total_steps);
  c.validate();
  return c;
}

}  // namespace fp8rl
