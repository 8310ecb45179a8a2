// LoRA at the one choke point of every decoder projection: a `Linear` is the frozen base weight
// plus an optional low-rank adapter, y = base(x) + scale * (x A^T) B^T (PEFT's unmerged form).
// The adapter tensors (ops/linear.h LoraWeights) are views: the memory belongs to a LoraAdapter
// (model/adapter.h), which the trainer updates in place, so the engine's next forward sees the
// new values with no copy.
#pragma once

#include "core/tensor.h"
#include "ops/linear.h"

namespace fp8rl {

// A decoder projection. It is a LinearWeight (the frozen base: ops::linear takes it as one)
// with the adapter that the forward adds when active.
struct Linear : LinearWeight {
  Linear() = default;
  Linear(const LinearWeight& base) : LinearWeight(base) {}  // NOLINT: a base without adapter
  LoraWeights lora;
};

// PEFT's module names of the seven decoder projections, in LayerWeights order.
inline constexpr const char* kProjectionNames[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"};

}  // namespace fp8rl
