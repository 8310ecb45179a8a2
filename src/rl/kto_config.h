// `fp8rl kto`'s configuration: TRL's KTOConfig keys fp8rl implements, by TRL's names, with
// TRL's meanings and defaults (trl/trainer/kto_config.py), on top of the shared
// TrainingArguments and model/LoRA keys.
#pragma once

#include <cstdint>

#include "rl/kto_loss.h"
#include "rl/reference_model.h"
#include "train/model_arguments.h"
#include "train/training_arguments.h"

namespace fp8rl {

struct KtoConfig : TrainingArguments, ModelArguments {
  KtoConfig() {  // KTOConfig's overrides
    learning_rate = 1e-6;
    disable_dropout = true;
  }

  double beta = 0.1;
  // Weights of the desirable and undesirable examples' losses (to balance unequal counts).
  double desirable_weight = 1.0;
  double undesirable_weight = 1.0;
  KtoLossType loss_type = KtoLossType::kto;
  ReferenceModel reference_model = ReferenceModel::start;  // the reference's log-probs
  int64_t max_length = 1024;                               // tokens of prompt + completion
  // TRL keeps a row's first max_length tokens silently; fp8rl makes a row over max_length an
  // error unless this is set. The mismatched KL sequences are always cut (as TRL's).
  bool truncation = false;

  // Throws fp8rl::Error naming the key, its value and the allowed range.
  void validate() const;
};

}  // namespace fp8rl
