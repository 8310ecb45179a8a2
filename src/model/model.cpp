#include "model/model.h"

#include <cmath>

#include "model/rope.h"
#include "quant/fp8.h"

namespace fp8rl {

namespace {
const char* const kAttnLinears[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
const char* const kMlpLinears[] = {"gate_proj", "up_proj", "down_proj"};
}  // namespace

// Resolves and checks every tensor of the model against its config.
class ModelLoader {
 public:
  ModelLoader(Model& m, const LoadOptions& o, const CheckpointQuant& q)
      : m_(m), opts_(o), quant_(q) {}

  TensorView tensor(const std::string& name, Shape expected) {
    CHECK(m_.checkpoint_.contains(name), "checkpoint '{}' has no tensor '{}'", m_.dir_, name);
    const SafetensorsTensorInfo& info = m_.checkpoint_.info(name);
    CHECK(info.shape == expected, "tensor '{}' has shape {}, the config implies {}", name,
          info.shape.str(), expected.str());
    CHECK(info.supported && info.dtype != DType::i32 && info.dtype != DType::i64,
          "tensor '{}' has dtype {}, expected a floating-point type", name, info.dtype_str);
    return m_.checkpoint_.view(name);
  }

  // A scale tensor converted to an owned f32 tensor of the canonical shape.
  TensorView scale_tensor(const std::string& name, Shape canonical) {
    CHECK(m_.checkpoint_.contains(name), "FP8 checkpoint '{}' has no scale tensor '{}'", m_.dir_,
          name);
    const SafetensorsTensorInfo& info = m_.checkpoint_.info(name);
    CHECK(info.supported && info.shape.numel() == canonical.numel() &&
              (info.dtype == DType::f32 || info.dtype == DType::bf16 || info.dtype == DType::f16),
          "scale tensor '{}' is {} {}, expected {} elements of F32/BF16/F16", name, info.dtype_str,
          info.shape.str(), canonical.numel());
    Tensor t = Tensor::empty(canonical, DType::f32);
    convert(m_.checkpoint_.view(name).data, info.dtype, t.ptr<float>(), DType::f32,
            size_t(canonical.numel()));
    for (int64_t i = 0; i < canonical.numel(); ++i) {
      const float s = t.ptr<float>()[i];
      CHECK(std::isfinite(s) && s > 0,
            "scale tensor '{}' element {} is {}, scales must be positive", name, i, s);
    }
    m_.owned_.push_back(t);
    return t.view();
  }

  LinearWeight linear(const std::string& prefix, int64_t n, int64_t k, bool bias) {
    LinearWeight w;
    const std::string wname = prefix + ".weight";
    CHECK(m_.checkpoint_.contains(wname), "checkpoint '{}' has no tensor '{}'", m_.dir_, wname);
    const SafetensorsTensorInfo& info = m_.checkpoint_.info(wname);
    if (info.supported && info.dtype == DType::f8e4m3) {
      CHECK(quant_.weight != Fp8Scheme::off,
            "tensor '{}' is F8_E4M3 but config.json has no FP8 quantization_config", wname);
      CHECK(info.shape == (Shape{n, k}), "tensor '{}' has shape {}, the config implies [{}, {}]",
            wname, info.shape.str(), n, k);
      w.weight = m_.checkpoint_.view(wname);
      w.scheme = quant_.weight;
      w.act = quant_.act;
      w.scales =
          scale_tensor(prefix + "." + quant_.weight_scale_name, weight_scale_shape(w.scheme, n, k));
      if (w.act == ActScaling::static_tensor)
        w.input_scale = scale_tensor(prefix + ".input_scale", {1}).ptr<float>()[0];
      m_.prequantized_ = true;
    } else {
      TensorView src = tensor(wname, {n, k});
      const Fp8Scheme scheme = opts_.fp8.value_or(Fp8Scheme::off);
      if (scheme == Fp8Scheme::off) {
        w.weight = src;
      } else {
        Tensor q = Tensor::empty({n, k}, DType::f8e4m3);
        Tensor s = Tensor::empty(weight_scale_shape(scheme, n, k), DType::f32);
        quantize_weight(src, scheme, q, s);
        m_.owned_.push_back(q);
        m_.owned_.push_back(s);
        w.weight = q.view();
        w.scales = s.view();
        w.scheme = scheme;
        w.act = matching_act_scaling(scheme);
      }
    }
    if (bias) w.bias = tensor(prefix + ".bias", {n});
    return w;
  }

  void load() {
    const ModelConfig& c = m_.config_;
    const int64_t h = c.hidden_size, d = c.head_dim;
    m_.embed = tensor("model.embed_tokens.weight", {c.vocab_size, h});
    m_.final_norm = tensor("model.norm.weight", {h});
    m_.lm_head.weight =
        c.tie_word_embeddings ? m_.embed : tensor("lm_head.weight", {c.vocab_size, h});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      LayerWeights l;
      l.input_norm = tensor(p + "input_layernorm.weight", {h});
      l.post_attention_norm = tensor(p + "post_attention_layernorm.weight", {h});
      if (c.sandwich_norms) {
        l.pre_feedforward_norm = tensor(p + "pre_feedforward_layernorm.weight", {h});
        l.post_feedforward_norm = tensor(p + "post_feedforward_layernorm.weight", {h});
      }
      if (c.qk_norm) {
        l.q_norm = tensor(p + "self_attn.q_norm.weight", {d});
        l.k_norm = tensor(p + "self_attn.k_norm.weight", {d});
      }
      l.q = linear(p + "self_attn.q_proj", c.q_dim(), h, c.qkv_bias);
      l.k = linear(p + "self_attn.k_proj", c.kv_dim(), h, c.qkv_bias);
      l.v = linear(p + "self_attn.v_proj", c.kv_dim(), h, c.qkv_bias);
      l.o = linear(p + "self_attn.o_proj", h, c.q_dim(), c.o_bias);
      l.gate = linear(p + "mlp.gate_proj", c.intermediate_size, h, c.mlp_bias);
      l.up = linear(p + "mlp.up_proj", c.intermediate_size, h, c.mlp_bias);
      l.down = linear(p + "mlp.down_proj", h, c.intermediate_size, c.mlp_bias);
      l.sliding = c.layers[size_t(i)].sliding;
      l.inv_freq = rope_inv_freq(c.layers[size_t(i)].rope, d);
      m_.layers.push_back(std::move(l));
    }
    if (m_.prequantized_) {
      m_.scheme_ = quant_.weight;
      m_.act_ = quant_.act;
      CHECK(!opts_.fp8 || *opts_.fp8 == quant_.weight,
            "checkpoint '{}' is already FP8 ({} scaling); it runs as stored, so --fp8 {} is not "
            "possible (omit --fp8, or give --fp8 {})",
            m_.dir_, scheme_name(quant_.weight), scheme_name(*opts_.fp8),
            scheme_name(quant_.weight));
    } else {
      m_.scheme_ = opts_.fp8.value_or(Fp8Scheme::off);
      m_.act_ = matching_act_scaling(m_.scheme_);
    }
  }

 private:
  Model& m_;
  const LoadOptions& opts_;
  const CheckpointQuant& quant_;
};

Model Model::load(const std::string& dir, const LoadOptions& options) {
  Model m;
  m.dir_ = dir;
  m.config_ = ModelConfig::load(dir);
  m.checkpoint_ = Checkpoint::open(dir);
  CheckpointQuant quant;
  try {
    quant = parse_quantization_config(m.config_.quantization);
  } catch (const nlohmann::json::exception& e) {
    RAISE("{}/config.json: malformed quantization_config: {}", dir, e.what());
  }
  ModelLoader(m, options, quant).load();
  return m;
}

std::vector<std::pair<std::string, const LinearWeight*>> Model::named_linears() const {
  std::vector<std::pair<std::string, const LinearWeight*>> v;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const LayerWeights& l = layers[i];
    const LinearWeight* attn[] = {&l.q, &l.k, &l.v, &l.o};
    const LinearWeight* mlp[] = {&l.gate, &l.up, &l.down};
    for (int j = 0; j < 4; ++j) v.emplace_back(p + "self_attn." + kAttnLinears[j], attn[j]);
    for (int j = 0; j < 3; ++j) v.emplace_back(p + "mlp." + kMlpLinears[j], mlp[j]);
  }
  return v;
}

Linear* LayerWeights::projection(int i) {
  Linear* all[] = {&q, &k, &v, &o, &gate, &up, &down};
  CHECK(i >= 0 && i < 7, "projection index {} is outside [0, 7)", i);
  return all[i];
}

const Linear* LayerWeights::projection(int i) const {
  return const_cast<LayerWeights*>(this)->projection(i);
}

}  // namespace fp8rl
