#include "train/train_step.h"

#include <cmath>

#include "core/check.h"
#include "formats/safetensors.h"
#include "ops/optimizer.h"
#include "train/gradients.h"

namespace fp8rl {

namespace {

constexpr const char* kGlobalStepKey = "train.global_step";
constexpr const char* kSkippedKey = "train.skipped_steps";
constexpr const char* kSettingsKey = "train.settings";

}  // namespace

void TrainStepConfig::validate() const {
  CHECK(learning_rate >= 0.0 && std::isfinite(learning_rate),
        "learning_rate must be finite and >= 0, got {}", learning_rate);
  CHECK(max_grad_norm >= 0.0 && std::isfinite(max_grad_norm),
        "max_grad_norm must be finite and >= 0 (0: off), got {}", max_grad_norm);
  schedule.validate();
}

TrainStep::TrainStep(std::unique_ptr<Optimizer> optimizer, const TrainStepConfig& config)
    : optimizer_(std::move(optimizer)), config_(config) {
  CHECK(optimizer_ != nullptr, "TrainStep without an optimizer");
  config_.validate();
}

StepResult TrainStep::step(std::span<float> params, std::span<float> grads, double loss) {
  Context cpu;
  return step(cpu, TensorView(params.data(), DType::f32, {int64_t(params.size())}),
              TensorView(grads.data(), DType::f32, {int64_t(grads.size())}), loss);
}

StepResult TrainStep::step(Context& ctx, const TensorView& params, const TensorView& grads,
                           double loss, const TensorView& compute_copy) {
  CHECK(params.numel() == optimizer_->num_params() && grads.numel() == optimizer_->num_params(),
        "training step: {} parameters and {} gradients, the optimizer has {}", params.numel(),
        grads.numel(), optimizer_->num_params());
  CHECK(ctx.device == optimizer_->device(), "training step on {} with an optimizer on {}",
        device_name(ctx.device), device_name(optimizer_->device()));
  StepResult result;
  result.lr = config_.schedule.lr(config_.learning_rate, global_step_);
  ++global_step_;
  // The fp64 norm is finite exactly when every gradient is (ops/optimizer.h), so it is the
  // guard's scan as well.
  result.grad_norm = ops::l2_norm(ctx, grads);
  if (config_.skip_nonfinite && !(std::isfinite(loss) && std::isfinite(result.grad_norm))) {
    result.skipped = true;
    ++skipped_steps_;
    return result;
  }
  optimizer_->step(params, grads, result.lr, clip_factor(result.grad_norm, config_.max_grad_norm),
                   compute_copy);
  return result;
}

std::string TrainStep::settings() const {
  const LrSchedule& s = config_.schedule;
  return fmt::format(
      "learning_rate={};lr_scheduler_type={};num_warmup_steps={};num_training_steps={};"
      "num_cycles={};max_grad_norm={}",
      config_.learning_rate, lr_scheduler_name(s.type), s.num_warmup_steps, s.num_training_steps,
      s.num_cycles, config_.max_grad_norm);
}

void TrainStep::add_state(SafetensorsWriter& writer) const {
  optimizer_->add_state(writer);
  writer.add_metadata(kGlobalStepKey, std::to_string(global_step_));
  writer.add_metadata(kSkippedKey, std::to_string(skipped_steps_));
  writer.add_metadata(kSettingsKey, settings());
}

void TrainStep::load_state(const SafetensorsFile& file) {
  auto it = file.metadata().find(kSettingsKey);
  CHECK(it != file.metadata().end(), "training state '{}': metadata '{}' is missing", file.path(),
        kSettingsKey);
  // The schedule's length and warmup come from this run's max_steps (or num_train_epochs) and
  // warmup, as transformers builds its scheduler from the new arguments on resume, and the
  // clipping is read each step: a resume may change them (a larger max_steps extends the run).
  // The base rate transformers restores from the checkpoint (the scheduler's base_lrs), so a
  // changed learning_rate would silently not apply; the schedule's type and cycles shaped the
  // steps already taken. A change of those is an error naming the key.
  const std::string mismatch = settings_mismatch(
      it->second, settings(), {"num_training_steps", "num_warmup_steps", "max_grad_norm"});
  CHECK(mismatch.empty(), "cannot resume from '{}': {}; it cannot change on resume", file.path(),
        mismatch);
  const int64_t global_step = file.metadata_count(kGlobalStepKey, "training state");
  const int64_t skipped = file.metadata_count(kSkippedKey, "training state");
  CHECK(skipped <= global_step, "training state '{}': {} skipped of {} steps", file.path(), skipped,
        global_step);
  optimizer_->load_state(file);
  global_step_ = global_step;
  skipped_steps_ = skipped;
}

void TrainStep::save(const std::string& path) const {
  SafetensorsWriter writer;
  add_state(writer);
  writer.write(path);
}

void TrainStep::load(const std::string& path) {
  load_state(*SafetensorsFile::open(path));
}

}  // namespace fp8rl
