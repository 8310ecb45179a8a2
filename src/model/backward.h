// The model backward: the training forward (forward(..., Tape&), model/forward.h) in reverse,
// op by op, with the backward ops of ops/backward.h. Only the LoRA parameters get gradients:
// the base weights, norms and embeddings are frozen, so the chain stops at the first layer's
// input and the frozen linears pass dX = dY W_hat on (straight through their FP8 activation
// quantization).
#pragma once

#include "model/adapter.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/step.h"
#include "model/tape.h"
#include "ops/context.h"

namespace fp8rl {

// Accumulates (+=) into `grads` (f32, laid out like adapter.master_params()) the gradient of
// a loss whose gradient with respect to the final normed hidden states tape.h_final is
// d_hidden [T, H] f32. `tape` is what forward(ctx, model, kv, step, tape) saved for the same
// step and pool (checkpointed layers are recomputed here, rewriting their KV slots with the
// same values). The adapter must be the one that forward was given.
void backward(Context& ctx, const Model& model, const KvPool& kv, const StepBatch& step, Tape& tape,
              const TensorView& d_hidden, const LoraAdapter& adapter, const TensorView& grads);

}  // namespace fp8rl
