// The model forward: the one code path for prefill, decode steps and (later) training.
//
// A batch is a list of sequences, each with new tokens, their positions and its KV cache.
// The new tokens of all sequences are stacked into one [T, H] activation so every linear runs
// once for the whole batch; attention runs per sequence against its own cache. A prefill is
// a sequence with many new tokens, a decode step one with a single token: same code.
#pragma once

#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/context.h"

namespace fp8rl {

struct SequenceInput {
  std::span<const int32_t> tokens;     // new tokens
  std::span<const int32_t> positions;  // their RoPE positions (usually cache length + i)
  KvCache* cache = nullptr;            // receives the new keys/values after its filled slots
};

enum class LogitRows { all, last };  // logits for every new token, or each sequence's last

// Runs the forward and appends the new tokens to each cache. logits: [T_total, V] for all,
// [num_sequences, V] for last; f32.
void forward(Context& ctx, const Model& model, std::span<const SequenceInput> batch, LogitRows rows,
             const TensorView& logits);

// Arena bytes forward() needs for `tokens` new tokens with caches of at most `max_cache` slots.
size_t forward_scratch_bytes(const Model& model, int64_t tokens, int64_t max_cache);

}  // namespace fp8rl
