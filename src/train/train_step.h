// One guarded training update: schedule -> non-finite guard -> clipping -> optimizer step,
// in the order of transformers' Trainer (clip_grad_norm_, optimizer.step(),
// lr_scheduler.step()), plus the guard transformers does not have.
//
// The guard: a step whose loss or any gradient is NaN or Inf is skipped. The parameters and
// the optimizer state (its moments and its step count, hence the bias correction) are left
// exactly as they were, and the skip is counted. The schedule still advances: the global step
// counts attempted updates, as transformers' global_step does when an AMP grad scaler skips
// an optimizer step, so a run of num_training_steps steps still ends its schedule at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ops/context.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace fp8rl {

class SafetensorsFile;
class SafetensorsWriter;

struct StepResult {
  bool skipped = false;  // the loss or a gradient was not finite; nothing was updated
  double grad_norm = 0;  // L2 norm of the gradients before clipping (NaN/Inf when skipped)
  double lr = 0;         // the learning rate of this step (applied unless skipped)
};

struct TrainStepConfig {
  double learning_rate = 5e-5;  // the base rate (TrainingArguments' default)
  LrSchedule schedule;
  double max_grad_norm = 1.0;  // TrainingArguments' default; 0: no clipping
  // Off only to show what the guard prevents (a test's negative control): a non-finite step
  // is then applied and writes NaN into the parameters.
  bool skip_nonfinite = true;
  void validate() const;
};

class TrainStep {
 public:
  TrainStep(std::unique_ptr<Optimizer> optimizer, const TrainStepConfig& config);

  // One update of params from grads at the rate of global step global_step(); loss is the
  // step's (accumulated) loss, checked for finiteness only. The clipping factor is applied as
  // the optimizer reads each gradient (fp32(g * factor), the bits of torch's in-place
  // clipping); grads are left as given. Host memory, for an optimizer on the host.
  StepResult step(std::span<float> params, std::span<float> grads, double loss);
  // The same on the optimizer's device, ctx's: params, grads [P] f32 there. On CUDA only the
  // gradient norm comes back to the host (ops::l2_norm: one scalar, also the non-finite
  // check); compute_copy (optional, [P] bf16) is written with the new params by the
  // optimizer's pass (Optimizer::step), unless the step is skipped.
  StepResult step(Context& ctx, const TensorView& params, const TensorView& grads, double loss,
                  const TensorView& compute_copy = {});

  int64_t global_step() const { return global_step_; }      // steps attempted
  int64_t skipped_steps() const { return skipped_steps_; }  // of which skipped
  const Optimizer& optimizer() const { return *optimizer_; }
  const TrainStepConfig& config() const { return config_; }

  // The optimizer's state plus the step counters and the schedule ("train." metadata); a load
  // requires the same base rate and schedule type as saved (an error names the key, the saved
  // and this run's value) and takes the schedule's length, warmup and clipping from this run.
  void add_state(SafetensorsWriter& writer) const;
  void load_state(const SafetensorsFile& file);
  void save(const std::string& path) const;  // written as path.tmp, then renamed
  void load(const std::string& path);

 private:
  std::string settings() const;

  std::unique_ptr<Optimizer> optimizer_;
  TrainStepConfig config_;
  int64_t global_step_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace fp8rl
