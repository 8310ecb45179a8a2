// LoRA at the one choke point of every decoder projection: the frozen base weight (`Linear`)
// and, when the forward is given an adapter (model/adapter.h) that targets it, the low-rank
// term, y = base(x) + scale * (x A^T) B^T (PEFT's unmerged form). The adapter tensors
// (ops/linear.h LoraWeights) are views into the LoraAdapter's memory, which the trainer updates
// in place, so the engine's next forward sees the new values with no copy; the model itself
// never changes.
#pragma once

#include "core/tensor.h"
#include "ops/linear.h"

namespace fp8rl {

// A decoder projection's frozen base (ops::linear takes it as the LinearWeight it is).
struct Linear : LinearWeight {
  Linear() = default;
  Linear(const LinearWeight& base) : LinearWeight(base) {}  // NOLINT: the same weight
};

// PEFT's module names of the seven decoder projections, in LayerWeights order.
inline constexpr int kProjections = 7;
inline constexpr const char* kProjectionNames[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"};

}  // namespace fp8rl
