// `fp8rl sft`'s configuration: TRL's SFTConfig keys fp8rl implements, by TRL's names and with
// TRL's defaults (trl/trainer/sft_config.py), on top
// of the shared TrainingArguments and the model/LoRA keys. A comment marks each deviation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "train/model_arguments.h"
#include "train/training_arguments.h"

namespace fp8rl {

struct SftConfig : TrainingArguments, ModelArguments {
  SftConfig() {  // SFTConfig's overrides of transformers' defaults
    learning_rate = 2e-5;
    gradient_checkpointing = true;
  }

  int64_t max_length = 1024;  // tokens per sequence (prompt + completion)
  // TRL always truncates to max_length (keeping the start). fp8rl makes a longer sequence an
  // error unless this is set: silently cut training data hides a wrong max_length or a broken
  // dataset. With it set, sequences keep their first max_length tokens.
  bool truncation = false;
  // TRL's packing: several sequences per batch row, attention confined to each. fp8rl always
  // batches without padding (variable-length sequences in one batch); packing=true fills each
  // batch up to max_tokens_per_batch tokens instead of per_device_train_batch_size sequences.
  bool packing = false;
  // The token budget of one packed batch; 0: per_device_train_batch_size * max_length.
  // Must hold one max_length sequence.
  int64_t max_tokens_per_batch = 0;
  std::string dataset_text_field = "text";  // the column of language-modelling rows
  // null (TRL's None): loss on the completion only for prompt/completion rows, on everything
  // for text rows; true/false force either.
  std::optional<bool> completion_only_loss;
  // Loss on assistant turns only for `messages` rows (default: every token, as TRL). TRL needs
  // {% generation %} markers in the chat template for it; fp8rl finds the assistant turns
  // itself.
  bool assistant_only_loss = false;

  // TrainingArguments', ModelArguments' and these keys' ranges; throws fp8rl::Error naming the
  // key, its value and the allowed range.
  void validate() const;
  // max_tokens_per_batch, or its default.
  int64_t tokens_per_batch() const;
};

}  // namespace fp8rl
