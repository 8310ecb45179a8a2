// CPU references of ops/backward.h (exact fp32, multithreaded); operands checked by
// ops/backward.cpp. Metadata (positions, cu_q, targets) is host memory here and validated in
// full where a wrong value would read out of bounds.
#pragma once

#include "ops/backward.h"

namespace fp8rl::ops::cpu {

// backward_norm.cpp: norms, RoPE, gated activations, softcap, dropout.
void inv_rms(const TensorView& x, float eps, const TensorView& out);  // rows = numel / D
void rms_norm_backward(const TensorView& x, const TensorView& w, const TensorView& inv_rms,
                       bool plus_one, const TensorView& dy, const TensorView& dx,
                       const TensorView& dw);
void rope_backward(const TensorView& dy, const int32_t* positions, const TensorView& inv_freq);
void silu_mul_backward(const TensorView& gate, const TensorView& up, const TensorView& dout,
                       const TensorView& dgate, const TensorView& dup);
void gelu_tanh_mul_backward(const TensorView& gate, const TensorView& up, const TensorView& dout,
                            const TensorView& dgate, const TensorView& dup);
void softcap_backward(const TensorView& y, float cap, const TensorView& dy, const TensorView& dx);
// The dropout multiplier of element i: 0 or 1 / (1 - p).
float dropout_mask(const LoraDropout& d, uint64_t i);
void lora_dropout(const TensorView& x, const LoraDropout& d, const TensorView& out);

// backward_attention.cpp
void paged_attention_backward(Arena& scratch, const TensorView& q, const TensorView& k_pool,
                              const TensorView& v_pool, const PagedBatch& batch,
                              const AttentionParams& p, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, const TensorView& dq,
                              const TensorView& dk, const TensorView& dv);

// backward_linear.cpp
void linear_backward_input(const TensorView& dy, const LinearWeight& w, const TensorView& dx,
                           bool accumulate);
void lora_backward(Arena& scratch, const TensorView& x, const TensorView& a, const TensorView& b,
                   float scale, const LoraDropout& dropout, const TensorView& dy,
                   const TensorView& dx, const TensorView& da, const TensorView& db);

// backward_cross_entropy.cpp
void lm_head_cross_entropy(Arena& scratch, const TensorView& x, const LinearWeight& lm_head,
                           const TensorView& targets, const CrossEntropyParams& p,
                           const TensorView& loss, const TensorView& logprob, const TensorView& lse,
                           const TensorView& entropy);
void lm_head_cross_entropy_backward(Arena& scratch, const TensorView& x,
                                    const LinearWeight& lm_head, const TensorView& targets,
                                    const CrossEntropyParams& p, const TensorView& lse,
                                    const TensorView& dloss, const TensorView& dx);

}  // namespace fp8rl::ops::cpu
