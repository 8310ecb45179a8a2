#include "rl/online_dpo_config.h"

#include <cmath>

#include "core/check.h"
#include "train/config_checks.h"

namespace fp8rl {

void OnlineDpoConfig::validate() const {
  namespace c = config_checks;
  CHECK(!dpo_beta.empty(), "beta is an empty list: give a number or one per epoch");
  for (double b : dpo_beta)
    CHECK(std::isfinite(b) && b > 0.0, "beta holds {}, expected numbers > 0", b);
  CHECK(dpo_loss_type == DpoLossType::sigmoid || dpo_loss_type == DpoLossType::ipo,
        "loss_type = '{}' is not one of sigmoid, ipo", dpo_loss_type_name(dpo_loss_type));
  if (missing_eos_penalty)
    CHECK(std::isfinite(*missing_eos_penalty), "missing_eos_penalty = {} is not a finite number",
          *missing_eos_penalty);
  c::at_least<int64_t>("max_new_tokens", max_completion_length, 1);
  CHECK(max_length > max_completion_length,
        "max_length ({}) must exceed max_new_tokens ({}): the prompt needs a token", max_length,
        max_completion_length);
  CHECK(num_generations == 2, "online dpo samples 2 completions per prompt, got num_generations {}",
        num_generations);
  trainer_config().validate();
}

GrpoConfig OnlineDpoConfig::trainer_config() const {
  GrpoConfig g = *this;
  OnlineDpoOptions o;
  o.loss_type = dpo_loss_type;
  o.beta = dpo_beta;
  o.missing_eos_penalty = missing_eos_penalty;
  g.online_dpo = o;
  // TRL's per_device_train_batch_size counts prompts; the GRPO loop's counts completions.
  g.per_device_train_batch_size = 2 * per_device_train_batch_size;
  g.num_generations_eval = 1;
  g.max_prompt_length = max_length - max_completion_length;
  return g;
}

}  // namespace fp8rl
