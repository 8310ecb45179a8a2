// The model forward: the one code path for prefill, decode steps and (later) training.
//
// The same code runs on every device: the Context picks the backend of each op, activations
// live in the context's arena in its activation dtype (f32 on the CPU, bf16 on CUDA), the model
// and the caches must be on that device (Model::to_device, KvCache(config, n, ctx)).
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
// [num_sequences, V] for last; f32, contiguous, on the host or the context's device (a CUDA
// forward writing host logits copies them back and returns when they are there).
void forward(Context& ctx, const Model& model, std::span<const SequenceInput> batch, LogitRows rows,
             const TensorView& logits);

// Arena bytes forward() needs for `tokens` new tokens with caches of at most `max_cache` slots
// and `logit_rows` rows of logits, on the context's device. forward() reserves this itself
// when the arena is empty.
size_t forward_scratch_bytes(const Context& ctx, const Model& model, int64_t tokens,
                             int64_t max_cache, int64_t logit_rows);
size_t forward_scratch_bytes(const Model& model, int64_t tokens, int64_t max_cache);  // CPU

}  // namespace fp8rl
