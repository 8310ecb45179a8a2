// A frozen base linear layer y[M,N] = x[M,K] W[N,K]^T (+ b): unquantized (f32/bf16/f16
// weight) or FP8 (e4m3 codes + fp32 scales, FP8 recipe of quant/fp8.h). The weight memory is
// owned elsewhere (the model's Weights or an mmap'd checkpoint); this is a view.
#pragma once

#include "core/tensor.h"
#include "formats/quant_config.h"

namespace fp8rl {

struct LinearWeight {
  TensorView weight;                  // [N,K] f32 | bf16 | f16 | f8e4m3
  Fp8Scheme scheme = Fp8Scheme::off;  // off unless weight is f8e4m3
  ActScaling act = ActScaling::none;  // how the input is quantized in the forward
  TensorView scales;                  // f32, weight_scale_shape(scheme, N, K)
  float input_scale = 0.0f;           // act == static_tensor only
  TensorView bias;                    // [N] or empty
  // CUDA only (ops::prepare_linear): the weight scales as the GEMM library reads them, e.g.
  // 128x128 block scales K-major with a leading dimension rounded up to 4 for cuBLASLt.
  TensorView gemm_scales;

  int64_t out_features() const { return weight.dim(0); }
  int64_t in_features() const { return weight.dim(1); }
  bool is_fp8() const { return scheme != Fp8Scheme::off; }
  // Bytes of weight + scales + bias.
  size_t nbytes() const;
};

// One projection of every expert of a mixture-of-experts layer, stacked: expert e's weight is
// the [N, K] matrix weight[e], each quantized on its own like a dense linear (row scales per
// expert row, 128x128 blocks within an expert, or a scale per expert). The weight memory is
// owned elsewhere (the model); this is a view.
struct ExpertLinear {
  TensorView weight;                  // [E, N, K] f32 | bf16 | f16 | f8e4m3, contiguous
  Fp8Scheme scheme = Fp8Scheme::off;  // off unless weight is f8e4m3
  ActScaling act = ActScaling::none;  // how each expert's input rows are quantized
  TensorView scales;                  // f32 [E, weight_scale_shape(scheme, N, K)...]

  int64_t num_experts() const { return weight.dim(0); }
  int64_t out_features() const { return weight.dim(1); }
  int64_t in_features() const { return weight.dim(2); }
  bool is_fp8() const { return scheme != Fp8Scheme::off; }
  // Expert e's projection as a dense linear: views of its [N, K] weight and its scales.
  LinearWeight expert(int64_t e) const;
  size_t nbytes() const;  // weight + scales
};

// A mixture-of-experts MLP (Qwen3-MoE): the router [E, H], never quantized (the routing
// decision must not move with the FP8 recipe; FP8 checkpoints keep it unquantized too), and
// the experts' gated MLPs: gate and up [E, I, H], down [E, H, I].
struct MoeWeights {
  LinearWeight router;
  ExpertLinear gate, up, down;
  bool empty() const { return router.weight.empty(); }
};

// A projection's LoRA adapter, PEFT's unmerged form y += scale * (x A^T) B^T. Views of memory
// a LoraAdapter (model/adapter.h) owns; empty a: no adapter.
struct LoraWeights {
  TensorView a;        // [r, K] compute copy on the model's device (f32 CPU, bf16 CUDA)
  TensorView b;        // [N, r]
  float scale = 0.0f;  // lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA
  bool active() const { return !a.empty(); }
  int64_t rank() const { return a.empty() ? 0 : a.dim(0); }
};

// PEFT's lora_dropout on the adapter's input only (ops::lora_dropout): x_drop = x * mask,
// mask(m, k) = 1 / (1 - p) where uniform_hash(seed, m * K + k, 1) >= 2p - 1 (probability
// 1 - p), else 0: a function of (seed, index), so the backward regenerates the forward's mask.
// p = 0: no dropout.
namespace ops {
struct LoraDropout {
  float p = 0.0f;
  uint64_t seed = 0;
};
}  // namespace ops

// LoRA on an MoE layer's experts (PEFT's per-expert modules), per projection A [E, r, K] and
// B [E, N, r] (a LoraAdapter's expert slots); inactive: none. The dropout of a projection
// masks each expert's input rows (in token order) with the stream rng_key(seed, expert).
struct MoeLora {
  LoraWeights gate, up, down;
  ops::LoraDropout gate_dropout, up_dropout, down_dropout;
  bool active() const { return gate.active() || up.active() || down.active(); }
};

// Expert e's adapter of a stacked one ([E, r, K], [E, N, r]) as views [r, K], [N, r].
inline LoraWeights expert_lora(const LoraWeights& stacked, int64_t e) {
  if (!stacked.active()) return {};
  const int64_t r = stacked.a.dim(1), k = stacked.a.dim(2), n = stacked.b.dim(1);
  LoraWeights w;
  w.a = stacked.a.slice_rows(e, e + 1).reshape({r, k});
  w.b = stacked.b.slice_rows(e, e + 1).reshape({n, r});
  w.scale = stacked.scale;
  return w;
}

// Whether the CUDA backend runs an FP8 weight with inputs quantized with `act` as a native FP8
// GEMM (ops/cuda/linear.cpp) on a GPU with all three cuBLASLt scaling modes (sm_90): K and N
// multiples of 16, and a weight/activation scaling pair of its table. Otherwise it dequantizes
// both operands to bf16 for a bf16 GEMM; the CPU's emulation of bf16 activations
// (Context::bf16_activations) mirrors that from this same answer.
bool fp8_gemm_native(const LinearWeight& w, ActScaling act);

}  // namespace fp8rl
