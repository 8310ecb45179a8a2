#include "model/model.h"

#include <cmath>
#include <cstring>
#include <set>

#include "core/parallel.h"
#include "model/rope.h"
#include "quant/fp8.h"

namespace fp8rl {

namespace {
const char* const kAttnLinears[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
const char* const kMlpLinears[] = {"gate_proj", "up_proj", "down_proj"};

// Index of the first NaN or Inf among n elements of a floating-point dtype, or -1. One parallel
// pass over the raw bits: exponent all ones (e4m3fn has no Inf; its NaN is S.1111.111).
int64_t first_nonfinite(const void* data, DType dtype, int64_t n) {
  const auto* b8 = static_cast<const uint8_t*>(data);
  const auto* b16 = static_cast<const uint16_t*>(data);
  const auto* b32 = static_cast<const uint32_t*>(data);
  auto bad = [&](int64_t i) {
    switch (dtype) {
      case DType::f32:
        return (b32[i] & 0x7f800000u) == 0x7f800000u;
      case DType::bf16:
        return (b16[i] & 0x7f80u) == 0x7f80u;
      case DType::f16:
        return (b16[i] & 0x7c00u) == 0x7c00u;
      case DType::f8e4m3:
        return (b8[i] & 0x7fu) == 0x7fu;
      case DType::f8e5m2:
        return (b8[i] & 0x7cu) == 0x7cu;
      default:
        return false;
    }
  };
  constexpr int64_t kChunk = int64_t{1} << 18;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<int64_t> first(size_t(chunks), -1);
  parallel_for(0, chunks, [&](int64_t c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) {
      if (bad(i)) {
        first[size_t(c)] = i;
        return;
      }
    }
  });
  for (int64_t f : first)
    if (f >= 0) return f;
  return -1;
}

// Tensors that checkpoints carry and the model has no use for by design: rotary frequency
// buffers of old Llama exports, and FP8 activation / KV-cache scales we recompute dynamically.
bool ignorable_tensor(const std::string& name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with(".rotary_emb.inv_freq") || ends_with(".input_scale") || ends_with(".k_scale") ||
         ends_with(".v_scale");
}
}  // namespace

// Resolves and checks every tensor of the model against its config.
class ModelLoader {
 public:
  ModelLoader(Model& m, const LoadOptions& o, const CheckpointQuant& q)
      : m_(m), opts_(o), quant_(q) {}

  // Whether the checkpoint has `name`; records it as used, or as missing (reported together
  // with the unexpected tensors once the whole model is walked).
  bool present(const std::string& name) {
    if (!m_.checkpoint_.contains(name)) {
      missing_.push_back(name);
      return false;
    }
    used_.insert(name);
    return true;
  }

  // The view of a checkpoint tensor; with allow_nonfinite off, a NaN or Inf is an error.
  TensorView checked_view(const std::string& name) {
    TensorView v = m_.checkpoint_.view(name);
    if (!opts_.allow_nonfinite && !opts_.structure_only) {
      const int64_t bad = first_nonfinite(v.data, v.dtype, v.numel());
      CHECK(bad < 0,
            "tensor '{}' of checkpoint '{}' holds a NaN or Inf (element {}); load with "
            "allow_nonfinite to accept it",
            name, m_.dir_, bad);
    }
    return v;
  }

  // An empty view when the tensor is missing (load() fails before anything uses it).
  TensorView tensor(const std::string& name, Shape expected) {
    if (!present(name)) return {};
    const SafetensorsTensorInfo& info = m_.checkpoint_.info(name);
    CHECK(info.shape == expected, "tensor '{}' has shape {}, the config implies {}", name,
          info.shape.str(), expected.str());
    CHECK(info.supported && info.dtype != DType::i32 && info.dtype != DType::i64,
          "tensor '{}' has dtype {}, expected a floating-point type", name, info.dtype_str);
    return checked_view(name);
  }

  // A scale tensor converted to an owned f32 tensor of the canonical shape.
  TensorView scale_tensor(const std::string& name, Shape canonical) {
    CHECK(present(name), "FP8 checkpoint '{}' has no scale tensor '{}'", m_.dir_, name);
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
    if (!present(wname)) {
      if (bias) present(prefix + ".bias");
      return w;
    }
    const SafetensorsTensorInfo& info = m_.checkpoint_.info(wname);
    if (info.supported && info.dtype == DType::f8e4m3) {
      CHECK(quant_.weight != Fp8Scheme::off,
            "tensor '{}' is F8_E4M3 but config.json has no FP8 quantization_config", wname);
      CHECK(info.shape == (Shape{n, k}), "tensor '{}' has shape {}, the config implies [{}, {}]",
            wname, info.shape.str(), n, k);
      w.weight = checked_view(wname);
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

  // An MoE layer's MLP under `p` ("model.layers.N.mlp."): the router `gate.weight` [E, H], and
  // the experts either as the Hub stores them, experts.E.{gate,up,down}_proj.weight, or as
  // transformers 5 fuses them, experts.gate_up_proj [E, 2I, H] (each expert's gate rows, then
  // its up rows) and experts.down_proj [E, H, I].
  MoeWeights moe(const std::string& p) {
    const ModelConfig& c = m_.config_;
    const int64_t e = c.moe.num_experts, inter = c.moe.intermediate_size, h = c.hidden_size;
    MoeWeights w;
    w.router.weight = tensor(p + "gate.weight", {e, h});
    refuse_fp8(p + "gate.weight", "an MoE router");
    std::vector<TensorView> gate(static_cast<size_t>(e)), up(static_cast<size_t>(e)),
        down(static_cast<size_t>(e));
    const std::string gate_up = p + "experts.gate_up_proj", fused_down = p + "experts.down_proj";
    // One layout per layer: with both, one set of tensors would be silently ignored.
    for (const char* name : {"gate_proj", "up_proj", "down_proj"}) {
      const std::string hub = p + "experts.0." + name + ".weight";
      for (const std::string& fused : {gate_up, fused_down})
        CHECK(!m_.checkpoint_.contains(fused) || !m_.checkpoint_.contains(hub),
              "checkpoint '{}' stores the experts of '{}' in both layouts: '{}' (transformers 5's "
              "fused tensors) and '{}' (the Hub's per-expert ones); keep one",
              m_.dir_, p.substr(0, p.size() - 1), fused, hub);
    }
    if (m_.checkpoint_.contains(gate_up)) {
      const TensorView gu = tensor(gate_up, {e, 2 * inter, h});
      const TensorView dn = tensor(fused_down, {e, h, inter});
      refuse_fp8(gate_up, "an expert weight");
      refuse_fp8(fused_down, "an expert weight");
      if (gu.empty() || dn.empty()) return w;  // missing: reported with the rest
      for (int64_t x = 0; x < e; ++x) {
        const TensorView both = gu.slice_rows(x, x + 1).reshape({2 * inter, h});
        gate[size_t(x)] = both.slice_rows(0, inter);
        up[size_t(x)] = both.slice_rows(inter, 2 * inter);
        down[size_t(x)] = dn.slice_rows(x, x + 1).reshape({h, inter});
      }
    } else {
      bool complete = true;
      for (int64_t x = 0; x < e; ++x) {
        const std::string q = p + "experts." + std::to_string(x) + ".";
        const std::pair<std::vector<TensorView>*, std::string> parts[] = {
            {&gate, "gate_proj"}, {&up, "up_proj"}, {&down, "down_proj"}};
        for (const auto& [dst, name] : parts) {
          const bool is_down = dst == &down;
          const std::string full = q + name + ".weight";
          (*dst)[size_t(x)] = tensor(full, is_down ? Shape{h, inter} : Shape{inter, h});
          refuse_fp8(full, "an expert weight");
          complete = complete && !(*dst)[size_t(x)].empty();
        }
      }
      if (!complete) return w;
    }
    w.gate = stack_experts(gate);
    w.up = stack_experts(up);
    w.down = stack_experts(down);
    return w;
  }

  // FP8 expert or router weights in a checkpoint are not read yet (only quantizing on load).
  void refuse_fp8(const std::string& name, const char* what) const {
    if (!m_.checkpoint_.contains(name)) return;
    const SafetensorsTensorInfo& info = m_.checkpoint_.info(name);
    CHECK(!info.supported || info.dtype != DType::f8e4m3,
          "tensor '{}' is {} FP8 ({}): FP8 MoE checkpoints are not supported yet; load the "
          "unquantized checkpoint with --fp8 to quantize the experts on load",
          name, what, info.dtype_str);
  }

  // One projection of every expert ([n, k] views, the checkpoint's dtype) as a stacked
  // [E, n, k] weight: the checkpoint's own memory when the experts already lie there back to
  // back (transformers 5's down_proj), else a copy; quantized expert by expert with the
  // --fp8 scheme when one is asked for.
  ExpertLinear stack_experts(const std::vector<TensorView>& src) {
    const int64_t e = int64_t(src.size()), n = src[0].dim(0), k = src[0].dim(1);
    const DType dt = src[0].dtype;
    const size_t bytes = size_t(n * k) * dtype_size(dt);
    ExpertLinear w;
    if (opts_.structure_only) return w;
    const Fp8Scheme scheme = opts_.fp8.value_or(Fp8Scheme::off);
    if (scheme != Fp8Scheme::off) {
      const Shape per = weight_scale_shape(scheme, n, k);
      std::vector<int64_t> dims{e};
      for (int i = 0; i < per.rank; ++i) dims.push_back(per[i]);
      Tensor q = Tensor::empty({e, n, k}, DType::f8e4m3);
      Tensor s = Tensor::empty(Shape::from(dims.begin(), dims.end()), DType::f32);
      m_.owned_.push_back(q);
      m_.owned_.push_back(s);
      w.weight = q.view();
      w.scales = s.view();
      w.scheme = scheme;
      w.act = matching_act_scaling(scheme);
      for (int64_t x = 0; x < e; ++x) {
        const LinearWeight dst = w.expert(x);
        quantize_weight(src[size_t(x)], scheme, dst.weight, dst.scales);
      }
      return w;
    }
    bool adjacent = true;
    for (int64_t x = 0; x < e; ++x)
      adjacent = adjacent && src[size_t(x)].dtype == dt &&
                 src[size_t(x)].data == static_cast<const char*>(src[0].data) + size_t(x) * bytes;
    if (adjacent) {
      w.weight = TensorView(src[0].data, dt, {e, n, k});
      return w;
    }
    Tensor t = Tensor::empty({e, n, k}, dt);
    parallel_for(0, e, [&](int64_t x) {
      const TensorView& from = src[size_t(x)];
      char* to = static_cast<char*>(t.view().data) + size_t(x) * bytes;
      if (from.dtype == dt)
        std::memcpy(to, from.data, bytes);
      else
        convert(from.data, from.dtype, to, dt, size_t(n * k));
    });
    m_.owned_.push_back(t);
    w.weight = t.view();
    return w;
  }

  void load() {
    const ModelConfig& c = m_.config_;
    const int64_t h = c.hidden_size, d = c.head_dim;
    m_.embed = tensor("model.embed_tokens.weight", {c.vocab_size, h});
    m_.final_norm = tensor("model.norm.weight", {h});
    if (c.sequence_classification) {
      // transformers' classifier: Linear(hidden, num_labels, bias=False) named `score`.
      CHECK(m_.checkpoint_.contains("score.weight"),
            "checkpoint '{}' ({}) has no score.weight: a sequence-classification model needs "
            "its score head [num_labels = {}, hidden_size = {}]",
            m_.dir_, c.architecture, c.num_labels, h);
      CHECK(!m_.checkpoint_.contains("score.bias"),
            "checkpoint '{}' has score.bias: transformers' score head has no bias", m_.dir_);
      m_.lm_head.weight = tensor("score.weight", {c.num_labels, h});
    } else {
      CHECK(!c.tie_word_embeddings || !m_.checkpoint_.contains("lm_head.weight"),
            "checkpoint '{}' has lm_head.weight but config.json sets tie_word_embeddings: true "
            "(which one is meant is ambiguous)",
            m_.dir_);
      m_.lm_head.weight =
          c.tie_word_embeddings ? m_.embed : tensor("lm_head.weight", {c.vocab_size, h});
    }
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
      if (c.layers[size_t(i)].moe) {
        l.moe = moe(p + "mlp.");
      } else {
        l.gate = linear(p + "mlp.gate_proj", c.intermediate_size, h, c.mlp_bias);
        l.up = linear(p + "mlp.up_proj", c.intermediate_size, h, c.mlp_bias);
        l.down = linear(p + "mlp.down_proj", h, c.intermediate_size, c.mlp_bias);
      }
      l.sliding = c.layers[size_t(i)].sliding;
      l.inv_freq = rope_inv_freq(c.layers[size_t(i)].rope, d);
      l.rope_attention_factor = c.layers[size_t(i)].rope.attention_factor;
      m_.layers.push_back(std::move(l));
    }
    check_tensor_names();
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
  // The checkpoint's tensors must be exactly those of its declared architecture: a Qwen3
  // checkpoint labelled LlamaForCausalLM would otherwise run with its q/k norms ignored.
  void check_tensor_names() const {
    std::vector<std::string> unexpected;
    for (const std::string& name : m_.checkpoint_.names())
      if (!used_.count(name) && !ignorable_tensor(name)) unexpected.push_back(name);
    if (missing_.empty() && unexpected.empty()) return;
    auto list = [](const std::vector<std::string>& names) {
      constexpr size_t kShown = 8;
      std::string s;
      for (size_t i = 0; i < std::min(names.size(), kShown); ++i) s += (i ? ", " : "") + names[i];
      if (names.size() > kShown) s += fmt::format(" and {} more", names.size() - kShown);
      return names.empty() ? std::string("none") : s;
    };
    RAISE(
        "checkpoint '{}' does not match its declared architecture {}: missing tensors ({}): {}; "
        "unexpected tensors ({}): {}",
        m_.dir_, m_.config_.architecture, missing_.size(), list(missing_), unexpected.size(),
        list(unexpected));
  }

  Model& m_;
  const LoadOptions& opts_;
  const CheckpointQuant& quant_;
  std::set<std::string> used_;
  std::vector<std::string> missing_;
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
    if (!l.moe.empty()) continue;
    for (int j = 0; j < 3; ++j) v.emplace_back(p + "mlp." + kMlpLinears[j], mlp[j]);
  }
  return v;
}

size_t Model::expert_bytes() const {
  size_t n = 0;
  for (const LayerWeights& l : layers)
    if (!l.moe.empty())
      n += l.moe.router.nbytes() + l.moe.gate.nbytes() + l.moe.up.nbytes() + l.moe.down.nbytes();
  return n;
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
