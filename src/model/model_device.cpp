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

// Whether q, k and v can share one buffer and one GEMM (LayerWeights::qkv): one weight dtype,
// scheme, activation scaling and static input scale, biases on all three or none, and for
// 128x128 blocks, q and k ending on a block boundary (their scale rows then stack). Per-tensor
// weight scales differ per projection: never packed.
bool packable_qkv(Fp8Scheme scheme, int64_t nq, int64_t nk) {
  if (scheme == Fp8Scheme::tensor) return false;
  return scheme != Fp8Scheme::block || (nq % kFp8Block == 0 && nk % kFp8Block == 0);
}

bool packable_qkv(const LinearWeight& q, const LinearWeight& k, const LinearWeight& v) {
  for (const LinearWeight* w : {&k, &v})
    if (w->weight.dtype != q.weight.dtype || w->scheme != q.scheme || w->act != q.act ||
        w->input_scale != q.input_scale || w->bias.empty() != q.bias.empty() ||
        w->in_features() != q.in_features())
      return false;
  return packable_qkv(q.scheme, q.out_features(), k.out_features());
}

// Rows [row, row + n) of a stacked linear as a linear of its own: its weight rows, their scale
// rows (one per row, or one per 128 rows for blocks) and bias. gemm_scales: prepare_linear's.
LinearWeight rows_of(const LinearWeight& w, int64_t row, int64_t n) {
  LinearWeight r;
  r.weight = w.weight.slice_rows(row, row + n);
  r.scheme = w.scheme;
  r.act = w.act;
  r.input_scale = w.input_scale;
  if (w.scheme == Fp8Scheme::row) r.scales = w.scales.slice_rows(row, row + n);
  if (w.scheme == Fp8Scheme::block)
    r.scales = w.scales.slice_rows(row / kFp8Block, (row + n + kFp8Block - 1) / kFp8Block);
  if (!w.bias.empty()) r.bias = w.bias.slice_rows(row, row + n);
  return r;
}

// A buffer of `shape` on ctx's device, held by `storage` (the model's).
TensorView storage_buffer(Context& ctx, std::vector<DeviceBuffer>& storage, Shape shape,
                          DType dtype) {
  storage.emplace_back(ctx, size_t(shape.numel()) * dtype_size(dtype));
  return storage.back().view(shape, dtype);
}

// A linear's buffers, unfilled: weight [n, k] (e4m3 codes for an FP8 scheme, else bf16), its
// scales, and a bias when asked.
LinearWeight linear_buffers(Context& ctx, std::vector<DeviceBuffer>& storage, Fp8Scheme scheme,
                            ActScaling act, int64_t n, int64_t k, bool bias,
                            DType unquantized = DType::bf16) {
  LinearWeight w;
  w.scheme = scheme;
  w.act = act;
  w.weight = storage_buffer(ctx, storage, {n, k}, w.is_fp8() ? DType::f8e4m3 : unquantized);
  if (w.is_fp8())
    w.scales = storage_buffer(ctx, storage, weight_scale_shape(scheme, n, k), DType::f32);
  if (bias) w.bias = storage_buffer(ctx, storage, {n}, DType::f32);
  return w;
}

}  // namespace

class ModelUploader {
 public:
  ModelUploader(Model& m, Context& ctx) : m_(m), ctx_(ctx) {}

  // A device copy of a host tensor, converted to `dtype` on the host first when it differs.
  TensorView upload(const TensorView& host, DType dtype) {
    if (host.empty()) return host;
    const TensorView dev = storage_buffer(ctx_, m_.device_storage_, host.shape, dtype);
    upload_into(host, dev);
    return dev;
  }

  // host -> dev (same element count), converted on the host first when the dtypes differ.
  void upload_into(const TensorView& host, const TensorView& dev) {
    CHECK(host.device == Device::cpu && host.is_contiguous(), "upload of a non-host tensor");
    Tensor converted;
    TensorView src = host;
    if (host.dtype != dev.dtype) {
      converted = Tensor::empty(host.shape, dev.dtype);
      convert(host.data, host.dtype, converted.view().data, dev.dtype, size_t(host.numel()));
      src = converted.view();
    }
    ops::copy(ctx_, src, dev.reshape(src.shape));  // returns once the host data is staged
  }

  void linear(LinearWeight& w) {
    w.weight = upload(w.weight, w.is_fp8() ? DType::f8e4m3 : DType::bf16);
    w.scales = upload(w.scales, DType::f32);
    w.bias = upload(w.bias, DType::f32);
    ops::prepare_linear(ctx_, w, m_.device_storage_);
  }

  // An MoE layer's stacked experts: codes and per-expert scales as they are (the CUDA
  // experts read the plain scale layout), unquantized experts in bf16.
  void experts(ExpertLinear& w) {
    w.weight = upload(w.weight, w.is_fp8() ? DType::f8e4m3 : DType::bf16);
    w.scales = upload(w.scales, DType::f32);
  }

  // q, k and v stacked in one weight, scale and bias buffer (LayerWeights::qkv) when they can
  // share a GEMM; each projection a view of its rows.
  void qkv(LayerWeights& l) {
    if (!packable_qkv(l.q, l.k, l.v)) {
      for (LinearWeight* w : {&l.q, &l.k, &l.v}) linear(*w);
      return;
    }
    const int64_t n = l.q.out_features() + l.k.out_features() + l.v.out_features();
    LinearWeight& s = l.qkv;
    s = linear_buffers(ctx_, m_.device_storage_, l.q.scheme, l.q.act, n, l.q.in_features(),
                       !l.q.bias.empty());
    s.input_scale = l.q.input_scale;
    int64_t row = 0;
    for (Linear* w : {&l.q, &l.k, &l.v}) {
      const int64_t rows = w->out_features();
      const LinearWeight dev = rows_of(s, row, rows);
      upload_into(w->weight, dev.weight);
      if (s.is_fp8()) upload_into(w->scales, dev.scales);
      if (!dev.bias.empty()) upload_into(w->bias, dev.bias);
      static_cast<LinearWeight&>(*w) = dev;
      ops::prepare_linear(ctx_, *w, m_.device_storage_);
      row += rows;
    }
    ops::prepare_linear(ctx_, s, m_.device_storage_);
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
      qkv(l);
      for (LinearWeight* w : {&l.o, &l.gate, &l.up, &l.down}) linear(*w);
      if (!l.moe.empty()) {
        linear(l.moe.router);
        for (ExpertLinear* w : {&l.moe.gate, &l.moe.up, &l.moe.down}) experts(*w);
      }
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
                    uint64_t seed, bool pack_qkv, DType unquantized) {
  CHECK(unquantized == DType::bf16 || unquantized == DType::f32,
        "Model::random: unquantized weights are bf16 or f32, not {}", dtype_name(unquantized));
  CHECK(!config.has_moe(),
        "Model::random: {} has MoE layers, which it cannot make yet (write a random checkpoint "
        "and load it)",
        config.architecture);
  Model m;
  m.config_ = config;
  m.dir_ = "(random " + std::string(arch_name(config.arch)) + ")";
  m.device_ = ctx.device;
  m.scheme_ = fp8.value_or(Fp8Scheme::off);
  m.act_ = matching_act_scaling(m.scheme_);
  const ModelConfig& c = m.config_;
  const int64_t h = c.hidden_size, d = c.head_dim;
  uint64_t tag = 0;
  auto buffer = [&](Shape s, DType dt) { return storage_buffer(ctx, m.device_storage_, s, dt); };
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
  auto buffers = [&](int64_t n, int64_t k, bool bias) {
    return linear_buffers(ctx, m.device_storage_, m.scheme_, m.act_, n, k, bias, unquantized);
  };
  // Random values into a linear's buffers (one tag for the weight, one for the bias), then
  // what the GEMM needs.
  auto fill_linear = [&](LinearWeight& w) {
    const int64_t n = w.out_features(), k = w.in_features();
    const uint64_t weight_seed = seed * 0x100000001B3ull + (++tag);
    if (!w.is_fp8()) {
      ops::fill_uniform(ctx, w.weight, weight_seed, kInitBound);
    } else {
      // bf16 values in a transient buffer, quantized on the device with the recipe.
      DeviceBuffer tmp(ctx, size_t(n * k) * 2);
      TensorView wb = tmp.view({n, k}, DType::bf16);
      ops::fill_uniform(ctx, wb, weight_seed, kInitBound);
      ops::quantize_weight(ctx, wb, m.scheme_, w.weight, w.scales);
      ops::synchronize(ctx);  // tmp is freed at the end of this scope
    }
    if (!w.bias.empty())
      ops::fill_uniform(ctx, w.bias, seed * 0x100000001B3ull + (++tag), kInitBound);
    ops::prepare_linear(ctx, w, m.device_storage_);
  };
  auto linear = [&](int64_t n, int64_t k, bool bias) {
    LinearWeight w = buffers(n, k, bias);
    fill_linear(w);
    return w;
  };

  m.embed = uniform({c.vocab_size, h}, unquantized, kInitBound);
  m.final_norm = norm(h);
  if (c.tie_word_embeddings && !c.sequence_classification) {
    m.lm_head.weight = m.embed;
  } else {
    m.lm_head.weight = uniform({c.output_size(), h}, unquantized, kInitBound);
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
    // The same values whether packed or not: q, k, v draw their tags in the same order.
    if (pack_qkv && packable_qkv(m.scheme_, c.q_dim(), c.kv_dim())) {
      l.qkv = buffers(c.q_dim() + 2 * c.kv_dim(), h, c.qkv_bias);
      int64_t row = 0;
      for (auto [w, n] : {std::pair{&l.q, c.q_dim()}, {&l.k, c.kv_dim()}, {&l.v, c.kv_dim()}}) {
        static_cast<LinearWeight&>(*w) = rows_of(l.qkv, row, n);
        fill_linear(*w);
        row += n;
      }
      ops::prepare_linear(ctx, l.qkv, m.device_storage_);
    } else {
      l.q = linear(c.q_dim(), h, c.qkv_bias);
      l.k = linear(c.kv_dim(), h, c.qkv_bias);
      l.v = linear(c.kv_dim(), h, c.qkv_bias);
    }
    l.o = linear(h, c.q_dim(), c.o_bias);
    l.gate = linear(c.intermediate_size, h, c.mlp_bias);
    l.up = linear(c.intermediate_size, h, c.mlp_bias);
    l.down = linear(h, c.intermediate_size, c.mlp_bias);
    l.sliding = c.layers[size_t(i)].sliding;
    l.inv_freq = rope_inv_freq(c.layers[size_t(i)].rope, d);
    l.rope_attention_factor = c.layers[size_t(i)].rope.attention_factor;
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
