#include "model/backward.h"

#include "model/forward.h"
#include "ops/backward.h"

namespace fp8rl {

namespace {

// The pass's gradient sinks and what the LoRA backward needs of each projection.
struct AdapterGrads {
  const LoraAdapter& adapter;
  const TensorView& grads;
  const Tape& tape;
};

// dx (+)= dy W_hat through the frozen base, then the adapter's dA, dB (+=) and its dx (+=).
void linear_backward(Context& ctx, const AdapterGrads& g, int64_t li, int projection,
                     const Linear& w, const TensorView& x, const TensorView& dy_f32,
                     const TensorView& dx, bool accumulate) {
  ops::ScratchScope scope(ctx);
  const TensorView dy = ops::gemm_gradient(ctx, dy_f32);  // rounded once for both ops
  ops::linear_backward_input(ctx, dy, w, dx, accumulate);
  if (!g.adapter.targeted(li, projection)) return;
  const LoraAdapter& a = g.adapter;
  const ops::LoraDropout dropout{g.tape.dropout_p,
                                 lora_dropout_seed(g.tape.dropout_seed, li, projection)};
  ops::lora_backward(ctx, x, a.training_view(li, projection, false, ctx.device),
                     a.training_view(li, projection, true, ctx.device), a.scale(), dropout, dy, dx,
                     a.slice(g.grads, li, projection, false),
                     a.slice(g.grads, li, projection, true));
}

// dx += the gradient through rms_norm(x) of dh.
void norm_backward_add(Context& ctx, const ModelConfig& c, const TensorView& x, const TensorView& w,
                       const TensorView& inv_rms, const TensorView& dh, const TensorView& dx) {
  ops::ScratchScope scope(ctx);
  const TensorView d = ops::scratch_alloc(ctx, dx.shape, DType::f32);
  ops::rms_norm_backward(ctx, x, w, inv_rms, c.norm_plus_one, dh, d);
  ops::add(ctx, dx, d, dx);
}

// One layer in reverse: dx [T, H] f32 is the gradient of the layer's output on entry and of
// its input on return.
void layer_backward(Context& ctx, const Model& m, int64_t li, const KvPool& kv,
                    const StepBatch& step, const AdapterGrads& g, const TensorView& x_in,
                    const LayerSaved& sv, const TensorView& dx) {
  const ModelConfig& c = m.config();
  const LayerWeights& l = m.layers[size_t(li)];
  const int64_t t = x_in.dim(0), hq = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  const DType f32 = DType::f32;
  ops::ScratchScope scope(ctx);
  const TensorView dh = ops::scratch_alloc(ctx, {t, c.hidden_size}, f32);
  const TensorView dproj = ops::scratch_alloc(ctx, {t, c.hidden_size}, f32);
  // MLP block: x_out = x_mid + [post_ff_norm](down(act(gate(h), up(h)))), h = norm(x_mid); or
  // the MoE sum of the routed experts' such MLPs.
  TensorView d_down = dx;
  if (c.sandwich_norms) {
    ops::rms_norm_backward(ctx, sv.down_out, l.post_feedforward_norm, sv.inv_rms_down,
                           c.norm_plus_one, dx, dproj);
    d_down = dproj;
  }
  if (!l.moe.empty()) {
    // The experts (frozen, their adapters trained) and, through the routing weights, the
    // router's softmax (frozen router, fixed choice): both reach h.
    ops::ScratchScope inner(ctx);
    const TensorView d_weights = ops::scratch_alloc(ctx, sv.route_w.shape, f32);
    MoeLora lora;
    ops::MoeLoraGrads grads;
    const LoraAdapter& a = g.adapter;
    LoraWeights* parts[] = {&lora.gate, &lora.up, &lora.down};
    ops::LoraDropout* dropouts[] = {&lora.gate_dropout, &lora.up_dropout, &lora.down_dropout};
    TensorView* grad_parts[][2] = {
        {&grads.gate_a, &grads.gate_b}, {&grads.up_a, &grads.up_b}, {&grads.down_a, &grads.down_b}};
    for (int p = 4; p < 7; ++p) {
      if (!a.targeted(li, p)) continue;
      *parts[p - 4] = {a.training_view(li, p, false, ctx.device),
                       a.training_view(li, p, true, ctx.device), a.scale()};
      *dropouts[p - 4] = {g.tape.dropout_p, lora_dropout_seed(g.tape.dropout_seed, li, p)};
      *grad_parts[p - 4][0] = a.slice(g.grads, li, p, false);
      *grad_parts[p - 4][1] = a.slice(g.grads, li, p, true);
    }
    ops::moe_experts_backward(ctx, sv.h_mlp, l.moe, gated_activation(c), sv.route_w, sv.route_ids,
                              d_down, dh, d_weights, lora, grads);
    ops::moe_route_backward(ctx, sv.h_mlp, l.moe.router, c.moe.norm_topk_prob, sv.route_ids,
                            d_weights, dh);
  } else {
    ops::ScratchScope inner(ctx);
    const TensorView d_act = ops::scratch_alloc(ctx, {t, c.intermediate_size}, f32);
    const TensorView d_up = ops::scratch_alloc(ctx, {t, c.intermediate_size}, f32);
    linear_backward(ctx, g, li, 6, l.down, sv.act, d_down, d_act, false);
    if (c.activation == MlpActivation::silu)
      ops::silu_mul_backward(ctx, sv.gate, sv.up, d_act, d_act, d_up);
    else
      ops::gelu_tanh_mul_backward(ctx, sv.gate, sv.up, d_act, d_act, d_up);
    linear_backward(ctx, g, li, 4, l.gate, sv.h_mlp, d_act, dh, false);
    linear_backward(ctx, g, li, 5, l.up, sv.h_mlp, d_up, dh, true);
  }
  const TensorView& mlp_norm = c.sandwich_norms ? l.pre_feedforward_norm : l.post_attention_norm;
  norm_backward_add(ctx, c, sv.x_mid, mlp_norm, sv.inv_rms_mid, dh, dx);  // dx = d x_mid
  // Attention block: x_mid = x_in + [post_attn_norm](o(attention(rope(norm(q(h))), ...))).
  TensorView d_o = dx;
  if (c.sandwich_norms) {
    ops::rms_norm_backward(ctx, sv.o_out, l.post_attention_norm, sv.inv_rms_o, c.norm_plus_one, dx,
                           dproj);
    d_o = dproj;
  }
  {
    ops::ScratchScope inner(ctx);
    const TensorView d_attn = ops::scratch_alloc(ctx, {t, c.q_dim()}, f32);
    const TensorView dq = ops::scratch_alloc(ctx, {t, c.q_dim()}, f32);
    const TensorView dk = ops::scratch_alloc(ctx, {t, c.kv_dim()}, f32);
    const TensorView dv = ops::scratch_alloc(ctx, {t, c.kv_dim()}, f32);
    linear_backward(ctx, g, li, 3, l.o, sv.attn, d_o, d_attn, false);
    ops::paged_attention_backward(
        ctx, sv.q.reshape({t, hq, d}), kv.k(li), kv.v(li), step.attn, attention_params(c, l),
        sv.attn.reshape({t, hq, d}), sv.lse.reshape({t, hq}), d_attn.reshape({t, hq, d}),
        dq.reshape({t, hq, d}), dk.reshape({t, hkv, d}), dv.reshape({t, hkv, d}));
    const TensorView inv_freq = rope_frequencies(l);
    ops::rms_norm_rope_backward(
        ctx, sv.q_pre.reshape({t, hq, d}), c.qk_norm ? l.q_norm : TensorView(), sv.q_inv_rms,
        c.norm_plus_one, step.positions, inv_freq, dq.reshape({t, hq, d}), dq.reshape({t, hq, d}));
    ops::rms_norm_rope_backward(ctx, sv.k_pre.reshape({t, hkv, d}),
                                c.qk_norm ? l.k_norm : TensorView(), sv.k_inv_rms, c.norm_plus_one,
                                step.positions, inv_freq, dk.reshape({t, hkv, d}),
                                dk.reshape({t, hkv, d}));
    linear_backward(ctx, g, li, 0, l.q, sv.h_attn, dq, dh, false);
    linear_backward(ctx, g, li, 1, l.k, sv.h_attn, dk, dh, true);
    linear_backward(ctx, g, li, 2, l.v, sv.h_attn, dv, dh, true);
  }
  norm_backward_add(ctx, c, x_in, l.input_norm, sv.inv_rms_in, dh, dx);  // dx = d x_in
}

}  // namespace

void backward(Context& ctx, const Model& m, const KvPool& kv, const StepBatch& step, Tape& tape,
              const TensorView& d_hidden, const LoraAdapter& adapter, const TensorView& grads) {
  const ModelConfig& c = m.config();
  const int64_t t = step.num_tokens();
  CHECK(d_hidden.dtype == DType::f32 && d_hidden.shape == (Shape{t, c.hidden_size}) &&
            d_hidden.device == ctx.device,
        "backward: d_hidden must be f32 [{}, {}] on {}, got {} {}", t, c.hidden_size,
        device_name(ctx.device), dtype_name(d_hidden.dtype), d_hidden.shape.str());
  CHECK(adapter.num_layers() == c.num_layers, "backward: the adapter has {} layers, the model {}",
        adapter.num_layers(), c.num_layers);
  ops::ScratchScope scope(ctx);
  const AdapterGrads g{adapter, grads, tape};
  const TensorView dx = ops::scratch_alloc(ctx, {t, c.hidden_size}, DType::f32);
  ops::rms_norm_backward(ctx, tape.x_final, m.final_norm, tape.inv_rms_final, c.norm_plus_one,
                         d_hidden, dx);
  for (int64_t li = c.num_layers - 1; li >= 0; --li) {
    const TensorView& x_in = tape.x_in[size_t(li)];
    LayerSaved& sv = tape.layer(li);
    if (tape.checkpointing) {
      // Offloading: the layer's input comes back (layer li + 1's, in the other buffer, is
      // done with).
      if (!tape.x_host.empty()) ops::copy(ctx, tape.x_host[size_t(li)], x_in);
      ops::ScratchScope recompute(ctx);
      const TensorView x_out = ops::scratch_alloc(ctx, x_in.shape, x_in.dtype);
      forward_layer_saving(ctx, m, &g.adapter, li, kv, step, tape, x_in, sv, x_out);
    }
    layer_backward(ctx, m, li, kv, step, g, x_in, sv, dx);
  }
}

}  // namespace fp8rl
