#include "train/sft_config.h"

#include "core/check.h"
#include "train/config_checks.h"

namespace fp8rl {

void SftConfig::validate() const {
  namespace c = config_checks;
  TrainingArguments::validate();
  ModelArguments::validate();
  c::at_least<int64_t>("max_length", max_length, 1);
  c::at_least<int64_t>("max_tokens_per_batch", max_tokens_per_batch, 0);
  CHECK(max_tokens_per_batch == 0 || max_tokens_per_batch >= max_length,
        "max_tokens_per_batch = {} is out of range (must be 0 or >= max_length = {}: a batch "
        "holds at least one whole sequence)",
        max_tokens_per_batch, max_length);
  CHECK(!dataset_text_field.empty(), "dataset_text_field is empty");
}

int64_t SftConfig::tokens_per_batch() const {
  return max_tokens_per_batch > 0 ? max_tokens_per_batch : per_device_train_batch_size * max_length;
}

}  // namespace fp8rl
