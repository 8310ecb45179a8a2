// Padding-free packing of SFT examples: the examples of a batch concatenated into one token
// sequence, each with its own positions from 0 and its own attention span (cu_seqlens), so no
// token is padding and none attends across examples.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/sft_data.h"

namespace fp8rl {

inline constexpr int32_t kIgnoreTarget = -100;  // PyTorch's ignore_index

struct SftBatch {
  std::vector<int32_t> input_ids;  // [T] the examples' tokens, one after the other
  // [T] position t's target: the next token of the same example when that token is a target
  // (its loss_mask), else kIgnoreTarget; an example's last position is always kIgnoreTarget.
  std::vector<int32_t> targets;
  std::vector<int32_t> positions;   // [T] 0.. within each example
  std::vector<int64_t> cu_seqlens;  // [S+1] example s spans [cu_seqlens[s], cu_seqlens[s+1])
  int64_t num_targets = 0;          // targets != kIgnoreTarget
};

// The batches of one epoch, as indices into `examples`. The order is a permutation that is a
// function of (seed, epoch) only (identity when !shuffle), so a resumed run replays it; the
// batches are then filled greedily in that order with up to batch_size examples and at most
// max_tokens tokens each; an example alone longer than max_tokens is a batch of its own.
std::vector<std::vector<size_t>> plan_epoch(std::span<const SftExample> examples,
                                            int64_t batch_size, int64_t max_tokens, uint64_t seed,
                                            int64_t epoch, bool shuffle);

// A bound on the tokens of every batch of plan_epoch(examples, batch_size, max_tokens, ...), in
// any epoch and for any seed: the longest example (alone, it may exceed max_tokens), or
// max_tokens capped by the batch_size longest examples together. Epochs differ in order and so
// in how examples share batches; one epoch's largest batch is no bound for another's (size
// memory from this).
int64_t max_batch_tokens(std::span<const SftExample> examples, int64_t batch_size,
                         int64_t max_tokens);

// The packed batch of examples[indices[0]], examples[indices[1]], ... (in that order).
SftBatch make_batch(std::span<const SftExample> examples, std::span<const size_t> indices);

}  // namespace fp8rl
