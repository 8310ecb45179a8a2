// What the training forward keeps for the backward (model/backward.h): the saved activations
// of every decoder layer, in an arena of their own (not the forward's scratch, which every
// layer reuses), named after what they are in the layer.
//
// Activation checkpointing per decoder layer: with `checkpointing`, only each layer's input
// (the residual stream entering it) is kept for the whole pass; the backward recomputes the
// layer's forward into one LayerSaved set (forward_layer_saving) right before its backward,
// so the saved memory is L x [T, H] + one layer's set instead of L layers' sets. With
// offloading as well (TRL's activation_offloading, Unsloth's offloaded checkpoints), those L
// inputs go to host memory (page-locked on CUDA) as the forward leaves each layer and come back
// one at a time before the layer's recompute: the device keeps two [T, H] buffers.
//
// Keys and values are not here: they live in the step's KV pool, which the attention
// backward reads through the same block tables as the forward.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"
#include "formats/model_config.h"

namespace fp8rl {

// One decoder layer's saved activations for T tokens, in the activation dtype unless marked
// f32. Empty views for what the architecture does not have (q/k norm, sandwich norms).
struct LayerSaved {
  TensorView inv_rms_in;    // [T] f32, input norm
  TensorView h_attn;        // [T, H] normed input of q/k/v (LoRA's x)
  TensorView q_pre, k_pre;  // [T, Hq*D], [T, Hkv*D] projections before q/k norm and RoPE
  TensorView q_inv_rms;     // [T*Hq] f32 (qk_norm)
  TensorView k_inv_rms;     // [T*Hkv] f32 (qk_norm)
  TensorView q;             // [T, Hq*D] normed, rotated queries
  TensorView attn;          // [T, Hq*D] attention output (o_proj's input)
  TensorView lse;           // [T, Hq] f32 attention log-sum-exp
  TensorView o_out;         // [T, H] o_proj output before the post-attention norm (sandwich)
  TensorView inv_rms_o;     // [T] f32 (sandwich)
  TensorView x_mid;         // [T, H] residual stream after the attention block
  TensorView inv_rms_mid;   // [T] f32, pre-MLP norm
  TensorView h_mlp;         // [T, H] normed input of gate/up
  TensorView gate, up;      // [T, I] projections
  TensorView act;           // [T, I] act(gate) * up (down_proj's input)
  TensorView down_out;      // [T, H] down_proj output before the post-feedforward norm (sandwich)
  TensorView inv_rms_down;  // [T] f32 (sandwich)
  // MoE configs (an MoE layer's MLP keeps only its input h_mlp and its routing; the experts
  // are recomputed by their backward):
  TensorView route_w;    // [T, k] f32 routing weights
  TensorView route_ids;  // [T, k] i32 experts chosen (or replayed)
};

// Allocates one layer's set for `tokens` rows from `arena` in `dtype` (the activation dtype).
LayerSaved alloc_layer_saved(Arena& arena, const ModelConfig& config, int64_t tokens, DType dtype);
// The same from any allocator (e.g. the context's scratch: ops::scratch_alloc).
LayerSaved alloc_layer_saved(const std::function<TensorView(Shape, DType)>& alloc,
                             const ModelConfig& config, int64_t tokens, DType dtype);

struct Tape {
  bool checkpointing = false;
  // PEFT's lora_dropout on every adapter input: p and the stream of this pass; the mask of
  // layer l, projection j is a function of (seed, l, j, index) (lora_dropout_seed), so the
  // backward regenerates it.
  float dropout_p = 0.0f;
  uint64_t dropout_seed = 0;

  std::vector<TensorView> x_in;  // [L] x [T, H] residual stream entering each layer
  // Offloading: [L] x [T, H] host copies of x_in, whose views then alias two device buffers
  // (x_in[l] is buffer l % 2). Empty otherwise.
  std::vector<TensorView> x_host;
  std::vector<LayerSaved> layers;  // [L] sets, or [1] reused when checkpointing
  TensorView x_final;              // [T, H] residual stream after the last layer
  TensorView inv_rms_final;        // [T] f32
  TensorView h_final;              // [T, H] final-normed hidden states (the lm_head's input)

  LayerSaved& layer(int64_t li) { return layers[checkpointing ? 0 : size_t(li)]; }
};

// Allocates a tape for `tokens` rows from `arena` (everything the training forward saves);
// with `host` (checkpointing only), the layer inputs' host copies from it (offloading).
Tape alloc_tape(Arena& arena, const ModelConfig& config, int64_t tokens, DType dtype,
                bool checkpointing, Arena* host = nullptr);

// The dropout seed of projection `projection` of layer `layer` in a pass seeded `seed`.
uint64_t lora_dropout_seed(uint64_t seed, int64_t layer, int projection);

}  // namespace fp8rl
