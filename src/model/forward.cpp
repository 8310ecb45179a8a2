#include "model/forward.h"

#include <algorithm>

#include "ops/ops.h"

namespace fp8rl {

namespace {

struct Activations {
  TensorView x;     // [T,H] residual stream
  TensorView h;     // [T,H] normed input of a block
  TensorView q;     // [T,Hq*D]
  TensorView k, v;  // [T,Hkv*D]
  TensorView attn;  // [T,Hq*D]
  TensorView proj;  // [T,H] block output before the residual add
  TensorView gate;  // [T,I]
  TensorView up;    // [T,I]
};

Activations alloc_activations(Arena& a, const ModelConfig& c, int64_t t) {
  Activations s;
  s.x = a.alloc({t, c.hidden_size}, DType::f32);
  s.h = a.alloc({t, c.hidden_size}, DType::f32);
  s.q = a.alloc({t, c.q_dim()}, DType::f32);
  s.k = a.alloc({t, c.kv_dim()}, DType::f32);
  s.v = a.alloc({t, c.kv_dim()}, DType::f32);
  s.attn = a.alloc({t, c.q_dim()}, DType::f32);
  s.proj = a.alloc({t, c.hidden_size}, DType::f32);
  s.gate = a.alloc({t, c.intermediate_size}, DType::f32);
  s.up = a.alloc({t, c.intermediate_size}, DType::f32);
  return s;
}

size_t activation_bytes(const ModelConfig& c, int64_t t) {
  const int64_t floats =
      t * (3 * c.hidden_size + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * c.intermediate_size);
  return size_t(floats) * 4 + 9 * 64;
}

// Attention sublayer of one layer for all sequences: q/k/v, q/k norm, RoPE, cache write,
// attention per sequence, output projection into s.proj.
void attention_block(Context& ctx, const Model& m, int64_t li, std::span<const SequenceInput> batch,
                     const std::vector<int32_t>& positions, const Activations& s) {
  const ModelConfig& c = m.config();
  const LayerWeights& l = m.layers[size_t(li)];
  const int64_t t = s.x.dim(0), hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  ops::linear(ctx, s.h, l.q, s.q);
  ops::linear(ctx, s.h, l.k, s.k);
  ops::linear(ctx, s.h, l.v, s.v);
  if (c.qk_norm) {
    ops::rms_norm(ctx, s.q.reshape({t * hq, d}), l.q_norm, float(c.rms_norm_eps), c.norm_plus_one,
                  s.q.reshape({t * hq, d}));
    ops::rms_norm(ctx, s.k.reshape({t * hkv, d}), l.k_norm, float(c.rms_norm_eps), c.norm_plus_one,
                  s.k.reshape({t * hkv, d}));
  }
  TensorView inv_freq(const_cast<float*>(l.inv_freq.data()), DType::f32,
                      {int64_t(l.inv_freq.size())});
  ops::rope(ctx, s.q.reshape({t, hq, d}), positions, inv_freq);
  ops::rope(ctx, s.k.reshape({t, hkv, d}), positions, inv_freq);
  ops::AttentionParams p;
  p.scale = float(c.attention_scale);
  p.softcap = float(c.attn_logit_softcapping);
  p.window = l.sliding ? c.sliding_window : 0;
  int64_t row = 0;
  for (const SequenceInput& seq : batch) {
    const int64_t n = int64_t(seq.tokens.size());
    const int64_t first = seq.cache->length();
    TensorView kc = seq.cache->k(li), vc = seq.cache->v(li);
    // The new keys/values go into the cache slots after the filled ones.
    std::copy_n(s.k.ptr<float>() + row * hkv * d, n * hkv * d, kc.ptr<float>() + first * hkv * d);
    std::copy_n(s.v.ptr<float>() + row * hkv * d, n * hkv * d, vc.ptr<float>() + first * hkv * d);
    ops::attention(ctx, s.q.slice_rows(row, row + n).reshape({n, hq, d}), kc, vc, first, p,
                   s.attn.slice_rows(row, row + n).reshape({n, hq, d}));
    row += n;
  }
  ops::linear(ctx, s.attn, l.o, s.proj);
}

void mlp_block(Context& ctx, const Model& m, const LayerWeights& l, const Activations& s) {
  ops::linear(ctx, s.h, l.gate, s.gate);
  ops::linear(ctx, s.h, l.up, s.up);
  if (m.config().activation == MlpActivation::silu)
    ops::silu_mul(ctx, s.gate, s.up, s.gate);
  else
    ops::gelu_tanh_mul(ctx, s.gate, s.up, s.gate);
  ops::linear(ctx, s.gate, l.down, s.proj);
}

}  // namespace

size_t forward_scratch_bytes(const Model& model, int64_t tokens, int64_t max_cache) {
  const ModelConfig& c = model.config();
  size_t op = ops::attention_scratch_bytes(tokens, c.num_heads, max_cache);
  for (const auto& [name, w] : model.named_linears())
    op = std::max(op, ops::linear_scratch_bytes(*w, tokens));
  op = std::max(op, ops::linear_scratch_bytes(model.lm_head, tokens));
  return activation_bytes(c, tokens) + op + size_t(tokens) * size_t(c.hidden_size) * 4 + 4096;
}

void forward(Context& ctx, const Model& m, std::span<const SequenceInput> batch, LogitRows rows,
             const TensorView& logits) {
  const ModelConfig& c = m.config();
  CHECK(!batch.empty(), "forward: empty batch");
  std::vector<int32_t> tokens, positions;
  int64_t max_cache = 0;
  for (const SequenceInput& seq : batch) {
    CHECK(seq.cache != nullptr, "forward: a sequence has no KV cache");
    CHECK(seq.tokens.size() == seq.positions.size() && !seq.tokens.empty(),
          "forward: a sequence needs as many positions ({}) as new tokens ({}), at least one",
          seq.positions.size(), seq.tokens.size());
    CHECK(seq.cache->length() + int64_t(seq.tokens.size()) <= seq.cache->capacity(),
          "forward: {} new tokens do not fit the KV cache ({} of {} slots used)", seq.tokens.size(),
          seq.cache->length(), seq.cache->capacity());
    tokens.insert(tokens.end(), seq.tokens.begin(), seq.tokens.end());
    positions.insert(positions.end(), seq.positions.begin(), seq.positions.end());
    max_cache = std::max(max_cache, seq.cache->capacity());
  }
  const int64_t t = int64_t(tokens.size());
  const int64_t out_rows = rows == LogitRows::all ? t : int64_t(batch.size());
  CHECK(logits.dtype == DType::f32 && logits.shape == (Shape{out_rows, c.vocab_size}),
        "forward: logits must be f32 [{}, {}], got {}", out_rows, c.vocab_size, logits.shape.str());

  CHECK(ctx.scratch != nullptr, "forward: Context has no scratch arena");
  Arena& arena = *ctx.scratch;
  if (arena.mark() == 0) arena.reserve(forward_scratch_bytes(m, t, max_cache));
  ArenaScope scope(arena);
  const Activations s = alloc_activations(arena, c, t);
  const float eps = float(c.rms_norm_eps);

  ops::embedding(ctx, tokens, m.embed, float(c.embedding_scale), s.x);
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const LayerWeights& l = m.layers[size_t(li)];
    ops::rms_norm(ctx, s.x, l.input_norm, eps, c.norm_plus_one, s.h);
    attention_block(ctx, m, li, batch, positions, s);
    if (c.sandwich_norms)
      ops::rms_norm(ctx, s.proj, l.post_attention_norm, eps, c.norm_plus_one, s.proj);
    ops::add(ctx, s.x, s.proj, s.x);
    ops::rms_norm(ctx, s.x, c.sandwich_norms ? l.pre_feedforward_norm : l.post_attention_norm, eps,
                  c.norm_plus_one, s.h);
    mlp_block(ctx, m, l, s);
    if (c.sandwich_norms)
      ops::rms_norm(ctx, s.proj, l.post_feedforward_norm, eps, c.norm_plus_one, s.proj);
    ops::add(ctx, s.x, s.proj, s.x);
  }
  for (const SequenceInput& seq : batch) seq.cache->advance(int64_t(seq.tokens.size()));

  // Final norm and lm_head only for the rows whose logits are wanted.
  TensorView final_in = s.x;
  if (rows == LogitRows::last) {
    final_in = arena.alloc({out_rows, c.hidden_size}, DType::f32);
    int64_t row = 0, i = 0;
    for (const SequenceInput& seq : batch) {
      row += int64_t(seq.tokens.size());
      std::copy_n(s.x.ptr<float>() + (row - 1) * c.hidden_size, c.hidden_size,
                  final_in.ptr<float>() + (i++) * c.hidden_size);
    }
  }
  ops::rms_norm(ctx, final_in, m.final_norm, eps, c.norm_plus_one, final_in);
  ops::linear(ctx, final_in, m.lm_head, logits);
  if (c.final_logit_softcapping > 0) ops::softcap(ctx, logits, float(c.final_logit_softcapping));
}

}  // namespace fp8rl
