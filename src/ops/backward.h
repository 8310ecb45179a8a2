// The backward ops of the trainer: the gradient of every op of the forward (ops.h) that sits
// between the LoRA parameters and the loss, plus the forward variants that save what those
// gradients need (inverse RMS, attention log-sum-exp). Same conventions as ops.h: views, an
// explicit Context, operands checked once in backward.cpp, CPU references in
// ops/cpu/backward*.cpp, CUDA in ops/cuda/backward.{cu,cpp} and attention_backward.cu
// (linear_backward_input in ops/cuda/linear.cpp). On CUDA, activations (x, gate, up, out of the
// saving forwards) are bf16 (Context::activation_dtype()); gradients, inv_rms, lse, norm weights,
// frequencies and LoRA's A and B are f32, as on the CPU.
//
// Gradient contract (llm.c): a backward op ACCUMULATES (+=) into parameter gradients (dw of a
// norm, dA/dB of LoRA) and WRITES input gradients (dx, dq, ...) unless its comment says +=.
// Gradients are f32. The backward ops are the fp32 reference: a CPU context with
// bf16_activations is refused (the bf16 emulation is not extended to backward).
//
// How the trainer composes the ops without a backward of their own:
// - embedding: the table is frozen, no gradient; the chain stops at the first residual.
// - residual adds: y = x + delta passes dy to both unchanged. add_rms_norm (x += delta, then
//   h = rms_norm(x)) has dx_total = dx_residual_from_above + rms_norm_backward(dh), and the
//   same dx_total is delta's gradient; with Gemma's sandwich norms delta is the post-norm's
//   output, so it goes on through rms_norm_backward of that norm.
// - lm_head rows gathered by the forward's logit_rows: the gradient is scattered back to the
//   same rows (training computes the loss on every token, so the gather is the identity).
// - FP8 activation quantization: straight-through (linear_backward_input).
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace fp8rl::ops {

// ---- RMSNorm ------------------------------------------------------------------------------

// rms_norm that also writes inv_rms[r] = 1 / sqrt(mean(x[r]^2) + eps), f32 [R]. x, out [R,D]
// or [T,heads,D] (the per-head q/k norm: rows = T * heads), contiguous, may alias; out equals
// rms_norm's bit for bit. CUDA computes inv_rms in a pass of its own (block-wide fp32 sum),
// which may differ from the norm kernel's internal value in the last bits.
void rms_norm_save(Context& ctx, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   const TensorView& out, const TensorView& inv_rms);

// Gradient of y = x * inv_rms * w_eff (w_eff = w or 1 + w) with g = dy * w_eff and
// x_hat = x * inv_rms:  dx = inv_rms * (g - x_hat * mean(g * x_hat)),  dw += sum_rows dy * x_hat
// (plus_one does not change dw: d(1 + w) = dw). x is the norm's input (not its output), inv_rms
// from rms_norm_save. dx may alias dy; dw (f32 [D]) is optional.
void rms_norm_backward(Context& ctx, const TensorView& x, const TensorView& w,
                       const TensorView& inv_rms, bool plus_one, const TensorView& dy,
                       const TensorView& dx, const TensorView& dw = {});

// ---- RoPE and the per-head q/k norm --------------------------------------------------------

// Gradient of rope() in place: dy [T, heads, D] (contiguous) becomes dx. RoPE rotates each pair
// (a, b) = (v[i], v[i + D/2]) by the angle position * inv_freq[i]; its gradient is the inverse
// rotation, (da, db) = (dy_a cos + dy_b sin, dy_b cos - dy_a sin).
void rope_backward(Context& ctx, const TensorView& dy, const TensorView& positions,
                   const TensorView& inv_freq);

// rms_norm_rope (ops.h) that also writes inv_rms [T * heads] f32 (w empty: RoPE alone, inv_rms
// not written). x, out contiguous [T, heads, D]; out equals rms_norm_rope's bit for bit.
void rms_norm_rope_save(Context& ctx, const TensorView& x, const TensorView& w, float eps,
                        bool plus_one, const TensorView& positions, const TensorView& inv_freq,
                        const TensorView& out, const TensorView& inv_rms);

// Its gradient: dx = rms_norm_backward(rope_backward(dy)) per head (w empty: rope_backward
// alone). x is the pre-norm input [T, heads, D]; dy is left unchanged; dx may alias dy;
// dw (f32 [D]) optional, +=.
void rms_norm_rope_backward(Context& ctx, const TensorView& x, const TensorView& w,
                            const TensorView& inv_rms, bool plus_one, const TensorView& positions,
                            const TensorView& inv_freq, const TensorView& dy, const TensorView& dx,
                            const TensorView& dw = {});

// ---- Gated activations and softcap -------------------------------------------------------

// out = act(gate) * up:  dgate = dout * up * act'(gate),  dup = dout * act(gate). All [T,I];
// dgate and dup may alias any of gate, up, dout (element-wise, each read before written).
// SiLU: act' = s (1 + g (1 - s)), s = sigmoid(g). GELU-tanh: with u = c (g + 0.044715 g^3),
// c = sqrt(2/pi): act' = 0.5 (1 + tanh u) + 0.5 g (1 - tanh^2 u) c (1 + 3 * 0.044715 g^2).
void silu_mul_backward(Context& ctx, const TensorView& gate, const TensorView& up,
                       const TensorView& dout, const TensorView& dgate, const TensorView& dup);
void gelu_tanh_mul_backward(Context& ctx, const TensorView& gate, const TensorView& up,
                            const TensorView& dout, const TensorView& dgate, const TensorView& dup);

// y = cap * tanh(x / cap) (softcap(), which overwrites x): dx = dy * (1 - (y / cap)^2), from the
// OUTPUT y, so the pre-cap values need not be kept. Near |y| = cap the factor is a difference
// of nearly equal numbers (relative error ~2^-24 / (1 - (y/cap)^2)); its absolute error stays
// 2^-23. dx may alias dy. Attention and the chunked cross-entropy apply the same derivative
// inside (from the recomputed scores).
void softcap_backward(Context& ctx, const TensorView& y, float cap, const TensorView& dy,
                      const TensorView& dx);

// ---- Attention ---------------------------------------------------------------------------

// paged_attention() (exact fp32) that also writes the natural log-sum-exp of each query row's
// scores, lse [T, Hq] f32: lse = log sum_j exp(s_j) with s_j = softcap(scale * q.k_j) (the
// probabilities are exp(s_j - lse)). out equals paged_attention's bit for bit; padding rows
// (beyond cu_q[S]) get out = 0 and lse = 0.
void paged_attention_lse(Context& ctx, const TensorView& q, const TensorView& k_pool,
                         const TensorView& v_pool, const PagedBatch& batch,
                         const AttentionParams& p, const TensorView& out, const TensorView& lse);

// The gradient of paged attention for steps whose sequences are full prefills (every token of
// every sequence is new: context_lens[s] == cu_q[s+1] - cu_q[s], as in training), so that key
// position j of sequence s is token row cu_q[s] + j. FlashAttention-2's backward: with
// P_ij = exp(s_ij - lse_i) recomputed from q, k and the saved lse, Delta_i = dout_i . out_i,
// dP_ij = dout_i . v_j, dS_ij = P_ij (dP_ij - Delta_i) (times softcap's 1 - tanh^2):
//   dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,  dv_j = sum_i P_ij dout_i,
// dk/dv summed over the query heads of each kv head (GQA). q, out, dout, dq [T,Hq,D];
// lse [T,Hq]; dk, dv [T,Hkv,D] (written; padding rows 0). No [T,T] matrix: the CPU loops over
// one query row (dq) or one key row (dk, dv) at a time with no scratch. CUDA runs
// FlashAttention-2's tiled backward on the tensor cores (bf16 operands: dout, P and dS rounded
// to bf16, fp32 accumulation; deterministic) for head_dim 32/64/128/256 and 16-slot blocks,
// else (or with CudaDeviceOptions::tiled_attention_backward off) the CPU's loops a warp per
// row, head_dim <= 256; CUDA scratch: delta and a bf16 copy of dout. The CUDA lse of a decode
// step is a second pass over the keys after the forward's own kernel (whose out it keeps), and
// CUDA cannot check that the batch is a full prefill (the host does not read device metadata).
void paged_attention_backward(Context& ctx, const TensorView& q, const TensorView& k_pool,
                              const TensorView& v_pool, const PagedBatch& batch,
                              const AttentionParams& p, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, const TensorView& dq,
                              const TensorView& dk, const TensorView& dv);

// ---- Linear layers and LoRA ----------------------------------------------------------------

// The frozen base linear's input gradient dx[M,K] = dy[M,N] w_hat[N,K] (accumulate: +=), with
// w_hat the dequantized fp32 weight (FP8 codes times their tensor/row/128x128 block scales;
// bf16/f16/f32 widened): the reference path. The forward quantized x with w.act scales; that
// rounding is treated as the identity (straight-through estimator, as Unsloth and TorchAO
// do), so dx is the gradient of x w_hat^T. No gradient for the weight or bias (frozen). The
// CPU streams w_hat in tiles of 16 rows x 64 columns per thread (never the whole weight).
// CUDA dequantizes this one layer's w_hat to bf16 into scratch, rounds dy to bf16 and runs a
// bf16 GEMM with fp32 accumulation and output (unquantized weights must be bf16 there).
// dy may also be gemm_gradient(ctx, dy) (see there).
void linear_backward_input(Context& ctx, const TensorView& dy, const LinearWeight& w,
                           const TensorView& dx, bool accumulate = false);

// dy [M,N] f32 in the form the backward's GEMMs read it, made once for the ops of one
// projection that share it (linear_backward_input and lora_backward take either form): on
// CUDA rounded to bf16 into scratch (the caller's scope), as those ops would round it each; on
// the CPU dy itself.
TensorView gemm_gradient(Context& ctx, const TensorView& dy);

// out[M,K] = dropout(x) (ops/linear.h LoraDropout) for the forward's x A^T (out may alias x).
void lora_dropout(Context& ctx, const TensorView& x, const LoraDropout& dropout,
                  const TensorView& out);

// Backward of y += s * (dropout(x) A^T) B^T with A [r,K], B [N,r] f32 (the fp32 master
// weights), x [M,K], dy [M,N]; u = dropout(x) A^T [M,r] is recomputed:
//   dB += s dy^T u,  du = s dy B,  dA += du^T dropout(x),  dx += mask * (du A).
// dx (f32 [M,K], +=: the base linear's dx is already there) is optional. The CPU computes in
// fp32; CUDA as PEFT under bf16 autocast: bf16 operands (dy, A, B rounded; u, du stored in
// bf16), fp32 accumulation into the fp32 gradients. dy may be gemm_gradient(ctx, dy).
void lora_backward(Context& ctx, const TensorView& x, const TensorView& a, const TensorView& b,
                   float scale, const LoraDropout& dropout, const TensorView& dy,
                   const TensorView& dx, const TensorView& da, const TensorView& db);

// ---- Mixture of experts (the CPU reference only; a CUDA context raises) -----------------------

// moe_experts' backward with the experts frozen. With y_e(x) expert e's gated MLP and
// out[t] = sum_j weights[t, j] y_e(x[t]) (e = experts[t, j]):
//   dx[t] = sum_j weights[t, j] J_e(x[t])^T dout[t],  d_weights[t, j] = dout[t] . y_e(x[t]).
// Each expert's MLP is recomputed over its rows (only x and the routing are kept), through
// the dequantized weights, the activations' FP8 rounding straight-through as for a dense
// linear. x [T, H] activation; weights, experts [T, k] as moe_route wrote them; dout [T, H] f32;
// dx [T, H] f32 and d_weights [T, k] f32 written.
// With `lora` (moe_experts' adapters): the forward recomputed with them, dx through them too,
// and their gradients accumulated (+=) into `grads` (f32, shaped like lora's A and B).
struct MoeLoraGrads {
  TensorView gate_a, gate_b, up_a, up_b, down_a, down_b;
};
void moe_experts_backward(Context& ctx, const TensorView& x, const MoeWeights& w,
                          GatedActivation act, const TensorView& weights, const TensorView& experts,
                          const TensorView& dout, const TensorView& dx, const TensorView& d_weights,
                          const MoeLora& lora = {}, const MoeLoraGrads& grads = {});

// moe_route's backward into x, the router frozen: the routing weights w_j = p_{e_j} (or
// p_{e_j} / sum_i p_{e_i} when `normalize`) of p = softmax(x W_r^T), recomputed in fp32; the
// top-k choice itself has no gradient. dx[t] += (dlogits[t]) W_r with dlogits = p * (dp -
// p . dp) and dp nonzero at the token's experts only. experts [T, k] i32 (chosen or
// replayed), d_weights [T, k] f32, dx [T, H] f32 accumulated.
void moe_route_backward(Context& ctx, const TensorView& x, const LinearWeight& router,
                        bool normalize, const TensorView& experts, const TensorView& d_weights,
                        const TensorView& dx);

// ---- lm_head and cross-entropy ---------------------------------------------------------------

inline constexpr int32_t kIgnoreIndex = -100;  // HF's ignore_index

struct CrossEntropyParams {
  float temperature = 1.0f;   // logits are divided by it after the softcap (TRL's order)
  float softcap = 0.0f;       // > 0: the model's final_logit_softcapping
  int64_t chunk_rows = 1024;  // rows of logits in memory at a time
};

// Per token t of x [T,H] (the final-normed hidden states): z = softcap(x_t W^T) / temperature
// with the lm_head linear as the forward computes it (ops::linear, Output::f32), then
// lse[t] = log sum_v exp(z_v), logprob[t] = z_target - lse, loss[t] = -logprob[t], and
// entropy[t] = lse - sum_v p_v z_v (optional). targets [T] i32; kIgnoreIndex rows get loss,
// logprob and entropy 0 (lse is still written). Outputs f32 [T]. Scratch: chunk_rows x V floats
// of logits plus linear_scratch_bytes(lm_head, chunk_rows); [T, V] never exists.
void lm_head_cross_entropy(Context& ctx, const TensorView& x, const LinearWeight& lm_head,
                           const TensorView& targets, const CrossEntropyParams& p,
                           const TensorView& loss, const TensorView& logprob, const TensorView& lse,
                           const TensorView& entropy = {});

// dx [T,H] (written) of sum_t dloss[t] * loss[t] (for a gradient with respect to logprob pass
// dloss = -dlogprob): the logits of each chunk are recomputed, dz = dloss (softmax(z) -
// onehot(target)), through 1 / temperature and the softcap, then dx = dz_logits W_hat
// (linear_backward_input, straight-through). lse from lm_head_cross_entropy. Ignored rows get
// dx = 0. Same scratch as the forward.
void lm_head_cross_entropy_backward(Context& ctx, const TensorView& x, const LinearWeight& lm_head,
                                    const TensorView& targets, const CrossEntropyParams& p,
                                    const TensorView& lse, const TensorView& dloss,
                                    const TensorView& dx);

// Scratch bytes of either for T rows on the CPU. CUDA: the same chunks, logits from the
// forward's CUDA linear, lse and the exponential sums in fp64 as here, dx through the CUDA
// linear_backward_input; targets are not validated there (the host cannot read them): one
// outside the vocabulary gives NaN loss and dx rows.
size_t lm_head_cross_entropy_scratch_bytes(const LinearWeight& lm_head, int64_t t,
                                           const CrossEntropyParams& p);

}  // namespace fp8rl::ops
