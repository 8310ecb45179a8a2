// CPU reference implementations of ops/ops.h (exact fp32, multithreaded).
#pragma once

#include "ops/ops.h"

namespace fp8rl::ops::cpu {

void embedding(std::span<const int32_t> ids, const TensorView& table, float scale,
               const TensorView& out);
void rms_norm(const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out);
void add_rms_norm(const TensorView& x, const TensorView& delta, const TensorView& w, float eps,
                  bool plus_one, const TensorView& out);
void rope(const TensorView& x, std::span<const int32_t> positions, const TensorView& inv_freq);
void rms_norm_rope(const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   std::span<const int32_t> positions, const TensorView& inv_freq,
                   const TensorView& out);
void attention(Arena& scratch, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out);
void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out);
void gelu_tanh_mul(const TensorView& gate, const TensorView& up, const TensorView& out);
void add(const TensorView& a, const TensorView& b, const TensorView& out);
void softcap(const TensorView& x, float cap);
void linear(Arena& scratch, const TensorView& x, const LinearWeight& w, const TensorView& out);

// FP8 activations (quantize.cpp): the recipe of quant/fp8.h on the op's f32 output.
void quantize(const TensorView& x, const QuantizedActivation& q, float static_scale);
void rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& w, float eps,
                    bool plus_one, const QuantizedActivation& q);
void add_rms_norm_quant(Arena& scratch, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one,
                        const QuantizedActivation& q);
void gated_quant(Arena& scratch, const TensorView& gate, const TensorView& up, int act,
                 const QuantizedActivation& q);
void dequantize(const QuantizedActivation& q, const TensorView& out);
void linear(Arena& scratch, const QuantizedActivation& x, const LinearWeight& w,
            const TensorView& out);

}  // namespace fp8rl::ops::cpu
