// Batch invariance: a token's computation does not depend on which other tokens share its
// step, so the engine's decode steps and the trainer's pass over the same tokens produce
// bit-identical logits (GRPO's on_policy_exact).
//
// The CPU kernels are batch-invariant always (fixed reduction orders, one log-softmax). On
// CUDA it is a mode of the device context, off by default because it costs speed:
//   - every cuBLASLt GEMM of a (mode, layout, n, k) shape runs one algorithm without split-K
//     whatever m is (ops/cuda/gemm.h);
//   - attention runs the prefill kernel for decode steps too: its key tiles start at key 0 and
//     a row's online softmax never depends on the other rows of its query tile, whereas the
//     decode kernel splits the keys by context length;
//   - the model forward is the inference forward itself (model/forward.cpp): its fused ops
//     equal the training forward's unfused ones bit for bit, the quantizing norm and
//     activation once unfused here, and the backend leaves out whatever depends on the row
//     count (the weight-streaming kernel, stacked q/k/v, the grouped LoRA up kernel, splits).
// The sampler's processed logprob shares the cross-entropy's log-softmax in either mode.
#pragma once

#include "ops/context.h"

namespace fp8rl::ops {

// Switches the mode on ctx's device (a no-op on the CPU, where it always holds).
void set_batch_invariant(Context& ctx, bool on);
// Whether ctx's device runs its batch-invariant variants now (false on the CPU: its ordinary
// kernels already are).
bool batch_invariant(const Context& ctx);

// The mode on ctx's device for the scope's lifetime, the previous state back at its end (also
// when the owner's constructor throws after making it).
class BatchInvariantScope {
 public:
  explicit BatchInvariantScope(Context& ctx) : ctx_(ctx), was_(batch_invariant(ctx)) {
    set_batch_invariant(ctx_, true);
  }
  ~BatchInvariantScope() { set_batch_invariant(ctx_, was_); }
  BatchInvariantScope(const BatchInvariantScope&) = delete;
  BatchInvariantScope& operator=(const BatchInvariantScope&) = delete;

 private:
  Context& ctx_;
  bool was_;
};

}  // namespace fp8rl::ops
