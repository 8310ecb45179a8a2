// A model's weights on a device: the one-time upload of a loaded model (Model::to_device) and
// models made directly on a device with random weights (Model::random, for benchmarks).
#include <cmath>

#include "model/model.h"
#include "model/rope.h"
#include "ops/ops.h"
#include "quant/fp8.h"

namespace fp8rl {

namespace {
// HF initializes linears and embeddings N(0, 0.02); a uniform of the same deviation.
constexpr float kInitBound = 0.02f * 1.7320508f;
}  // namespace

class ModelUploader {
 public:
  ModelUploader(Model& m, Context& ctx) : m_(m), ctx_(ctx) {}

  // A device copy of a host tensor, converted to `dtype` on the host first when it differs.
  TensorView upload(const TensorView& host, DType dtype) {
    if (host.empty()) return host;
    CHECK(host.device == Device::cpu && host.is_contiguous(), "upload of a non-host tensor");
    Tensor converted;
    TensorView src = host;
    if (host.dtype != dtype) {
      converted = Tensor::empty(host.shape, dtype);
      convert(host.data, host.dtype, converted.view().data, dtype, size_t(host.numel()));
      src = converted.view();
    }
    m_.device_storage_.emplace_back(ctx_, src.nbytes());
    TensorView dev = m_.device_storage_.back().view(host.shape, dtype);
    ops::copy(ctx_, src, dev);  // returns once the host data is staged, so `converted` may go
    return dev;
  }

  void linear(LinearWeight& w) {
    w.weight = upload(w.weight, w.is_fp8() ? DType::f8e4m3 : DType::bf16);
    w.scales = upload(w.scales, DType::f32);
    w.bias = upload(w.bias, DType::f32);
    ops::prepare_linear(ctx_, w, m_.device_storage_);
  }

  void run() {
    const void* embed_host = m_.embed.data;
    m_.embed = upload(m_.embed, DType::bf16);
    if (m_.lm_head.weight.data == embed_host) {  // tied: one device copy serves both
      m_.lm_head.weight = m_.embed;
      m_.lm_head.bias = upload(m_.lm_head.bias, DType::f32);
      ops::prepare_linear(ctx_, m_.lm_head, m_.device_storage_);
    } else {
      linear(m_.lm_head);
    }
    m_.final_norm = upload(m_.final_norm, DType::f32);
    for (LayerWeights& l : m_.layers) {
      for (TensorView* t : {&l.input_norm, &l.post_attention_norm, &l.pre_feedforward_norm,
                            &l.post_feedforward_norm, &l.q_norm, &l.k_norm})
        *t = upload(*t, DType::f32);
      for (LinearWeight* w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) linear(*w);
      l.rope_freq = upload(TensorView(l.inv_freq.data(), DType::f32, {int64_t(l.inv_freq.size())}),
                           DType::f32);
    }
    ops::synchronize(ctx_);
    m_.device_ = ctx_.device;
  }

 private:
  Model& m_;
  Context& ctx_;
};

void Model::to_device(Context& ctx) {
  if (ctx.device == device_) return;  // a CPU context, or a model made on this device
  CHECK(device_ == Device::cpu, "the model is already on {}", device_name(device_));
  ModelUploader(*this, ctx).run();
}

size_t Model::device_bytes() const {
  size_t n = 0;
  for (const DeviceBuffer& b : device_storage_) n += b.size();
  return n;
}

Model Model::random(const ModelConfig& config, std::optional<Fp8Scheme> fp8, Context& ctx,
                    uint64_t seed) {
  Model m;
  m.config_ = config;
  m.dir_ = "(random " + std::string(arch_name(config.arch)) + ")";
  m.device_ = ctx.device;
  m.scheme_ = fp8.value_or(Fp8Scheme::off);
  m.act_ = matching_act_scaling(m.scheme_);
  const ModelConfig& c = m.config_;
  const int64_t h = c.hidden_size, d = c.head_dim;
  uint64_t tag = 0;
  auto buffer = [&](Shape s, DType dt) {
    m.device_storage_.emplace_back(ctx, size_t(s.numel()) * dtype_size(dt));
    return m.device_storage_.back().view(s, dt);
  };
  auto uniform = [&](Shape s, DType dt, float bound) {
    TensorView t = buffer(s, dt);
    ops::fill_uniform(ctx, t, seed * 0x100000001B3ull + (++tag), bound);
    return t;
  };
  auto norm = [&](int64_t n) {
    TensorView t = buffer({n}, DType::f32);
    ops::fill(ctx, t, c.norm_plus_one ? 0.0f : 1.0f);  // the neutral weight
    return t;
  };
  auto linear = [&](int64_t n, int64_t k, bool bias) {
    LinearWeight w;
    if (m.scheme_ == Fp8Scheme::off) {
      w.weight = uniform({n, k}, DType::bf16, kInitBound);
    } else {
      // bf16 values in a transient buffer, quantized on the device with the recipe.
      DeviceBuffer tmp(ctx, size_t(n * k) * 2);
      TensorView wb = tmp.view({n, k}, DType::bf16);
      ops::fill_uniform(ctx, wb, seed * 0x100000001B3ull + (++tag), kInitBound);
      w.weight = buffer({n, k}, DType::f8e4m3);
      w.scales = buffer(weight_scale_shape(m.scheme_, n, k), DType::f32);
      w.scheme = m.scheme_;
      w.act = m.act_;
      ops::quantize_weight(ctx, wb, m.scheme_, w.weight, w.scales);
      ops::synchronize(ctx);  // tmp is freed at the end of this scope
    }
    if (bias) w.bias = uniform({n}, DType::f32, kInitBound);
    ops::prepare_linear(ctx, w, m.device_storage_);
    return w;
  };

  m.embed = uniform({c.vocab_size, h}, DType::bf16, kInitBound);
  m.final_norm = norm(h);
  if (c.tie_word_embeddings) {
    m.lm_head.weight = m.embed;
  } else {
    m.lm_head.weight = uniform({c.vocab_size, h}, DType::bf16, kInitBound);
  }
  ops::prepare_linear(ctx, m.lm_head, m.device_storage_);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights l;
    l.input_norm = norm(h);
    l.post_attention_norm = norm(h);
    if (c.sandwich_norms) {
      l.pre_feedforward_norm = norm(h);
      l.post_feedforward_norm = norm(h);
    }
    if (c.qk_norm) {
      l.q_norm = norm(d);
      l.k_norm = norm(d);
    }
    l.q = linear(c.q_dim(), h, c.qkv_bias);
    l.k = linear(c.kv_dim(), h, c.qkv_bias);
    l.v = linear(c.kv_dim(), h, c.qkv_bias);
    l.o = linear(h, c.q_dim(), c.o_bias);
    l.gate = linear(c.intermediate_size, h, c.mlp_bias);
    l.up = linear(c.intermediate_size, h, c.mlp_bias);
    l.down = linear(h, c.intermediate_size, c.mlp_bias);
    l.sliding = c.layers[size_t(i)].sliding;
    l.inv_freq = rope_inv_freq(c.layers[size_t(i)].rope, d);
    if (ctx.device != Device::cpu) {
      l.rope_freq = buffer({int64_t(l.inv_freq.size())}, DType::f32);
      ops::copy(ctx, TensorView(l.inv_freq.data(), DType::f32, {int64_t(l.inv_freq.size())}),
                l.rope_freq);
    }
    m.layers.push_back(std::move(l));
  }
  ops::synchronize(ctx);
  return m;
}

}  // namespace fp8rl
