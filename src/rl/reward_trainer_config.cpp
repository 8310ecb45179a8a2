#include "rl/reward_trainer_config.h"

#include <cmath>

#include "core/check.h"
#include "train/config_checks.h"

namespace fp8rl {

void RewardConfig::validate() const {
  namespace c = config_checks;
  TrainingArguments::validate();
  ModelArguments::validate();
  c::at_least<int64_t>("max_length", max_length, 2);
  if (center_rewards_coefficient)
    CHECK(std::isfinite(*center_rewards_coefficient) && *center_rewards_coefficient >= 0,
          "center_rewards_coefficient = {} is out of range (must be finite and >= 0; null: off)",
          *center_rewards_coefficient);
}

}  // namespace fp8rl
