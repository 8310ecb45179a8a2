#include "rl/dpo_config.h"

#include "core/check.h"
#include "train/config_checks.h"

namespace fp8rl {

void DpoConfig::validate() const {
  namespace c = config_checks;
  TrainingArguments::validate();
  ModelArguments::validate();
  c::positive("beta", beta);
  // ε = 0.5 makes the loss symmetric in chosen/rejected: nothing left to learn.
  c::in_half_open("label_smoothing", label_smoothing, 0.0, 0.5);
  CHECK(label_smoothing == 0.0 || dpo_loss_takes_label_smoothing(loss_type),
        "label_smoothing = {} applies to loss_type sigmoid, robust, exo_pair, aot and "
        "aot_unpaired only, not {}",
        label_smoothing, dpo_loss_type_name(loss_type));
  CHECK(loss_type != DpoLossType::exo_pair || label_smoothing > 0.0,
        "loss_type exo_pair needs label_smoothing > 0 (the EXO paper's ε, e.g. 0.001)");
  c::positive("discopop_tau", discopop_tau);
  if (ld_alpha) {
    c::in_closed("ld_alpha", *ld_alpha, 0.0, 1.0);
    // TRL's sft loss is the chosen tokens' plain cross-entropy: ld_alpha would change nothing.
    CHECK(loss_type != DpoLossType::sft,
          "ld_alpha = {} has no effect on loss_type sft (its NLL reads every token unweighted)",
          *ld_alpha);
  }
  c::at_least<int64_t>("max_length", max_length, 2);
  if (max_prompt_length) {
    c::at_least<int64_t>("max_prompt_length", *max_prompt_length, 1);
    CHECK(*max_prompt_length < max_length,
          "max_prompt_length = {} is out of range (must be < max_length = {}, to leave room "
          "for the completion)",
          *max_prompt_length, max_length);
  }
}

}  // namespace fp8rl
