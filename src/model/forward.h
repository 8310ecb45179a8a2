// The model forward: the one code path for prefill chunks, decode steps, mixed batches of both
// (the engine) and, later, training.
//
// A step (model/step.h) stacks the new tokens of all its sequences into one [T, H] activation,
// so every linear runs once for the whole batch; keys and values go into the paged KV pool
// (model/kv_cache.h) through the step's slot mapping, and attention reads each sequence's
// blocks through its block table. The forward has no per-sequence host loop, reads no host
// memory and allocates only from the context's scratch arena, whose size is measured before
// the step by a dry run (measure_forward_scratch): the same step can be captured in a CUDA
// graph. The same code runs on every device: the Context picks the backend of each op;
// activations are in its activation dtype (f32 CPU, bf16 CUDA); the model and the pool must be
// on its device.
//
// Every projection goes through one op with the others reading its input, the frozen weights
// and their LoRA adapters together (ops::linear_group): y = base(x) + scale * (x A^T) B^T.
// The adapter is an argument of every entry point below: null runs the base model alone (a
// reference policy), and the model is never changed; an adapter must fit the model
// (LoraAdapter::check_fits) and be on its device.
#pragma once

#include <span>
#include <vector>

#include "model/adapter.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/step.h"
#include "model/tape.h"
#include "ops/context.h"
#include "ops/ops.h"

namespace fp8rl {

// Runs the step: writes the new tokens' keys/values into `kv` and the logits of the step's
// logit rows into `logits` (f32 [R, N] contiguous on ctx's device). `head` [N, H] applies to
// the final normed hidden states instead of the model's lm_head (a classifier head of an
// adapter); null: the model's head (N = ModelConfig::output_size()). Here and below.
void forward(Context& ctx, const Model& model, const LoraAdapter* adapter, const KvPool& kv,
             const StepBatch& step, const TensorView& logits, const LinearWeight* head = nullptr);

// The training forward: the same layers over a step of full prefills (every token
// of every sequence new), saving what the backward needs into `tape` (model/tape.h) instead of
// reusing one activation set; the residual adds and norms are not fused across layers, so
// each layer is a function of its input alone (checkpointing recomputes it). Adapter inputs
// get the tape's LoRA dropout. Ends with the final norm's output in tape.h_final: the loss
// (ops::lm_head_cross_entropy) applies the lm_head chunk by chunk, so no [T, V] logits exist.
// The KV pool must hold the activation dtype (an FP8 KV pool has no gradient).
void forward(Context& ctx, const Model& model, const LoraAdapter* adapter, const KvPool& kv,
             const StepBatch& step, Tape& tape);

// One decoder layer of the training forward: x_out = layer(x_in), saving into `saved`. The
// backward calls it to recompute a checkpointed layer. x_in, x_out [T, H] must not alias.
void forward_layer_saving(Context& ctx, const Model& model, const LoraAdapter* adapter,
                          int64_t layer, const KvPool& kv, const StepBatch& step, const Tape& tape,
                          const TensorView& x_in, LayerSaved& saved, const TensorView& x_out);

// The attention parameters of a layer (scale, with YaRN's attention factor squared in it;
// softcap; sliding window); its RoPE frequencies on the model's device.
ops::AttentionParams attention_params(const ModelConfig& config, const LayerWeights& layer);
TensorView rope_frequencies(const LayerWeights& layer);
// The MLP's gated activation (an MoE layer's experts' too).
ops::GatedActivation gated_activation(const ModelConfig& config);

// Scratch bytes one step of at most `shape` takes on ctx's device, measured by running the
// forward as a dry run (Context::dry_run) over a step of that shape; includes the step's
// upload buffer and staged logits as run_step() takes them.
size_t measure_forward_scratch(const Context& ctx, const Model& model, const LoraAdapter* adapter,
                               const KvPool& kv, const StepShape& shape,
                               const LinearWeight* head = nullptr);

// One step from a host StepInput, for callers that hold no device buffers of their own:
// uploads it into scratch, runs forward(), and writes logits [R, V] f32 to the host or ctx's
// device (host logits are copied back and are there on return).
void run_step(Context& ctx, const Model& model, const LoraAdapter* adapter, const KvPool& kv,
              StepInput& step, const TensorView& logits, const LinearWeight* head = nullptr);

// ---- Simple callers (CLI logits, benchmarks, tests): sequences with their own KvCache.

struct SequenceInput {
  std::span<const int32_t> tokens;     // new tokens
  std::span<const int32_t> positions;  // their positions: cache length + i (checked)
  KvCache* cache = nullptr;            // receives the new keys/values after its filled slots
};

enum class LogitRows { all, last };  // logits for every new token, or each sequence's last

// Builds the step of these sequences (whose caches must share one pool), reserves the arena by
// a dry run when it is empty, runs it and advances each cache. logits: [T_total, V] for all,
// [num_sequences, V] for last; f32, contiguous, on the host or the context's device.
void forward(Context& ctx, const Model& model, const LoraAdapter* adapter,
             std::span<const SequenceInput> batch, LogitRows rows, const TensorView& logits,
             const LinearWeight* head = nullptr);

}  // namespace fp8rl
