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
#include "ops/standby_region.h"

namespace fp8rl {

// transformers' pooled position: the last index whose token is not pad_token_id; 0 when every
// token is the pad (the argmax of an all-zero mask); the last index without a pad id.
int64_t pooled_position(std::span<const int32_t> ids, std::optional<int64_t> pad_token_id);

struct ScoreOptions {
  std::optional<int64_t> pad_token_id;
  // Tokens of one forward (sequences are batched up to it; a longer one runs alone).
  int64_t max_batch_tokens = 4096;
  // Non-null: each forward's KV pool lies at the start of this standby region, taken over as
  // `holder` (a phase of a run's one memory plan, sized by plan_scoring; a batch larger than
  // the plan grows the region). Null: each forward allocates a pool of its own.
  StandbyRegion* region = nullptr;
  const void* holder = nullptr;
};

// The largest scoring calls a caller will make: `sequences` sequences of up to `max_length`
// tokens each, batched up to `max_batch_tokens` a forward.
struct ScoreShape {
  int64_t sequences = 1;
  int64_t max_length = 1;
  int64_t max_batch_tokens = 4096;
};

// What the largest forward of a ScoreShape holds, measured by a dry run.
struct ScorePlan {
  int64_t kv_blocks = 0;     // the forward's KV pool: every sequence's blocks
  size_t kv_bytes = 0;       // ... in bytes: what the standby region must hold
  size_t scratch_bytes = 0;  // the context's scratch high water
};

// The plan of scoring `shape` under the model with `adapter` and `head` (as score_sequences
// takes them). The largest forward has T = min(sequences x max_length, max(max_batch_tokens,
// max_length)) tokens in S = min(sequences, T) sequences, whose blocks are at most
// ceil((T + 15 S) / 16). Allocates nothing but a one-block KV pool for the dry run.
ScorePlan plan_scoring(Context& ctx, const Model& model, const LoraAdapter* adapter,
                       const LinearWeight* head, const ScoreShape& shape);

// f32 [B, N] row-major scores of `sequences` (each non-empty, ids below the vocabulary) under
// the model with `adapter` (null: none) and `head` [N, H] (null: the model's own, a classifier's
// score head). The context's scratch arena is reserved as the batches need (nothing more when
// a plan_scoring reserved it before).
std::vector<float> score_sequences(Context& ctx, const Model& model, const LoraAdapter* adapter,
                                   const LinearWeight* head,
                                   std::span<const std::vector<int32_t>> sequences,
                                   const ScoreOptions& options);

}  // namespace fp8rl
