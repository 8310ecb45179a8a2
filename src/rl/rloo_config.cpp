#include "rl/rloo_config.h"

#include "core/check.h"

namespace fp8rl {

void RlooConfig::validate() const {
  CHECK(advantage_estimator == AdvantageEstimator::rloo && loss_type == GrpoLossType::rloo,
        "fp8rl rloo runs TRL's RLOO (advantage_estimator rloo, loss_type rloo), got {} and {}: "
        "other combinations run with fp8rl grpo",
        advantage_estimator_name(advantage_estimator), grpo_loss_type_name(loss_type));
  GrpoConfig::validate();
}

}  // namespace fp8rl
