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
  TensorView k;     // [T,Hkv*D] the new keys before their norm and RoPE
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
ActScaling shared_dynamic_act(std::initializer_list<const LinearWeight*> consumers) {
  const ActScaling a = (*consumers.begin())->act;
  if (a != ActScaling::token && a != ActScaling::group && a != ActScaling::tensor)
    return ActScaling::none;
  for (const LinearWeight* w : consumers)
    if (!w->is_fp8() || w->act != a) return ActScaling::none;
  return a;
}

using ops::LinearInput;

}  // namespace

ops::AttentionParams attention_params(const ModelConfig& c, const LayerWeights& l) {
  ops::AttentionParams p;
  // transformers scales cos and sin by YaRN's attention factor, which scales every q.k by its
  // square: the same scores come from the softmax scale, with no change to the RoPE kernels
  // (which then stay the plain rotation the backward inverts).
  p.scale = float(c.attention_scale * l.rope_attention_factor * l.rope_attention_factor);
  p.softcap = float(c.attn_logit_softcapping);
  p.window = l.sliding ? c.sliding_window : 0;
  return p;
}

ops::GatedActivation gated_activation(const ModelConfig& c) {
  return c.activation == MlpActivation::silu ? ops::GatedActivation::silu
                                             : ops::GatedActivation::gelu_tanh;
}

TensorView rope_frequencies(const LayerWeights& l) {
  if (!l.rope_freq.empty()) return l.rope_freq;
  return TensorView(const_cast<float*>(l.inv_freq.data()), DType::f32,
                    {int64_t(l.inv_freq.size())});
}

namespace {

// The step's activations as one layer's set: the buffers the inference forward reuses across
// a layer (one normed input for both blocks, q/k/v normed and rotated in place, act(gate) * up
// over gate, the block outputs in proj) and no statistics (the inverse RMS and log-sum-exp views
// are empty: nothing is saved).
LayerSaved step_set(const Activations& s) {
  LayerSaved b;
  b.h_attn = b.h_mlp = s.h;
  b.q_pre = b.q = s.q;
  b.k_pre = s.k;
  b.attn = s.attn;
  b.o_out = b.down_out = s.proj;
  b.x_mid = s.x;
  b.gate = b.act = s.gate;
  b.up = s.up;
  return b;
}

// The residual stream through one layer.
struct Residual {
  TensorView x;        // [T,H] the stream entering the layer
  TensorView pending;  // [T,H] the previous block's output still to join x, or empty
  TensorView x_out;    // [T,H] saving: the stream leaving the layer
};

// The input of a group of linears from a plain activation h (LoRA's x), quantized once when
// the FP8 linears share a dynamic scaling (so the backend's group op gets both).
LinearInput quantized_input(Context& ctx, const TensorView& h,
                            std::initializer_list<const LinearWeight*> consumers) {
  LinearInput in;
  in.x = h;
  const ActScaling act = shared_dynamic_act(consumers);
  if (act != ActScaling::none) {
    in.q = ops::alloc_quantized(ctx, act, h.dim(0), h.dim(1));
    ops::quantize(ctx, h, in.q);
  }
  return in;
}

// The normed input of a block's linears: rms_norm(x + delta) (delta empty: of x), quantized for
// the linears when they share a dynamic scaling. Saving, the sum goes to `sum` and the norm
// writes h and inv_rms. Otherwise the add happens in place (sum is x) fused into the norm,
// which also quantizes; h is written only when the linears are not quantized or one of them
// has an adapter (LoRA reads the plain input beside the codes, both from the one pass).
LinearInput block_input(Context& ctx, const ModelConfig& c, bool saving, const TensorView& x,
                        const TensorView& delta, const TensorView& sum, const TensorView& w,
                        std::initializer_list<const LinearWeight*> consumers, bool adapted,
                        const TensorView& h, const TensorView& inv_rms) {
  const float eps = float(c.rms_norm_eps);
  const bool p1 = c.norm_plus_one, add = !delta.empty();
  const ActScaling act = shared_dynamic_act(consumers);
  LinearInput in;
  if (act != ActScaling::none) in.q = ops::alloc_quantized(ctx, act, x.dim(0), x.dim(1));
  if (saving) {
    if (add) ops::add(ctx, x, delta, sum);
    const TensorView& in_x = add ? sum : x;
    ops::rms_norm_save(ctx, in_x, w, eps, p1, h, inv_rms);
    in.x = h;
    // Quantized by the op the inference layer fuses (its values, not h's bf16 rounding): the
    // trainer's FP8 linears see the engine's codes.
    if (act != ActScaling::none) ops::rms_norm_quant(ctx, in_x, w, eps, p1, in.q);
    return in;
  }
  CHECK(sum.data == x.data, "forward: the inference layer adds its residual in place");
  if (act == ActScaling::none || adapted) in.x = h;
  if (act != ActScaling::none) {
    if (add)
      ops::add_rms_norm_quant(ctx, x, delta, w, eps, p1, in.q, in.x);
    else
      ops::rms_norm_quant(ctx, x, w, eps, p1, in.q, in.x);
  } else if (add) {
    ops::add_rms_norm(ctx, x, delta, w, eps, p1, h);
  } else {
    ops::rms_norm(ctx, x, w, eps, p1, h);
  }
  return in;
}

// out = rms_norm(x), saving inv_rms when given (Gemma's sandwich norms of a block output).
void norm_into(Context& ctx, const ModelConfig& c, const TensorView& x, const TensorView& w,
               const TensorView& out, bool saving, const TensorView& inv_rms) {
  if (saving)
    ops::rms_norm_save(ctx, x, w, float(c.rms_norm_eps), c.norm_plus_one, out, inv_rms);
  else
    ops::rms_norm(ctx, x, w, float(c.rms_norm_eps), c.norm_plus_one, out);
}

// One decoder layer over the whole step: the one layer body of the engine's forward, the
// training forward and its checkpoint recompute, and the batch-invariant mode.
//
// `set` says where each activation goes. Inference (tape == nullptr): the step's buffers
// (step_set), the stream updated in place, each block's output left in s.proj for the next
// norm to add (r.pending), the fused norm / quantize / RoPE-and-store / attention-quantize ops.
// Saving (tape given: its adapter dropout): a LayerSaved the backward reads, r.x kept (a
// checkpointed layer is recomputed from its input alone) and r.x_out = the layer's output;
// the norms, q/k norms and attention also write their inverse RMS and log-sum-exp.
void decoder_layer(Context& ctx, const Model& m, const LoraAdapter* adapter, int64_t li,
                   const KvPool& kv, const StepBatch& step, Residual& r, const LayerSaved& set,
                   const TensorView& proj, const Tape* tape) {
  const ModelConfig& c = m.config();
  const LayerWeights& l = m.layers[size_t(li)];
  const int64_t t = r.x.dim(0), hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const float eps = float(c.rms_norm_eps);
  const bool p1 = c.norm_plus_one, saving = tape != nullptr;
  const DType dt = ctx.activation_dtype();
  CHECK(!saving || r.pending.empty(), "forward: a saving layer takes its input stream whole");
  // The adapter's term of each projection (kProjectionNames order), empty where it has none.
  LoraWeights lora[kProjections];
  if (adapter != nullptr)
    for (int p = 0; p < kProjections; ++p) lora[p] = adapter->weights(li, p, ctx.device);
  // Projection p of the layer as the group op takes it, writing `out`.
  // The LoRA dropout of projection p (training passes only).
  auto dropout_of = [&](int p) {
    return saving ? ops::LoraDropout{tape->dropout_p, lora_dropout_seed(tape->dropout_seed, li, p)}
                  : ops::LoraDropout{};
  };
  auto projection = [&](int p, const TensorView& out) {
    return ops::Projection{l.projection(p), lora[p], out, dropout_of(p)};
  };
  const ops::KvScales kv_scales{kv.k_scale(li), kv.v_scale(li)};  // empty unless FP8 KV
  CHECK(!saving || kv_scales.k.empty(), "training forward: an FP8 KV pool is not differentiable");

  // Attention block: q/k/v, q/k norm and RoPE with the new keys/values into their pool slots,
  // paged attention, o_proj.
  {
    ops::ScratchScope scope(ctx);
    const LinearInput in = block_input(
        ctx, c, saving, r.x, r.pending, r.x, l.input_norm, {&l.q, &l.k, &l.v},
        lora[0].active() || lora[1].active() || lora[2].active(), set.h_attn, set.inv_rms_in);
    const TensorView v = ops::scratch_alloc(ctx, {t, c.kv_dim()}, dt);
    const ops::Projection qkv[] = {projection(0, set.q_pre), projection(1, set.k_pre),
                                   projection(2, v)};
    ops::linear_group(ctx, in, qkv, l.qkv.weight.empty() ? nullptr : &l.qkv);
    const TensorView inv_freq = rope_frequencies(l);
    const TensorView q = set.q.reshape({t, hq, d});
    if (saving) {
      const TensorView k = ops::scratch_alloc(ctx, {t, hkv, d}, dt);
      ops::rms_norm_rope_save(ctx, set.q_pre.reshape({t, hq, d}),
                              c.qk_norm ? l.q_norm : TensorView(), eps, p1, step.positions,
                              inv_freq, q, set.q_inv_rms);
      ops::rms_norm_rope_save(ctx, set.k_pre.reshape({t, hkv, d}),
                              c.qk_norm ? l.k_norm : TensorView(), eps, p1, step.positions,
                              inv_freq, k, set.k_inv_rms);
      ops::store_kv(ctx, k, v.reshape({t, hkv, d}), step.slot_mapping, kv.k(li), kv.v(li),
                    kv_scales);
    } else {
      ops::QkRope qk;
      if (c.qk_norm) {
        qk.q_norm = l.q_norm;
        qk.k_norm = l.k_norm;
      }
      qk.eps = eps;
      qk.plus_one = p1;
      qk.positions = step.positions;
      qk.inv_freq = inv_freq;
      ops::rope_store_kv(ctx, set.q_pre.reshape({t, hq, d}), set.k_pre.reshape({t, hkv, d}),
                         v.reshape({t, hkv, d}), qk, step.slot_mapping, kv.k(li), kv.v(li),
                         kv_scales, q);
    }
    const ops::AttentionParams p = attention_params(c, l);
    const TensorView attn = set.attn.reshape({t, hq, d});
    // A dynamically scaled FP8 o_proj reads the attention's output as the attention op
    // quantizes it (its adapter the output itself).
    const ActScaling o_act = shared_dynamic_act({&l.o});
    LinearInput o_in;
    if (saving) {
      ops::paged_attention_lse(ctx, q, kv.k(li), kv.v(li), step.attn, p, attn,
                               set.lse.reshape({t, hq}));
      o_in = quantized_input(ctx, set.attn, {&l.o});
    } else if (o_act == ActScaling::token || o_act == ActScaling::group) {
      o_in.q = ops::alloc_quantized(ctx, o_act, t, hq * d);
      if (lora[3].active()) o_in.x = set.attn;
      ops::paged_attention(ctx, q, kv.k(li), kv.v(li), step.attn, p, attn, {}, kv_scales, &o_in.q);
    } else {
      ops::paged_attention(ctx, q, kv.k(li), kv.v(li), step.attn, p, attn, {}, kv_scales);
      o_in = quantized_input(ctx, set.attn, {&l.o});
    }
    const ops::Projection o[] = {projection(3, c.sandwich_norms ? set.o_out : proj)};
    ops::linear_group(ctx, o_in, o);
  }
  // Gemma's sandwich norms normalize each block's output before it joins the residual.
  if (c.sandwich_norms)
    norm_into(ctx, c, set.o_out, l.post_attention_norm, proj, saving, set.inv_rms_o);

  // MLP block: gate/up, act(gate) * up, down_proj; in an MoE layer, the router's top-k
  // experts, each such an MLP, weighted and summed.
  if (!l.moe.empty()) {
    ops::ScratchScope scope(ctx);
    const TensorView& mlp_norm = c.sandwich_norms ? l.pre_feedforward_norm : l.post_attention_norm;
    // The router reads the plain normed input; each expert quantizes its own rows.
    const LinearInput in = block_input(ctx, c, saving, r.x, proj, set.x_mid, mlp_norm,
                                       {&l.moe.router}, false, set.h_mlp, set.inv_rms_mid);
    // [T, k] each; saving, the tape's (the backward reads them).
    const int64_t k = c.moe.top_k;
    const TensorView weights = saving ? set.route_w : ops::scratch_alloc(ctx, {t, k}, DType::f32);
    const TensorView experts = saving ? set.route_ids : ops::scratch_alloc(ctx, {t, k}, DType::i32);
    const auto layer_rows = [&](const TensorView& all) {  // layer li's [T, k] of [L, T, k]
      return all.slice_rows(li, li + 1).reshape({t, k});
    };
    const bool replay = !step.routing_replay.empty();
    if (replay) {
      // Device ids are not read back: the replayed ones are checked here, on their host copy.
      if (ctx.device != Device::cpu && !ctx.dry_run)
        ops::check_replayed_experts(layer_rows(step.routing_replay), l.moe.router.out_features());
      ops::copy(ctx, layer_rows(step.routing_replay), experts);
    }
    ops::moe_route(
        ctx, in.x, l.moe.router, c.moe.norm_topk_prob, weights, experts, replay,
        replay && !step.routing_chosen.empty() ? layer_rows(step.routing_chosen) : TensorView());
    if (!step.routing_record.empty()) ops::copy(ctx, experts, layer_rows(step.routing_record));
    // The adapter's gate, up and down are the experts' (A and B stacked per expert).
    ops::moe_experts(
        ctx, in.x, l.moe, gated_activation(c), weights, experts,
        c.sandwich_norms ? set.down_out : proj,
        MoeLora{lora[4], lora[5], lora[6], dropout_of(4), dropout_of(5), dropout_of(6)});
  } else {
    ops::ScratchScope scope(ctx);
    const TensorView& mlp_norm = c.sandwich_norms ? l.pre_feedforward_norm : l.post_attention_norm;
    const LinearInput in =
        block_input(ctx, c, saving, r.x, proj, set.x_mid, mlp_norm, {&l.gate, &l.up},
                    lora[4].active() || lora[5].active(), set.h_mlp, set.inv_rms_mid);
    const ops::Projection gate_up[] = {projection(4, set.gate), projection(5, set.up)};
    ops::linear_group(ctx, in, gate_up);
    const bool silu = c.activation == MlpActivation::silu;
    // A dynamically scaled FP8 down_proj reads act(gate) * up quantized by the activation op,
    // written in bf16 too for its adapter or the backward (the engine and the trainer so
    // quantize the same way).
    const ActScaling down_act = shared_dynamic_act({&l.down});
    LinearInput down_in;
    if (down_act != ActScaling::none) {
      down_in.q = ops::alloc_quantized(ctx, down_act, t, c.intermediate_size);
      if (saving || lora[6].active()) down_in.x = set.act;
      if (silu)
        ops::silu_mul_quant(ctx, set.gate, set.up, down_in.q, down_in.x);
      else
        ops::gelu_tanh_mul_quant(ctx, set.gate, set.up, down_in.q, down_in.x);
    } else {
      if (silu)
        ops::silu_mul(ctx, set.gate, set.up, set.act);
      else
        ops::gelu_tanh_mul(ctx, set.gate, set.up, set.act);
      down_in = quantized_input(ctx, set.act, {&l.down});
    }
    const ops::Projection down[] = {projection(6, c.sandwich_norms ? set.down_out : proj)};
    ops::linear_group(ctx, down_in, down);
  }
  if (c.sandwich_norms)
    norm_into(ctx, c, set.down_out, l.post_feedforward_norm, proj, saving, set.inv_rms_down);
  if (saving)
    ops::add(ctx, set.x_mid, proj, r.x_out);
  else
    r.pending = proj;
}

}  // namespace

void forward_layer_saving(Context& ctx, const Model& m, const LoraAdapter* adapter, int64_t li,
                          const KvPool& kv, const StepBatch& step, const Tape& tape,
                          const TensorView& x_in, LayerSaved& sv, const TensorView& x_out) {
  ops::ScratchScope scope(ctx);
  const TensorView proj =
      ops::scratch_alloc(ctx, {x_in.dim(0), m.config().hidden_size}, ctx.activation_dtype());
  Residual r{x_in, {}, x_out};
  decoder_layer(ctx, m, adapter, li, kv, step, r, sv, proj, &tape);
}

namespace {

// An adapter given to the forward must have been made for the model and live on its device.
void check_adapter(const Model& m, const LoraAdapter* adapter) {
  CHECK(adapter == nullptr ||
            (adapter->num_layers() == m.config().num_layers && adapter->device() == m.device()),
        "forward: the adapter ({} layers on {}) does not fit the model ({} layers on {})",
        adapter->num_layers(), device_name(adapter->device()), m.config().num_layers,
        device_name(m.device()));
}

}  // namespace

void forward(Context& ctx, const Model& m, const LoraAdapter* adapter, const KvPool& kv,
             const StepBatch& step, Tape& tape) {
  const ModelConfig& c = m.config();
  check_adapter(m, adapter);
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
    forward_layer_saving(ctx, m, adapter, li, kv, step, tape, tape.x_in[size_t(li)], tape.layer(li),
                         x_out);
    // Offloading: the layer's input leaves before the next layer writes over its buffer.
    if (!tape.x_host.empty()) ops::copy(ctx, tape.x_in[size_t(li)], tape.x_host[size_t(li)]);
  }
  ops::rms_norm_save(ctx, tape.x_final, m.final_norm, float(c.rms_norm_eps), c.norm_plus_one,
                     tape.h_final, tape.inv_rms_final);
}

void forward(Context& ctx, const Model& m, const LoraAdapter* adapter, const KvPool& kv,
             const StepBatch& step, const TensorView& logits, const LinearWeight* head) {
  const ModelConfig& c = m.config();
  // A classifier's logits are its scores: no softcap (transformers applies it in the LM only).
  const bool lm = head == nullptr && !c.sequence_classification;
  if (head == nullptr) head = &m.lm_head;
  const int64_t width = head->weight.dim(0);
  CHECK(head->weight.shape == (Shape{width, c.hidden_size}),
        "forward: the output head is {}, the model's hidden size {}", head->weight.shape.str(),
        c.hidden_size);
  check_adapter(m, adapter);
  CHECK(m.device() == ctx.device && kv.device() == ctx.device,
        "forward: the model is on {}, the KV pool on {}, the context on {}",
        device_name(m.device()), device_name(kv.device()), device_name(ctx.device));
  CHECK((kv.kv_dtype() == KvDType::f8e4m3 || kv.dtype() == ctx.activation_dtype()) &&
            kv.num_layers() == c.num_layers,
        "forward: the KV pool ({} layers of {}) does not fit the model and context",
        kv.num_layers(), dtype_name(kv.dtype()));
  const int64_t t = step.num_tokens(), rows = step.num_logit_rows();
  CHECK(t > 0, "forward: empty step");
  CHECK(logits.dtype == DType::f32 && logits.shape == (Shape{rows, width}) &&
            logits.is_contiguous() && logits.device == ctx.device,
        "forward: logits must be contiguous f32 [{}, {}] on {}, got {} {} on {}", rows, width,
        device_name(ctx.device), dtype_name(logits.dtype), logits.shape.str(),
        device_name(logits.device));
  // The batch-invariant mode runs this same forward: the backend pins its kernels, and each
  // fused op here equals the unfused ops of the training forward bit for bit.
  CHECK(!ops::batch_invariant(ctx) || kv.kv_dtype() != KvDType::f8e4m3,
        "batch-invariant forward: the KV pool must hold the activation dtype (the training pass "
        "keeps keys and values unquantized), not FP8");

  ops::ScratchScope scope(ctx);
  const Activations s = alloc_activations(ctx, m, t);
  const LayerSaved set = step_set(s);
  ops::embedding(ctx, step.ids, m.embed, float(c.embedding_scale), s.x);
  // Each block's output joins the stream in the norm that follows it (the last one's add stays
  // plain: the final norm only normalizes the rows whose logits are wanted).
  Residual r{s.x, {}, {}};
  for (int64_t li = 0; li < c.num_layers; ++li)
    decoder_layer(ctx, m, adapter, li, kv, step, r, set, s.proj, nullptr);
  ops::add(ctx, s.x, r.pending, s.x);
  if (rows == 0) return;
  // Final norm and lm_head only for the rows whose logits are wanted, gathered by the lookup
  // that embeds tokens (a row gather with scale 1, exact).
  const TensorView final_in =
      ops::scratch_alloc(ctx, {rows, c.hidden_size}, ctx.activation_dtype());
  ops::embedding(ctx, step.logit_rows, s.x, 1.0f, final_in);
  ops::rms_norm(ctx, final_in, m.final_norm, float(c.rms_norm_eps), c.norm_plus_one, final_in);
  ops::linear(ctx, final_in, *head, logits, ops::Output::f32);
  if (lm && c.final_logit_softcapping > 0)
    ops::softcap(ctx, logits, float(c.final_logit_softcapping), ops::Output::f32);
}

void run_step(Context& ctx, const Model& m, const LoraAdapter* adapter, const KvPool& kv,
              StepInput& in, const TensorView& logits, const LinearWeight* head) {
  ops::ScratchScope scope(ctx);
  in.pack_block_tables();
  const TensorView storage = ops::scratch_alloc(ctx, {step_elements(in)}, DType::i32);
  const StepBatch step = upload_step(ctx, in, storage);
  // The lm_head writes fp32 logits on the device; host logits are copied back once.
  const bool staged = logits.device != ctx.device;
  const TensorView out = staged ? ops::scratch_alloc(ctx, logits.shape, DType::f32) : logits;
  forward(ctx, m, adapter, kv, step, out, head);
  if (staged) ops::copy(ctx, out, logits);
}

size_t measure_forward_scratch(const Context& ctx, const Model& m, const LoraAdapter* adapter,
                               const KvPool& kv, const StepShape& shape, const LinearWeight* head) {
  CHECK(shape.tokens > 0 && shape.seqs > 0 && shape.logit_rows >= 0 && shape.max_context > 0,
        "forward plan: tokens {} seqs {} logit rows {} context {} must be positive", shape.tokens,
        shape.seqs, shape.logit_rows, shape.max_context);
  Arena measuring = Arena::measuring(ctx.device, ops::scratch_alignment(ctx));
  Context dry = ctx;
  dry.dry_run = true;
  dry.scratch = &measuring;
  StepInput in = step_of_shape(shape, kv.block_size());
  const int64_t width = head != nullptr ? head->weight.dim(0) : m.config().output_size();
  const TensorView logits(measuring.base(), DType::f32, {in.num_logit_rows(), width}, Device::cpu);
  run_step(dry, m, adapter, kv, in, logits,
           head);  // host logits: the staging buffer is counted too
  return measuring.high_water();
}

void forward(Context& ctx, const Model& m, const LoraAdapter* adapter,
             std::span<const SequenceInput> batch, LogitRows rows, const TensorView& logits,
             const LinearWeight* head) {
  const ModelConfig& c = m.config();
  const int64_t width = head != nullptr ? head->weight.dim(0) : c.output_size();
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
  CHECK(logits.dtype == DType::f32 && logits.shape == (Shape{in.num_logit_rows(), width}) &&
            logits.is_contiguous() && (logits.device == ctx.device || logits.device == Device::cpu),
        "forward: logits must be contiguous f32 [{}, {}] on the host or {}, got {} {} on {}",
        in.num_logit_rows(), width, device_name(ctx.device), dtype_name(logits.dtype),
        logits.shape.str(), device_name(logits.device));
  if (ops::scratch_mark(ctx) == 0) {
    StepShape shape{in.num_tokens(), in.num_seqs(), in.num_logit_rows(), in.max_context_len};
    ops::scratch_reserve(ctx, measure_forward_scratch(ctx, m, adapter, pool, shape, head));
  }
  run_step(ctx, m, adapter, pool, in, logits, head);
  for (const SequenceInput& seq : batch) seq.cache->advance(int64_t(seq.tokens.size()));
}

}  // namespace fp8rl
