// LoRA at the one choke point of every decoder projection: a `Linear` is the frozen base weight
// plus an optional low-rank adapter, y = base(x) + scale * (x A^T) B^T (PEFT's unmerged form).
// The adapter tensors are views: the memory belongs to a LoraAdapter (model/adapter.h), which
// the trainer updates in place, so the engine's next forward sees the new values with no copy.
#pragma once

#include "core/tensor.h"
#include "ops/linear.h"

namespace fp8rl {

struct LoraWeights {
  TensorView a;        // [r, K] compute copy on the model's device (f32 CPU, bf16 CUDA)
  TensorView b;        // [N, r]
  float scale = 0.0f;  // lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA
  bool active() const { return !a.empty(); }
  int64_t rank() const { return a.empty() ? 0 : a.dim(0); }
};

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
