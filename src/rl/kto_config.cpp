#include "rl/kto_config.h"

#include "core/check.h"
#include "train/config_checks.h"

namespace fp8rl {

void KtoConfig::validate() const {
  namespace c = config_checks;
  TrainingArguments::validate();
  ModelArguments::validate();
  c::positive("beta", beta);
  c::at_least("desirable_weight", desirable_weight, 0.0);
  c::at_least("undesirable_weight", undesirable_weight, 0.0);
  CHECK(desirable_weight > 0 || undesirable_weight > 0,
        "desirable_weight and undesirable_weight are both 0: nothing would be trained");
  c::at_least<int64_t>("max_length", max_length, 2);
  // TRL's check: one example per batch would pair its completion with its own prompt, so the
  // KL estimate would be the implied reward itself.
  CHECK(!kto_loss_uses_kl(loss_type) || per_device_train_batch_size > 1,
        "per_device_train_batch_size = {} is out of range for loss_type {} (must be > 1: the KL "
        "estimate pairs each prompt with another example's completion of the batch)",
        per_device_train_batch_size, kto_loss_type_name(loss_type));
}

}  // namespace fp8rl
