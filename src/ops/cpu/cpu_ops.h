// CPU reference implementations of ops/ops.h (exact fp32, multithreaded).
//
// Every op takes a Rounding: none is the exact fp32 reference; bf16 emulates the CUDA
// backend's bf16 activations (Context::bf16_activations): each value the CUDA kernels store in
// bf16 (op outputs, and values rounded inside a kernel: attention's P, the operands of the
// dequantize-to-bf16 GEMM fallback, the per-tensor fused quantizers' staged output) is rounded
// to bf16 at the same point and kept in the f32 tensor. The fp32 math between those points is
// the same as without rounding, so the two modes differ by the roundings only.
#pragma once

#include "ops/backward.h"
#include "ops/ops.h"
#include "ops/sampling.h"

namespace fp8rl::ops::cpu {

enum class Rounding : uint8_t { none, bf16 };
inline float round_as(Rounding r, float x) {
  return r == Rounding::bf16 ? round_to_bf16(x) : x;
}

void embedding(std::span<const int32_t> ids, const TensorView& table, float scale,
               const TensorView& out, Rounding r);
void rms_norm(const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out, Rounding r);
void add_rms_norm(const TensorView& x, const TensorView& delta, const TensorView& w, float eps,
                  bool plus_one, const TensorView& out, Rounding r);
void rope(const TensorView& x, std::span<const int32_t> positions, const TensorView& inv_freq,
          Rounding r);
void rms_norm_rope(const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   std::span<const int32_t> positions, const TensorView& inv_freq,
                   const TensorView& out, Rounding r);
void attention(Arena& scratch, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out, Rounding r);
// The paged cache (paged_attention.cpp); they validate the metadata, which is host memory here.
// scales: an FP8 pool (ops.h KvScales).
void store_kv(const TensorView& k, const TensorView& v, const TensorView& slot_mapping,
              const TensorView& k_pool, const TensorView& v_pool, const KvScales& scales = {});
// lse (optional, Rounding::none only): [T, Hq] f32 log-sum-exp of each row (ops/backward.h).
void paged_attention(Arena& scratch, const TensorView& q, const TensorView& k_pool,
                     const TensorView& v_pool, const PagedBatch& batch, const AttentionParams& p,
                     const TensorView& out, Rounding r, const TensorView& lse = {},
                     const KvScales& scales = {});
void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out, Rounding r);
void gelu_tanh_mul(const TensorView& gate, const TensorView& up, const TensorView& out, Rounding r);
void add(const TensorView& a, const TensorView& b, float alpha, const TensorView& out, Rounding r);
// Output::f32 results are never rounded; Rounding::bf16 then still applies inside (the linear's
// weight is bf16 on CUDA whatever its output).
void softcap(const TensorView& x, float cap, Output kind, Rounding r);
void linear(Arena& scratch, const TensorView& x, const LinearWeight& w, const TensorView& out,
            Output kind, Rounding r);
// out = round(out + alpha * x W^T) with x W^T unrounded (w unquantized, no bias).
void linear_accumulate(Arena& scratch, const TensorView& x, const LinearWeight& w, float alpha,
                       const TensorView& out, Rounding r);

// FP8 activations (quantize.cpp; the fused quantizers in norm.cpp and activation.cpp): the
// recipe of quant/fp8.h on the op's f32 output.
void quantize(const TensorView& x, const QuantizedActivation& q, float static_scale);
// `plain` (optional): the op's plain output too, as rms_norm / silu_mul would write it.
void rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& w, float eps,
                    bool plus_one, const QuantizedActivation& q, Rounding r,
                    const TensorView& plain);
void add_rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one, const QuantizedActivation& q,
                        Rounding r, const TensorView& plain);
void gated_quant(Arena& scratch, const TensorView& gate, const TensorView& up, int act,
                 const QuantizedActivation& q, Rounding r, const TensorView& plain);
void dequantize(const QuantizedActivation& q, const TensorView& out, Rounding r);
void linear(Arena& scratch, const QuantizedActivation& x, const LinearWeight& w,
            const TensorView& out, Output kind, Rounding r);

// Mixture of experts (moe.cpp); operands checked by ops.cpp.
void moe_route(Arena& scratch, const TensorView& x, const LinearWeight& router, bool normalize,
               const TensorView& weights, const TensorView& experts, bool replay,
               const TensorView& chosen, Rounding r);
void moe_experts(Arena& scratch, const TensorView& x, const MoeWeights& w, GatedActivation act,
                 const TensorView& weights, const TensorView& experts, const TensorView& out,
                 const MoeLora& lora, Rounding r);
void moe_experts_backward(Arena& scratch, const TensorView& x, const MoeWeights& w,
                          GatedActivation act, const TensorView& weights, const TensorView& experts,
                          const TensorView& dout, const TensorView& dx, const TensorView& d_weights,
                          const MoeLora& lora, const MoeLoraGrads& grads);
void moe_route_backward(Arena& scratch, const TensorView& x, const LinearWeight& router,
                        bool normalize, const TensorView& experts, const TensorView& d_weights,
                        const TensorView& dx);

// The sampler (sampling.cpp); operands checked by ops/sampling.cpp.
void sample(Arena& scratch, const TensorView& logits, const TensorView& rows,
            const TensorView& history, int top_logprobs, const SampleOutput& out);
size_t sample_scratch_bytes(int64_t r, int64_t v);

}  // namespace fp8rl::ops::cpu
