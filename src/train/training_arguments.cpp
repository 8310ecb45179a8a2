#include "train/training_arguments.h"

#include <cmath>

#include "core/check.h"
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
}

int64_t TrainingArguments::num_warmup_steps(int64_t total_steps) const {
  if (warmup_ratio) return int64_t(std::ceil(double(total_steps) * *warmup_ratio));
  if (warmup_steps < 1) return int64_t(std::ceil(double(total_steps) * warmup_steps));
  return int64_t(warmup_steps);
}

}  // namespace fp8rl

namespace fp8rl {

std::unique_ptr<Optimizer> make_optimizer(const TrainingArguments& a, int64_t num_params,
                                          const Context& ctx) {
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
