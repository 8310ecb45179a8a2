#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"

namespace fp8rl {

LrSchedulerType parse_lr_scheduler_type(std::string_view name) {
  if (name == "constant") return LrSchedulerType::constant;
  if (name == "constant_with_warmup") return LrSchedulerType::constant_with_warmup;
  if (name == "linear") return LrSchedulerType::linear;
  if (name == "cosine") return LrSchedulerType::cosine;
  RAISE("lr_scheduler_type '{}' is not supported (constant, constant_with_warmup, linear, cosine)",
        name);
}

std::string_view lr_scheduler_name(LrSchedulerType type) {
  switch (type) {
    case LrSchedulerType::constant:
      return "constant";
    case LrSchedulerType::constant_with_warmup:
      return "constant_with_warmup";
    case LrSchedulerType::linear:
      return "linear";
    case LrSchedulerType::cosine:
      return "cosine";
  }
  RAISE("unknown LrSchedulerType {}", int(type));
}

void LrSchedule::validate() const {
  CHECK(num_warmup_steps >= 0, "num_warmup_steps must be >= 0, got {}", num_warmup_steps);
  CHECK(num_training_steps >= 0, "num_training_steps must be >= 0, got {}", num_training_steps);
  if (type == LrSchedulerType::linear || type == LrSchedulerType::cosine) {
    CHECK(num_training_steps > 0, "lr_scheduler_type '{}' requires num_training_steps > 0",
          lr_scheduler_name(type));
  }
  CHECK(std::isfinite(num_cycles), "num_cycles must be finite, got {}", num_cycles);
}

double LrSchedule::factor(int64_t step) const {
  CHECK(step >= 0, "learning-rate schedule: step {} is negative", step);
  if (type == LrSchedulerType::constant) return 1.0;
  // float(current_step) / float(max(1, num_warmup_steps))
  if (step < num_warmup_steps) return double(step) / double(std::max<int64_t>(1, num_warmup_steps));
  const double rest = double(std::max<int64_t>(1, num_training_steps - num_warmup_steps));
  switch (type) {
    case LrSchedulerType::constant:
    case LrSchedulerType::constant_with_warmup:
      return 1.0;
    case LrSchedulerType::linear:
      return std::max(0.0, double(num_training_steps - step) / rest);
    case LrSchedulerType::cosine: {
      const double progress = double(step - num_warmup_steps) / rest;
      // math.pi * float(num_cycles) * 2.0 * progress, evaluated left to right as Python does.
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
    }
  }
  RAISE("unknown LrSchedulerType {}", int(type));
}

}  // namespace fp8rl
