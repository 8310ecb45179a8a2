// The op interface: every computation of the model forward, on tensor views, with an explicit
// Context. Each op has a CPU reference in ops/cpu/; the CUDA backend implements the same
// signatures. Activations are f32 [rows, features] row-major unless stated.
//
// Dimension letters: T tokens, H hidden size, V vocab, Hq/Hkv query/kv heads, D head dim,
// N/K out/in features, C cache capacity.
#pragma once

#include <cstdint>
#include <span>

#include "ops/context.h"
#include "ops/linear.h"

namespace fp8rl::ops {

// out[T,H] = table[ids[t], :] * scale. table [V,H] any float dtype.
void embedding(Context& ctx, std::span<const int32_t> ids, const TensorView& table, float scale,
               const TensorView& out);

// Row-wise RMSNorm: out = x / sqrt(mean(x^2) + eps) * (plus_one ? 1 + w : w).
// x, out [R,D] f32 (may alias); w [D] any float dtype.
void rms_norm(Context& ctx, const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out);

// Rotary embedding in place, rotate-half (GPT-NeoX) layout: x [T, heads, D] f32,
// positions [T], inv_freq [D/2] f32.
void rope(Context& ctx, const TensorView& x, std::span<const int32_t> positions,
          const TensorView& inv_freq);

struct AttentionParams {
  float scale = 1.0f;    // multiplies q.k
  float softcap = 0.0f;  // > 0: scores = softcap * tanh(scores / softcap)
  int64_t window = 0;    // > 0: query at slot s sees slots (s - window, s]
};

// Causal grouped-query attention of T new queries against a sequence's KV cache.
// q [T,Hq,D]; k_cache, v_cache [C,Hkv,D] f32; query t sits at cache slot first_slot + t and
// sees slots [0, first_slot + t] (and the window); out [T,Hq,D].
void attention(Context& ctx, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out);

// out = act(gate) * up, act = SiLU or GELU (tanh approximation). [T,I] f32, may alias.
void silu_mul(Context& ctx, const TensorView& gate, const TensorView& up, const TensorView& out);
void gelu_tanh_mul(Context& ctx, const TensorView& gate, const TensorView& up,
                   const TensorView& out);

// out = a + b, f32, same shape, may alias.
void add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out);

// out = cap * tanh(x / cap), in place.
void softcap(Context& ctx, const TensorView& x, float cap);

// out[M,N] = x[M,K] W^T (+ b) with the FP8 recipe when W is FP8 (fp32 accumulation).
void linear(Context& ctx, const TensorView& x, const LinearWeight& w, const TensorView& out);

// Scratch bytes linear() needs for this weight and M rows.
size_t linear_scratch_bytes(const LinearWeight& w, int64_t m);
// Scratch bytes attention() needs for T queries against a cache of C slots.
size_t attention_scratch_bytes(int64_t t, int64_t heads, int64_t c);

}  // namespace fp8rl::ops
