#include "model/forward.h"

#include <algorithm>

#include "ops/ops.h"

namespace fp8rl {

namespace {

// Activations of the whole batch, in the context's activation dtype on its device.
struct Activations {
  TensorView x;     // [T,H] residual stream
  TensorView h;     // [T,H] normed input of a block (when not quantized by the norm)
  TensorView q;     // [T,Hq*D]
  TensorView k, v;  // [T,Hkv*D]
  TensorView attn;  // [T,Hq*D]
  TensorView proj;  // [T,H] block output before the residual add
  TensorView gate;  // [T,I]
  TensorView up;    // [T,I]
};

Activations alloc_activations(Context& ctx, const ModelConfig& c, int64_t t) {
  const DType dt = ctx.activation_dtype();
  Activations s;
  s.x = ops::scratch_alloc(ctx, {t, c.hidden_size}, dt);
  s.h = ops::scratch_alloc(ctx, {t, c.hidden_size}, dt);
  s.q = ops::scratch_alloc(ctx, {t, c.q_dim()}, dt);
  s.k = ops::scratch_alloc(ctx, {t, c.kv_dim()}, dt);
  s.v = ops::scratch_alloc(ctx, {t, c.kv_dim()}, dt);
  s.attn = ops::scratch_alloc(ctx, {t, c.q_dim()}, dt);
  s.proj = ops::scratch_alloc(ctx, {t, c.hidden_size}, dt);
  s.gate = ops::scratch_alloc(ctx, {t, c.intermediate_size}, dt);
  s.up = ops::scratch_alloc(ctx, {t, c.intermediate_size}, dt);
  return s;
}

size_t activation_bytes(const Context& ctx, const ModelConfig& c, int64_t t) {
  const int64_t elems =
      t * (3 * c.hidden_size + 2 * c.q_dim() + 2 * c.kv_dim() + 2 * c.intermediate_size);
  return size_t(elems) * dtype_size(ctx.activation_dtype()) + 9 * 256;
}

// The scaling with which a group of FP8 linears reading the same activation quantize it, when
// they share one dynamic scaling: the op producing the activation then writes FP8 codes and
// scales directly (fused) and the linears read them. none: each linear quantizes for itself
// (unquantized or weight-only linears, static input scales that differ per linear).
ActScaling shared_dynamic_act(std::initializer_list<const LinearWeight*> consumers) {
  const ActScaling a = (*consumers.begin())->act;
  if (a != ActScaling::token && a != ActScaling::group && a != ActScaling::tensor)
    return ActScaling::none;
  for (const LinearWeight* w : consumers)
    if (!w->is_fp8() || w->act != a) return ActScaling::none;
  return a;
}

// The input of a group of linears: the plain activation or its FP8 quantization.
struct LinearInput {
  TensorView x;
  ops::QuantizedActivation q;
};

void apply(Context& ctx, const LinearInput& in, const LinearWeight& w, const TensorView& out) {
  if (in.q.act != ActScaling::none)
    ops::linear(ctx, in.q, w, out);
  else
    ops::linear(ctx, in.x, w, out);
}

// rms_norm(x) as the linears with activation scaling `act` consume it, after the residual add
// x += *delta when delta is set (fused into the norm's pass over x); `h` holds the plain result
// when the linears do not share a dynamic scaling.
LinearInput normed(Context& ctx, const ModelConfig& c, const TensorView& x, const TensorView* delta,
                   const TensorView& weight, ActScaling act, const TensorView& h) {
  const float eps = float(c.rms_norm_eps);
  LinearInput in;
  if (act != ActScaling::none) {
    in.q = ops::alloc_quantized(ctx, act, x.dim(0), x.dim(1));
    if (delta != nullptr)
      ops::add_rms_norm_quant(ctx, x, *delta, weight, eps, c.norm_plus_one, in.q);
    else
      ops::rms_norm_quant(ctx, x, weight, eps, c.norm_plus_one, in.q);
  } else {
    if (delta != nullptr)
      ops::add_rms_norm(ctx, x, *delta, weight, eps, c.norm_plus_one, h);
    else
      ops::rms_norm(ctx, x, weight, eps, c.norm_plus_one, h);
    in.x = h;
  }
  return in;
}

TensorView rope_frequencies(const LayerWeights& l) {
  if (!l.rope_freq.empty()) return l.rope_freq;
  return TensorView(const_cast<float*>(l.inv_freq.data()), DType::f32,
                    {int64_t(l.inv_freq.size())});
}

// Attention sublayer of one layer for all sequences, from its normed input `in`: q/k/v, q/k
// norm and RoPE (one pass each; the keys are written straight into each sequence's cache, the
// values too when there is one sequence), attention per sequence, output projection into
// s.proj.
void attention_block(Context& ctx, const Model& m, int64_t li, std::span<const SequenceInput> batch,
                     const TensorView& positions, const LinearInput& in, const Activations& s) {
  const ModelConfig& c = m.config();
  const LayerWeights& l = m.layers[size_t(li)];
  const int64_t t = s.x.dim(0), hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const float eps = float(c.rms_norm_eps);
  ops::ScratchScope scope(ctx);
  apply(ctx, in, l.q, s.q);
  apply(ctx, in, l.k, s.k);
  // A lone sequence's values go from the projection straight into its cache slots.
  const bool v_in_cache = batch.size() == 1;
  if (v_in_cache) {
    const int64_t first = batch[0].cache->length();
    apply(ctx, in, l.v,
          batch[0].cache->v(li).slice_rows(first, first + t).reshape({t, c.kv_dim()}));
  } else {
    apply(ctx, in, l.v, s.v);
  }
  const TensorView inv_freq = rope_frequencies(l);
  const TensorView q_norm = c.qk_norm ? l.q_norm : TensorView();
  const TensorView k_norm = c.qk_norm ? l.k_norm : TensorView();
  const TensorView q = s.q.reshape({t, hq, d});
  ops::rms_norm_rope(ctx, q, q_norm, eps, c.norm_plus_one, positions, inv_freq, q);
  ops::AttentionParams p;
  p.scale = float(c.attention_scale);
  p.softcap = float(c.attn_logit_softcapping);
  p.window = l.sliding ? c.sliding_window : 0;
  // A tensor-scaled o_proj gets max |attn| from the attention kernels' epilogues.
  TensorView amax;
  if (shared_dynamic_act({&l.o}) == ActScaling::tensor) {
    amax = ops::scratch_alloc(ctx, {1}, DType::f32);
    ops::fill_zero(ctx, amax);
  }
  int64_t row = 0;
  for (const SequenceInput& seq : batch) {
    const int64_t n = int64_t(seq.tokens.size());
    const int64_t first = seq.cache->length();
    TensorView kc = seq.cache->k(li), vc = seq.cache->v(li);
    // The new keys (normed, rotated) and values go into the cache slots after the filled ones.
    ops::rms_norm_rope(ctx, s.k.slice_rows(row, row + n).reshape({n, hkv, d}), k_norm, eps,
                       c.norm_plus_one, positions.slice_rows(row, row + n), inv_freq,
                       kc.slice_rows(first, first + n));
    if (!v_in_cache) ops::copy(ctx, s.v.slice_rows(row, row + n), vc.slice_rows(first, first + n));
    ops::attention(ctx, q.slice_rows(row, row + n), kc, vc, first, p,
                   s.attn.slice_rows(row, row + n).reshape({n, hq, d}), amax);
    row += n;
  }
  if (amax.empty())
    ops::linear(ctx, s.attn, l.o, s.proj);
  else
    ops::linear(ctx, s.attn, l.o, s.proj, amax);
}

// MLP sublayer from its normed input `in`: gate/up, act(gate) * up (quantized for the down
// projection when it is a dynamically scaled FP8 linear), down projection into s.proj.
void mlp_block(Context& ctx, const Model& m, const LayerWeights& l, const LinearInput& in,
               const Activations& s) {
  const ModelConfig& c = m.config();
  ops::ScratchScope scope(ctx);
  apply(ctx, in, l.gate, s.gate);
  apply(ctx, in, l.up, s.up);
  const bool silu = c.activation == MlpActivation::silu;
  const ActScaling down_act = shared_dynamic_act({&l.down});
  if (down_act != ActScaling::none) {
    const ops::QuantizedActivation q =
        ops::alloc_quantized(ctx, down_act, s.gate.dim(0), s.gate.dim(1));
    if (silu)
      ops::silu_mul_quant(ctx, s.gate, s.up, q);
    else
      ops::gelu_tanh_mul_quant(ctx, s.gate, s.up, q);
    ops::linear(ctx, q, l.down, s.proj);
  } else {
    if (silu)
      ops::silu_mul(ctx, s.gate, s.up, s.gate);
    else
      ops::gelu_tanh_mul(ctx, s.gate, s.up, s.gate);
    ops::linear(ctx, s.gate, l.down, s.proj);
  }
}

// Host int32 values as a tensor on ctx's device (a view of the vector itself on the CPU).
TensorView on_device(Context& ctx, const std::vector<int32_t>& v) {
  TensorView host(const_cast<int32_t*>(v.data()), DType::i32, {int64_t(v.size())});
  if (ctx.device == Device::cpu) return host;
  TensorView dev = ops::scratch_alloc(ctx, host.shape, DType::i32);
  ops::copy(ctx, host, dev);
  return dev;
}

}  // namespace

size_t forward_scratch_bytes(const Context& ctx, const Model& model, int64_t tokens,
                             int64_t max_cache, int64_t logit_rows) {
  const ModelConfig& c = model.config();
  const size_t elem = dtype_size(ctx.activation_dtype());
  const ActScaling act = model.act_scaling();
  // Per-op transient buffers, the largest of any op.
  size_t op = ops::attention_scratch_bytes(ctx, tokens, c.num_heads, max_cache);
  for (const auto& [name, w] : model.named_linears())
    op = std::max(op, ops::linear_scratch_bytes(ctx, *w, tokens));
  op = std::max(op, ops::linear_scratch_bytes(ctx, model.lm_head, logit_rows));
  // Tensor-scaled fused quantization stages the op's output in the activation dtype.
  op += size_t(tokens * std::max(c.hidden_size, c.intermediate_size)) * elem + 1024;
  // The quantized input of a block's linears lives while they run; in the MLP, with the
  // quantized input of the down projection.
  size_t quantized = 0;
  if (act != ActScaling::none && act != ActScaling::static_tensor)
    quantized = ops::quantized_bytes(ctx, act, tokens, c.hidden_size) +
                ops::quantized_bytes(ctx, act, tokens, c.intermediate_size);
  const size_t ids = 2 * (size_t(tokens) * 4 + 256);
  const size_t final_rows = size_t(logit_rows * c.hidden_size) * elem + 256;
  const size_t staged_logits =
      ctx.device == Device::cpu ? 0 : size_t(logit_rows * c.vocab_size) * 4 + 256;
  return activation_bytes(ctx, c, tokens) + op + quantized + ids + final_rows + staged_logits +
         4096;
}

size_t forward_scratch_bytes(const Model& model, int64_t tokens, int64_t max_cache) {
  const Context cpu{Device::cpu, nullptr};
  return forward_scratch_bytes(cpu, model, tokens, max_cache, tokens);
}

void forward(Context& ctx, const Model& m, std::span<const SequenceInput> batch, LogitRows rows,
             const TensorView& logits) {
  const ModelConfig& c = m.config();
  CHECK(!batch.empty(), "forward: empty batch");
  CHECK(m.device() == ctx.device, "forward: the model is on {}, the context on {} ({})",
        device_name(m.device()), device_name(ctx.device),
        ctx.device == Device::cuda ? "call Model::to_device first" : "use the model's context");
  std::vector<int32_t> tokens, positions;
  int64_t max_cache = 0;
  for (const SequenceInput& seq : batch) {
    CHECK(seq.cache != nullptr, "forward: a sequence has no KV cache");
    CHECK(seq.cache->device() == ctx.device && seq.cache->dtype() == ctx.activation_dtype(),
          "forward: a KV cache on {} does not fit the {} context (KvCache(config, n, ctx))",
          device_name(seq.cache->device()), device_name(ctx.device));
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
  for (int32_t id : tokens)
    CHECK(id >= 0 && id < c.vocab_size, "token id {} is outside the vocabulary [0, {})", id,
          c.vocab_size);
  const int64_t t = int64_t(tokens.size());
  const int64_t out_rows = rows == LogitRows::all ? t : int64_t(batch.size());
  CHECK(logits.dtype == DType::f32 && logits.shape == (Shape{out_rows, c.vocab_size}) &&
            logits.is_contiguous() && (logits.device == ctx.device || logits.device == Device::cpu),
        "forward: logits must be contiguous f32 [{}, {}] on the host or {}, got {} {} on {}",
        out_rows, c.vocab_size, device_name(ctx.device), dtype_name(logits.dtype),
        logits.shape.str(), device_name(logits.device));

  if (ops::scratch_mark(ctx) == 0)
    ops::scratch_reserve(ctx, forward_scratch_bytes(ctx, m, t, max_cache, out_rows));
  ops::ScratchScope scope(ctx);
  const Activations s = alloc_activations(ctx, c, t);
  const TensorView ids = on_device(ctx, tokens);
  const TensorView pos = on_device(ctx, positions);
  const float eps = float(c.rms_norm_eps);

  ops::embedding(ctx, ids, m.embed, float(c.embedding_scale), s.x);
  // The normed input of the next block's linears. Each residual add is fused with the norm
  // that follows it: x += attention output with the MLP's input norm, x += MLP output with the
  // next layer's input norm (the last layer's add stays plain: the final norm only normalizes
  // the rows whose logits are wanted). One block input is live at a time, so each takes the
  // same arena space, right after the activations.
  const size_t input_mark = ops::scratch_mark(ctx);
  auto block_input = [&](const TensorView* delta, const TensorView& norm, ActScaling act) {
    ops::scratch_rewind(ctx, input_mark);
    return normed(ctx, c, s.x, delta, norm, act, s.h);
  };
  auto qkv_act = [](const LayerWeights& l) { return shared_dynamic_act({&l.q, &l.k, &l.v}); };
  LinearInput in;
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const LayerWeights& l = m.layers[size_t(li)];
    if (li == 0) in = block_input(nullptr, l.input_norm, qkv_act(l));
    attention_block(ctx, m, li, batch, pos, in, s);
    // Gemma's sandwich norms normalize each block's output before it joins the residual.
    if (c.sandwich_norms)
      ops::rms_norm(ctx, s.proj, l.post_attention_norm, eps, c.norm_plus_one, s.proj);
    const TensorView& mlp_norm = c.sandwich_norms ? l.pre_feedforward_norm : l.post_attention_norm;
    in = block_input(&s.proj, mlp_norm, shared_dynamic_act({&l.gate, &l.up}));
    mlp_block(ctx, m, l, in, s);
    if (c.sandwich_norms)
      ops::rms_norm(ctx, s.proj, l.post_feedforward_norm, eps, c.norm_plus_one, s.proj);
    if (li + 1 < c.num_layers) {
      const LayerWeights& next = m.layers[size_t(li + 1)];
      in = block_input(&s.proj, next.input_norm, qkv_act(next));
    } else {
      ops::add(ctx, s.x, s.proj, s.x);
    }
  }
  for (const SequenceInput& seq : batch) seq.cache->advance(int64_t(seq.tokens.size()));

  // Final norm and lm_head only for the rows whose logits are wanted.
  TensorView final_in = s.x;
  if (rows == LogitRows::last) {
    final_in = ops::scratch_alloc(ctx, {out_rows, c.hidden_size}, ctx.activation_dtype());
    int64_t row = 0, i = 0;
    for (const SequenceInput& seq : batch) {
      row += int64_t(seq.tokens.size());
      ops::copy(ctx, s.x.slice_rows(row - 1, row), final_in.slice_rows(i, i + 1));
      ++i;
    }
  }
  ops::rms_norm(ctx, final_in, m.final_norm, eps, c.norm_plus_one, final_in);
  // The lm_head writes fp32 logits on the device; they go to the host once at the end.
  const bool staged = logits.device != ctx.device;
  const TensorView out =
      staged ? ops::scratch_alloc(ctx, logits.shape, DType::f32) : logits;
  ops::linear(ctx, final_in, m.lm_head, out, ops::Output::f32);
  if (c.final_logit_softcapping > 0)
    ops::softcap(ctx, out, float(c.final_logit_softcapping), ops::Output::f32);
  if (staged) ops::copy(ctx, out, logits);
}

}  // namespace fp8rl
