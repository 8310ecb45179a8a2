// Learning-rate schedules exactly as transformers.get_scheduler builds them: a LambdaLR whose
// multiplier of the base learning rate is a function of the step index alone.
//
// Indexing (transformers / torch.optim.lr_scheduler.LambdaLR): the scheduler is created with
// last_epoch = 0, so optimizer step 1 runs at base_lr * factor(0); after each optimizer step
// the trainer calls scheduler.step(), so optimizer step s + 1 (1-based) runs at
// base_lr * factor(s). Here `step` is that 0-based index: the number of training steps already
// taken. transformers' Trainer logs "learning_rate" after scheduler.step(), i.e. the log line
// of global step k shows factor(k), the rate of the *next* step; StepResult::lr
// (train/train_step.h) is the rate the step itself used, factor(k - 1).
#pragma once

#include <cstdint>
#include <string_view>

namespace fp8rl {

// transformers.SchedulerType values supported here, by their config names.
enum class LrSchedulerType { constant, constant_with_warmup, linear, cosine };

// Throws naming the accepted names.
LrSchedulerType parse_lr_scheduler_type(std::string_view name);
std::string_view lr_scheduler_name(LrSchedulerType type);

struct LrSchedule {
  LrSchedulerType type = LrSchedulerType::linear;  // TrainingArguments' default
  int64_t num_warmup_steps = 0;
  int64_t num_training_steps = 0;  // required (> 0) by linear and cosine, as in transformers
  double num_cycles = 0.5;         // cosine only; 0.5: one half-wave from 1 down to 0

  // Throws on negative counts, or linear/cosine without num_training_steps.
  void validate() const;

  // The LambdaLR multiplier for 0-based step index `step` (transformers' lr_lambda), in the
  // same fp64 operations and order as the Python, so the result is bit-identical to it:
  //   constant:              1 (warmup ignored, as get_scheduler("constant") does)
  //   warmup (others):       step / max(1, num_warmup_steps)         for step < num_warmup_steps
  //   constant_with_warmup:  1                                        afterwards
  //   linear:                max(0, (N - step) / max(1, N - W))       afterwards
  //   cosine:                max(0, 0.5 (1 + cos(pi * num_cycles * 2 * progress))),
  //                          progress = (step - W) / max(1, N - W)    afterwards
  // with N = num_training_steps and W = num_warmup_steps. Past N, linear stays at 0 and
  // cosine follows the cosine on (clamped at 0), as in transformers.
  double factor(int64_t step) const;
  double lr(double base_lr, int64_t step) const { return base_lr * factor(step); }
};

}  // namespace fp8rl
