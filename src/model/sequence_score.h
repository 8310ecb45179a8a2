// Scores of a sequence classifier, as transformers' *ForSequenceClassification computes them:
// the head [N, H] applied to the final normed hidden state at one position of each sequence,
// the last token that is not the pad token. The forward is causal, so that hidden state is the
// last one of the sequence cut after that position: each sequence runs cut there and only its
// last row reaches the head.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/adapter.h"
#include "model/model.h"
#include "ops/context.h"

namespace fp8rl {

// transformers' pooled position: the last index whose token is not pad_token_id; 0 when every
// token is the pad (the argmax of an all-zero mask); the last index without a pad id.
int64_t pooled_position(std::span<const int32_t> ids, std::optional<int64_t> pad_token_id);

struct ScoreOptions {
  std::optional<int64_t> pad_token_id;
  // Tokens of one forward (sequences are batched up to it; a longer one runs alone).
  int64_t max_batch_tokens = 4096;
};

// f32 [B, N] row-major scores of `sequences` (each non-empty, ids below the vocabulary) under
// the model with `adapter` (null: none) and `head` [N, H] (null: the model's own, a classifier's
// score head). The context's scratch arena is reserved as the batches need.
std::vector<float> score_sequences(Context& ctx, const Model& model, const LoraAdapter* adapter,
                                   const LinearWeight* head,
                                   std::span<const std::vector<int32_t>> sequences,
                                   const ScoreOptions& options);

}  // namespace fp8rl
