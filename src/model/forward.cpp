#include "model/forward.h"

#include <algorithm>

#include "ops/backward.h"
#include "ops/exactness.h"
#include "ops/ops.h"

namespace fp8rl {

namespace {

// Activations of the whole step, in the context's activation dtype on its device.
struct Activations {
  TensorView x;     // [T,H] residual stream
  TensorView h;     // [T,H] normed input of a block (when not quantized by the norm, or LoRA)
  TensorView q;     // [T,Hq*D]
  TensorView k, v;  // [T,Hkv*D] the new keys (normed, rotated) and values before store_kv
  TensorView attn;  // [T,Hq*D]
  TensorView proj;  // [T,H] block output before the residual add
  TensorView gate;  // [T,I]
  TensorView up;    // [T,I]
};

Activations alloc_activations(Context& ctx, const Model& m, int64_t t) {
  const ModelConfig& c = m.config();
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

// The scaling with which a group of FP8 linears reading the same activation quantize it, when
// they share one dynamic scaling: the op producing the activation then writes FP8 codes and
// scales directly (fused) and the linears read them. none: each linear quantizes for itself
// (unquantized or weight-only linears, static input scales that differ per linear).
ActScaling shared_dynamic_act(std::initializer_list<const Linear*> consumers) {
  const ActScaling a = (*consumers.begin())->act;
  if (a != ActScaling::token && a != ActScaling::group && a != ActScaling::tensor)
    return ActScaling::none;
  for (const Linear* w : consumers)
    if (!w->is_fp8() || w->act != a) return ActScaling::none;
  return a;
}

bool any_adapter(std::initializer_list<const Linear*> consumers) {
  for (const Linear* w : consumers)
    if (w->lora.active()) return true;
  return false;
}

using ops::LinearInput;

// A decoder projection as the group op takes it: its weight, its adapter, its output.
ops::Projection projection(const Linear& w, const TensorView& out, ops::LoraDropout dropout = {}) {
  return ops::Projection{&w, w.lora, out, dropout};
}

// The one choke point of a projection alone (o_proj, down_proj): the frozen base linear and its
// adapter in one op.
void apply(Context& ctx, const LinearInput& in, const Linear& w, const TensorView& out,
           const ops::LoraDropout& dropout = {}) {
  const ops::Projection p[] = {projection(w, out, dropout)};
  ops::linear_group(ctx, in, p);
}

// rms_norm(x) as the linears with activation scaling `act` consume it, after the residual add
// x += *delta when delta is set (fused into the norm's pass over x). `h` receives the plain
// result when the linears do not share a dynamic scaling or when one has an adapter (LoRA
// reads the plain input; the base linears then read its quantization).
LinearInput normed(Context& ctx, const ModelConfig& c, const TensorView& x, const TensorView* delta,
                   const TensorView& weight, ActScaling act, bool plain, const TensorView& h) {
  const float eps = float(c.rms_norm_eps);
  LinearInput in;
  if (act != ActScaling::none) in.q = ops::alloc_quantized(ctx, act, x.dim(0), x.dim(1));
  if (act != ActScaling::none && !plain) {
    if (delta != nullptr)
      ops::add_rms_norm_quant(ctx, x, *delta, weight, eps, c.norm_plus_one, in.q);
    else
      ops::rms_norm_quant(ctx, x, weight, eps, c.norm_plus_one, in.q);
    return in;
  }
  if (delta != nullptr)
    ops::add_rms_norm(ctx, x, *delta, weight, eps, c.norm_plus_one, h);
  else
    ops::rms_norm(ctx, x, weight, eps, c.norm_plus_one, h);
  in.x = h;
  if (act != ActScaling::none) ops::quantize(ctx, h, in.q);
  return in;
}

}  // namespace

ops::AttentionParams attention_params(const ModelConfig& c, const LayerWeights& l) {
  ops::AttentionParams p;
  p.scale = float(c.attention_scale);
  p.softcap = float(c.attn_logit_softcapping);
  p.window = l.sliding ? c.sliding_window : 0;
  return p;
}

TensorView rope_frequencies(const LayerWeights& l) {
  if (!l.rope_freq.empty()) return l.rope_freq;
  return TensorView(const_cast<float*>(l.inv_freq.data()), DType::f32,
                    {int64_t(l.inv_freq.size())});
}

namespace {

// q, k and v of the step into s.q, s.k, s.v through the group op (the stacked weight
// LayerWeights::qkv offered for the backend's one GEMM).
void qkv_projections(Context& ctx, const LinearInput& in, const LayerWeights& l,
                     const Activations& s) {
  const ops::Projection group[] = {projection(l.q, s.q), projection(l.k, s.k),
                                   projection(l.v, s.v)};
  ops::linear_group(ctx, in, group, l.qkv.weight.empty() ? nullptr : &l.qkv);
}

// Attention sublayer of one layer for the whole step, from its normed input `in`: q/k/v, then
// q/k norm and RoPE with the new keys/values into their pool slots (one op), paged attention,
// output projection into s.proj.
void attention_block(Context& ctx, const Model& m, int64_t li, const KvPool& kv,
                     const StepBatch& step, const LinearInput& in, const Activations& s) {
  const ModelConfig& c = m.config();
  const LayerWeights& l = m.layers[size_t(li)];
  const int64_t t = s.x.dim(0), hq = c.num_heads, d = c.head_dim;
  const float eps = float(c.rms_norm_eps);
  ops::ScratchScope scope(ctx);
  qkv_projections(ctx, in, l, s);
  const TensorView q = s.q.reshape({t, hq, d});
  ops::QkRope qk;
  if (c.qk_norm) {
    qk.q_norm = l.q_norm;
    qk.k_norm = l.k_norm;
  }
  qk.eps = eps;
  qk.plus_one = c.norm_plus_one;
  qk.positions = step.positions;
  qk.inv_freq = rope_frequencies(l);
  const ops::KvScales kv_scales{kv.k_scale(li), kv.v_scale(li)};  // empty unless FP8 KV
  ops::rope_store_kv(ctx, q, s.k.reshape({t, c.num_kv_heads, d}),
                     s.v.reshape({t, c.num_kv_heads, d}), qk, step.slot_mapping, kv.k(li), kv.v(li),
                     kv_scales, q);
  const ops::AttentionParams p = attention_params(c, l);
  // A dynamically scaled FP8 o_proj without adapter reads the attention's output as the
  // attention op quantizes it (which defines the padding rows of a captured batch there only).
  LinearInput o_in;
  o_in.x = s.attn;
  const ActScaling o_act = shared_dynamic_act({&l.o});
  if ((o_act == ActScaling::token || o_act == ActScaling::group) && !l.o.lora.active())
    o_in.q = ops::alloc_quantized(ctx, o_act, t, hq * d);
  ops::paged_attention(ctx, q, kv.k(li), kv.v(li), step.attn, p, s.attn.reshape({t, hq, d}), {},
                       kv_scales, o_in.q.act != ActScaling::none ? &o_in.q : nullptr);
  apply(ctx, o_in, l.o, s.proj);
}

// MLP sublayer from its normed input `in`: gate/up, act(gate) * up (quantized for the down
// projection when it is a dynamically scaled FP8 linear without adapter), down projection
// into s.proj.
void mlp_block(Context& ctx, const Model& m, const LayerWeights& l, const LinearInput& in,
               const Activations& s) {
  const ModelConfig& c = m.config();
  ops::ScratchScope scope(ctx);
  const ops::Projection gate_up[] = {projection(l.gate, s.gate), projection(l.up, s.up)};
  ops::linear_group(ctx, in, gate_up);
  const bool silu = c.activation == MlpActivation::silu;
  const ActScaling down_act = shared_dynamic_act({&l.down});
  if (down_act != ActScaling::none && !l.down.lora.active()) {
    const ops::QuantizedActivation q =
        ops::alloc_quantized(ctx, down_act, s.gate.dim(0), s.gate.dim(1));
    if (silu)
      ops::silu_mul_quant(ctx, s.gate, s.up, q);
    else
      ops::gelu_tanh_mul_quant(ctx, s.gate, s.up, q);
    LinearInput down_in;
    down_in.q = q;
    apply(ctx, down_in, l.down, s.proj);
    return;
  }
  if (silu)
    ops::silu_mul(ctx, s.gate, s.up, s.gate);
  else
    ops::gelu_tanh_mul(ctx, s.gate, s.up, s.gate);
  LinearInput down_in;
  down_in.x = s.gate;
  apply(ctx, down_in, l.down, s.proj);
}

// The input of a group of linears in the training forward: the normed activation (saved:
// LoRA's x), quantized once when the FP8 linears share a dynamic scaling.
LinearInput training_input(Context& ctx, const TensorView& h,
                           std::initializer_list<const Linear*> consumers) {
  LinearInput in;
  in.x = h;
  const ActScaling act = shared_dynamic_act(consumers);
  if (act != ActScaling::none) {
    in.q = ops::alloc_quantized(ctx, act, h.dim(0), h.dim(1));
    ops::quantize(ctx, h, in.q);
  }
  return in;
}

}  // namespace

void forward_layer_saving(Context& ctx, const Model& m, int64_t li, const KvPool& kv,
                          const StepBatch& step, const Tape& tape, const TensorView& x_in,
                          LayerSaved& sv, const TensorView& x_out) {
  const ModelConfig& c = m.config();
  const LayerWeights& l = m.layers[size_t(li)];
  const int64_t t = x_in.dim(0), hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const float eps = float(c.rms_norm_eps);
  const bool p1 = c.norm_plus_one;
  auto dropout = [&](int projection) {
    return ops::LoraDropout{tape.dropout_p, lora_dropout_seed(tape.dropout_seed, li, projection)};
  };
  ops::ScratchScope scope(ctx);
  // Attention block.
  ops::rms_norm_save(ctx, x_in, l.input_norm, eps, p1, sv.h_attn, sv.inv_rms_in);
  {
    ops::ScratchScope inner(ctx);
    const LinearInput in = training_input(ctx, sv.h_attn, {&l.q, &l.k, &l.v});
    const TensorView v = ops::scratch_alloc(ctx, {t, c.kv_dim()}, ctx.activation_dtype());
    const ops::Projection qkv[] = {projection(l.q, sv.q_pre, dropout(0)),
                                   projection(l.k, sv.k_pre, dropout(1)),
                                   projection(l.v, v, dropout(2))};
    ops::linear_group(ctx, in, qkv);
    const TensorView inv_freq = rope_frequencies(l);
    const TensorView k = ops::scratch_alloc(ctx, {t, hkv, d}, ctx.activation_dtype());
    ops::rms_norm_rope_save(ctx, sv.q_pre.reshape({t, hq, d}), c.qk_norm ? l.q_norm : TensorView(),
                            eps, p1, step.positions, inv_freq, sv.q.reshape({t, hq, d}),
                            sv.q_inv_rms);
    ops::rms_norm_rope_save(ctx, sv.k_pre.reshape({t, hkv, d}), c.qk_norm ? l.k_norm : TensorView(),
                            eps, p1, step.positions, inv_freq, k, sv.k_inv_rms);
    const ops::KvScales kv_scales{kv.k_scale(li), kv.v_scale(li)};
    CHECK(kv_scales.k.empty(), "training forward: an FP8 KV pool is not differentiable");
    ops::store_kv(ctx, k, v.reshape({t, hkv, d}), step.slot_mapping, kv.k(li), kv.v(li), kv_scales);
    ops::paged_attention_lse(ctx, sv.q.reshape({t, hq, d}), kv.k(li), kv.v(li), step.attn,
                             attention_params(c, l), sv.attn.reshape({t, hq, d}),
                             sv.lse.reshape({t, hq}));
  }
  const TensorView proj = ops::scratch_alloc(ctx, {t, c.hidden_size}, ctx.activation_dtype());
  {
    LinearInput o_in;
    o_in.x = sv.attn;
    ops::ScratchScope inner(ctx);
    if (shared_dynamic_act({&l.o}) != ActScaling::none) o_in = training_input(ctx, sv.attn, {&l.o});
    apply(ctx, o_in, l.o, c.sandwich_norms ? sv.o_out : proj, dropout(3));
  }
  if (c.sandwich_norms)
    ops::rms_norm_save(ctx, sv.o_out, l.post_attention_norm, eps, p1, proj, sv.inv_rms_o);
  ops::add(ctx, x_in, proj, sv.x_mid);
  // MLP block.
  const TensorView& mlp_norm = c.sandwich_norms ? l.pre_feedforward_norm : l.post_attention_norm;
  ops::rms_norm_save(ctx, sv.x_mid, mlp_norm, eps, p1, sv.h_mlp, sv.inv_rms_mid);
  {
    ops::ScratchScope inner(ctx);
    const LinearInput in = training_input(ctx, sv.h_mlp, {&l.gate, &l.up});
    const ops::Projection gate_up[] = {projection(l.gate, sv.gate, dropout(4)),
                                       projection(l.up, sv.up, dropout(5))};
    ops::linear_group(ctx, in, gate_up);
  }
  if (c.activation == MlpActivation::silu)
    ops::silu_mul(ctx, sv.gate, sv.up, sv.act);
  else
    ops::gelu_tanh_mul(ctx, sv.gate, sv.up, sv.act);
  {
    ops::ScratchScope inner(ctx);
    const LinearInput in = training_input(ctx, sv.act, {&l.down});
    apply(ctx, in, l.down, c.sandwich_norms ? sv.down_out : proj, dropout(6));
  }
  if (c.sandwich_norms)
    ops::rms_norm_save(ctx, sv.down_out, l.post_feedforward_norm, eps, p1, proj, sv.inv_rms_down);
  ops::add(ctx, sv.x_mid, proj, x_out);
}

void forward(Context& ctx, const Model& m, const KvPool& kv, const StepBatch& step, Tape& tape) {
  const ModelConfig& c = m.config();
  CHECK(m.device() == ctx.device && kv.device() == ctx.device,
        "training forward: the model is on {}, the KV pool on {}, the context on {}",
        device_name(m.device()), device_name(kv.device()), device_name(ctx.device));
  const int64_t t = step.num_tokens();
  CHECK(t > 0 && tape.h_final.dim(0) == t && int64_t(tape.x_in.size()) == c.num_layers,
        "training forward: the tape holds {} rows for {} layers, the step {} tokens",
        tape.h_final.empty() ? 0 : tape.h_final.dim(0), tape.x_in.size(), t);
  ops::embedding(ctx, step.ids, m.embed, float(c.embedding_scale), tape.x_in[0]);
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const TensorView& x_out = li + 1 < c.num_layers ? tape.x_in[size_t(li + 1)] : tape.x_final;
    forward_layer_saving(ctx, m, li, kv, step, tape, tape.x_in[size_t(li)], tape.layer(li), x_out);
    // Offloading: the layer's input leaves before the next layer writes over its buffer.
    if (!tape.x_host.empty()) ops::copy(ctx, tape.x_in[size_t(li)], tape.x_host[size_t(li)]);
  }
  ops::rms_norm_save(ctx, tape.x_final, m.final_norm, float(c.rms_norm_eps), c.norm_plus_one,
                     tape.h_final, tape.inv_rms_final);
}

namespace {

// The batch-invariant forward (ops/exactness.h): every layer through the training forward's
// code with no dropout, the final norm and lm_head of the logit rows as the pass's loss
// computes them, so a token's logits are bit-identical to a training pass's over its sequence
// (the pass's kernels are batch-invariant in this mode too).
void forward_invariant(Context& ctx, const Model& m, const KvPool& kv, const StepBatch& step,
                       const TensorView& logits) {
  const ModelConfig& c = m.config();
  CHECK(kv.kv_dtype() != KvDType::f8e4m3,
        "batch-invariant forward: the KV pool must hold the activation dtype (the training pass "
        "keeps keys and values unquantized), not FP8");
  const int64_t t = step.num_tokens(), rows = step.num_logit_rows();
  const DType dt = ctx.activation_dtype();
  ops::ScratchScope scope(ctx);
  TensorView x = ops::scratch_alloc(ctx, {t, c.hidden_size}, dt);  // [T, H]
  TensorView y = ops::scratch_alloc(ctx, {t, c.hidden_size}, dt);  // [T, H]
  ops::embedding(ctx, step.ids, m.embed, float(c.embedding_scale), x);
  {
    ops::ScratchScope layers(ctx);
    const Tape tape;  // no dropout, as in the pass that recomputes the logprobs
    LayerSaved saved = alloc_layer_saved(
        [&](Shape shape, DType d) { return ops::scratch_alloc(ctx, shape, d); }, c, t, dt);
    for (int64_t li = 0; li < c.num_layers; ++li) {
      forward_layer_saving(ctx, m, li, kv, step, tape, x, saved, y);
      std::swap(x, y);
    }
  }
  if (rows == 0) return;
  const TensorView final_in = ops::scratch_alloc(ctx, {rows, c.hidden_size}, dt);  // [R, H]
  const TensorView h = ops::scratch_alloc(ctx, {rows, c.hidden_size}, dt);         // [R, H]
  const TensorView inv_rms = ops::scratch_alloc(ctx, {rows}, DType::f32);          // [R]
  ops::embedding(ctx, step.logit_rows, x, 1.0f, final_in);
  ops::rms_norm_save(ctx, final_in, m.final_norm, float(c.rms_norm_eps), c.norm_plus_one, h,
                     inv_rms);
  ops::linear(ctx, h, m.lm_head, logits, ops::Output::f32);
  if (c.final_logit_softcapping > 0)
    ops::softcap(ctx, logits, float(c.final_logit_softcapping), ops::Output::f32);
}

}  // namespace

void forward(Context& ctx, const Model& m, const KvPool& kv, const StepBatch& step,
             const TensorView& logits) {
  const ModelConfig& c = m.config();
  CHECK(m.device() == ctx.device && kv.device() == ctx.device,
        "forward: the model is on {}, the KV pool on {}, the context on {}",
        device_name(m.device()), device_name(kv.device()), device_name(ctx.device));
  CHECK((kv.kv_dtype() == KvDType::f8e4m3 || kv.dtype() == ctx.activation_dtype()) &&
            kv.num_layers() == c.num_layers,
        "forward: the KV pool ({} layers of {}) does not fit the model and context",
        kv.num_layers(), dtype_name(kv.dtype()));
  const int64_t t = step.num_tokens(), rows = step.num_logit_rows();
  CHECK(t > 0, "forward: empty step");
  CHECK(logits.dtype == DType::f32 && logits.shape == (Shape{rows, c.vocab_size}) &&
            logits.is_contiguous() && logits.device == ctx.device,
        "forward: logits must be contiguous f32 [{}, {}] on {}, got {} {} on {}", rows,
        c.vocab_size, device_name(ctx.device), dtype_name(logits.dtype), logits.shape.str(),
        device_name(logits.device));
  if (ops::batch_invariant(ctx)) {
    forward_invariant(ctx, m, kv, step, logits);
    return;
  }

  ops::ScratchScope scope(ctx);
  const Activations s = alloc_activations(ctx, m, t);
  const float eps = float(c.rms_norm_eps);
  ops::embedding(ctx, step.ids, m.embed, float(c.embedding_scale), s.x);
  // The normed input of the next block's linears. Each residual add is fused with the norm
  // that follows it: x += attention output with the MLP's input norm, x += MLP output with the
  // next layer's input norm (the last layer's add stays plain: the final norm only normalizes
  // the rows whose logits are wanted). One block input is live at a time, so each takes the
  // same arena space, right after the activations.
  const size_t input_mark = ops::scratch_mark(ctx);
  auto block_input = [&](const TensorView* delta, const TensorView& norm,
                         std::initializer_list<const Linear*> consumers) {
    ops::scratch_rewind(ctx, input_mark);
    return normed(ctx, c, s.x, delta, norm, shared_dynamic_act(consumers), any_adapter(consumers),
                  s.h);
  };
  LinearInput in;
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const LayerWeights& l = m.layers[size_t(li)];
    if (li == 0) in = block_input(nullptr, l.input_norm, {&l.q, &l.k, &l.v});
    attention_block(ctx, m, li, kv, step, in, s);
    // Gemma's sandwich norms normalize each block's output before it joins the residual.
    if (c.sandwich_norms)
      ops::rms_norm(ctx, s.proj, l.post_attention_norm, eps, c.norm_plus_one, s.proj);
    const TensorView& mlp_norm = c.sandwich_norms ? l.pre_feedforward_norm : l.post_attention_norm;
    in = block_input(&s.proj, mlp_norm, {&l.gate, &l.up});
    mlp_block(ctx, m, l, in, s);
    if (c.sandwich_norms)
      ops::rms_norm(ctx, s.proj, l.post_feedforward_norm, eps, c.norm_plus_one, s.proj);
    if (li + 1 < c.num_layers) {
      const LayerWeights& next = m.layers[size_t(li + 1)];
      in = block_input(&s.proj, next.input_norm, {&next.q, &next.k, &next.v});
    } else {
      ops::add(ctx, s.x, s.proj, s.x);
    }
  }
  if (rows == 0) return;
  // Final norm and lm_head only for the rows whose logits are wanted, gathered by the lookup
  // that embeds tokens (a row gather with scale 1, exact).
  const TensorView final_in =
      ops::scratch_alloc(ctx, {rows, c.hidden_size}, ctx.activation_dtype());
  ops::embedding(ctx, step.logit_rows, s.x, 1.0f, final_in);
  ops::rms_norm(ctx, final_in, m.final_norm, eps, c.norm_plus_one, final_in);
  ops::linear(ctx, final_in, m.lm_head, logits, ops::Output::f32);
  if (c.final_logit_softcapping > 0)
    ops::softcap(ctx, logits, float(c.final_logit_softcapping), ops::Output::f32);
}

void run_step(Context& ctx, const Model& m, const KvPool& kv, StepInput& in,
              const TensorView& logits) {
  ops::ScratchScope scope(ctx);
  in.pack_block_tables();
  const TensorView storage = ops::scratch_alloc(ctx, {step_elements(in)}, DType::i32);
  const StepBatch step = upload_step(ctx, in, storage);
  // The lm_head writes fp32 logits on the device; host logits are copied back once.
  const bool staged = logits.device != ctx.device;
  const TensorView out = staged ? ops::scratch_alloc(ctx, logits.shape, DType::f32) : logits;
  forward(ctx, m, kv, step, out);
  if (staged) ops::copy(ctx, out, logits);
}

size_t measure_forward_scratch(const Context& ctx, const Model& m, const KvPool& kv,
                               const StepShape& shape) {
  CHECK(shape.tokens > 0 && shape.seqs > 0 && shape.logit_rows >= 0 && shape.max_context > 0,
        "forward plan: tokens {} seqs {} logit rows {} context {} must be positive", shape.tokens,
        shape.seqs, shape.logit_rows, shape.max_context);
  Arena measuring = Arena::measuring(ctx.device, ops::scratch_alignment(ctx));
  Context dry = ctx;
  dry.dry_run = true;
  dry.scratch = &measuring;
  StepInput in = step_of_shape(shape, kv.block_size());
  const TensorView logits(measuring.base(), DType::f32,
                          {in.num_logit_rows(), m.config().vocab_size}, Device::cpu);
  run_step(dry, m, kv, in, logits);  // host logits: the staging buffer is counted too
  return measuring.high_water();
}

void forward(Context& ctx, const Model& m, std::span<const SequenceInput> batch, LogitRows rows,
             const TensorView& logits) {
  const ModelConfig& c = m.config();
  CHECK(!batch.empty(), "forward: empty batch");
  KvPool& pool = batch[0].cache->pool();
  StepInput in;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& seq = batch[i];
    CHECK(seq.cache != nullptr, "forward: sequence {} has no KV cache", i);
    CHECK(&seq.cache->pool() == &pool,
          "forward: the sequences of a batch must share one KV pool "
          "(KvCache(pool, capacity))");
    CHECK(seq.tokens.size() == seq.positions.size() && !seq.tokens.empty(),
          "forward: a sequence needs as many positions ({}) as new tokens ({}), at least one",
          seq.positions.size(), seq.tokens.size());
    const int64_t first = seq.cache->length(), n = int64_t(seq.tokens.size());
    CHECK(first + n <= seq.cache->capacity(),
          "forward: {} new tokens do not fit the KV cache ({} of {} slots used)", n, first,
          seq.cache->capacity());
    for (int64_t j = 0; j < n; ++j)
      CHECK(seq.positions[size_t(j)] == first + j,
            "forward: sequence {} token {} has position {}, its cache slot is {}", i, j,
            seq.positions[size_t(j)], first + j);
    in.add_sequence(seq.tokens, first, seq.cache->blocks(), pool.block_size(),
                    rows == LogitRows::all ? StepInput::Logits::all : StepInput::Logits::last);
  }
  in.validate(c, pool.num_blocks(), pool.block_size());
  CHECK(logits.dtype == DType::f32 && logits.shape == (Shape{in.num_logit_rows(), c.vocab_size}) &&
            logits.is_contiguous() && (logits.device == ctx.device || logits.device == Device::cpu),
        "forward: logits must be contiguous f32 [{}, {}] on the host or {}, got {} {} on {}",
        in.num_logit_rows(), c.vocab_size, device_name(ctx.device), dtype_name(logits.dtype),
        logits.shape.str(), device_name(logits.device));
  if (ops::scratch_mark(ctx) == 0) {
    StepShape shape{in.num_tokens(), in.num_seqs(), in.num_logit_rows(), in.max_context_len};
    ops::scratch_reserve(ctx, measure_forward_scratch(ctx, m, pool, shape));
  }
  run_step(ctx, m, pool, in, logits);
  for (const SequenceInput& seq : batch) seq.cache->advance(int64_t(seq.tokens.size()));
}

}  // namespace fp8rl
