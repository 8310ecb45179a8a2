#include "formats/model_config.h"

#include <cmath>
#include <filesystem>

#include "core/check.h"
#include "formats/json_read.h"

namespace fp8rl {

namespace {

using json = nlohmann::json;

struct ArchEntry {
  const char* class_name;
  Arch arch;
};
constexpr ArchEntry kArchs[] = {
    {"LlamaForCausalLM", Arch::llama},     {"Qwen2ForCausalLM", Arch::qwen2},
    {"Qwen3ForCausalLM", Arch::qwen3},     {"Qwen3MoeForCausalLM", Arch::qwen3_moe},
    {"MistralForCausalLM", Arch::mistral}, {"Gemma3ForCausalLM", Arch::gemma3}};
// The same decoders with transformers' sequence-classification head (`score`, no lm_head).
constexpr ArchEntry kClassifierArchs[] = {{"LlamaForSequenceClassification", Arch::llama},
                                          {"Qwen2ForSequenceClassification", Arch::qwen2},
                                          {"Qwen3ForSequenceClassification", Arch::qwen3},
                                          {"Qwen3MoeForSequenceClassification", Arch::qwen3_moe},
                                          {"MistralForSequenceClassification", Arch::mistral},
                                          {"Gemma3TextForSequenceClassification", Arch::gemma3}};

// Field readers that name the field and what was wrong with it.
const json* find(const json& j, const char* key) {
  auto it = j.find(key);
  return (it == j.end() || it->is_null()) ? nullptr : &*it;
}

int64_t get_int(const json& j, const char* key) {
  const json* v = find(j, key);
  CHECK(v != nullptr, "config.json: missing required field '{}'", key);
  // 2^63 as a double: integral floats at or above it do not convert to int64.
  constexpr double kTwo63 = 9223372036854775808.0;
  CHECK(v->is_number_integer() ||
            (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < kTwo63),
        "config.json: field '{}' must be an integer, got {}", key, json_excerpt(*v));
  CHECK(!v->is_number_unsigned() || v->get<uint64_t>() <= uint64_t(INT64_MAX),
        "config.json: field '{}' = {} is outside the int64 range", key, v->get<uint64_t>());
  return v->is_number_integer() ? v->get<int64_t>() : int64_t(v->get<double>());
}

// Sizes are bounded before anything is allocated from them; the bounds are far above every
// released model (largest: vocab 262k, hidden 16k, 126 layers, 128 heads) and keep every product
// of them (q_dim, embedding numel, layers x intermediate) well inside int64.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxLabels = int64_t{1} << 16;
constexpr int64_t kMaxHidden = int64_t{1} << 16;
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxProjection = int64_t{1} << 20;  // num_heads x head_dim
constexpr int64_t kMaxPositions = int64_t{1} << 28;
constexpr int64_t kMaxExperts = 4096;  // released models: up to 512

void check_range(const char* key, int64_t v, int64_t lo, int64_t hi) {
  CHECK(v >= lo && v <= hi, "config.json: {} = {} is outside [{}, {}]", key, v, lo, hi);
}

int64_t get_in_range(const json& j, const char* key, int64_t lo, int64_t hi) {
  const int64_t v = get_int(j, key);
  check_range(key, v, lo, hi);
  return v;
}

int64_t get_in_range(const json& j, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  return find(j, key) ? get_in_range(j, key, lo, hi) : fallback;
}

double get_double(const json& j, const char* key, double fallback) {
  const json* v = find(j, key);
  if (!v) return fallback;
  CHECK(v->is_number(), "config.json: field '{}' must be a number, got {}", key, json_excerpt(*v));
  const double d = v->get<double>();
  CHECK(std::isfinite(d), "config.json: field '{}' is not finite", key);
  return d;
}

bool get_bool(const json& j, const char* key, bool fallback) {
  const json* v = find(j, key);
  if (!v) return fallback;
  CHECK(v->is_boolean(), "config.json: field '{}' must be true or false, got {}", key,
        json_excerpt(*v));
  return v->get<bool>();
}

std::string get_string(const json& j, const char* key, const std::string& fallback) {
  const json* v = find(j, key);
  if (!v) return fallback;
  CHECK(v->is_string(), "config.json: field '{}' must be a string, got {}", key, json_excerpt(*v));
  return v->get<std::string>();
}

// What a rope parameter set may fall back on outside itself.
struct RopeContext {
  double theta = 10000.0;               // rope_theta beside the set (transformers 4)
  int64_t max_position_embeddings = 0;  // the config's
  // The whole config: a top-level original_max_position_embeddings (Phi-3 style) goes into a
  // single (not per layer type) parameter set over the set's own value in transformers 5.
  const json* top = nullptr;
  // The set is one entry of a per-layer-type mapping: transformers reads yarn's `truncate` from
  // the outer mapping only (config.rope_parameters.get("truncate", True)), so it is true there.
  bool per_layer_type = false;
};

// transformers' get_mscale in _compute_yarn_parameters.
double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// YaRN's parameters as transformers 5 resolves them (_compute_yarn_parameters and
// standardize_rope_params): original_max_position_embeddings from the top level, else the set,
// else max_position_embeddings; a null factor is max_position_embeddings / original;
// attention_factor given, else from mscale / mscale_all_dim when both are non-zero, else
// 0.1 ln(factor) + 1; beta_fast / beta_slow default (also when 0) to 32 / 1.
void parse_yarn(const json& p, const RopeContext& rc, const std::string& where, RopeConfig& r) {
  r.type = RopeConfig::Type::yarn;
  r.original_max_position_embeddings = get_in_range(p, "original_max_position_embeddings", 1,
                                                    kMaxPositions, rc.max_position_embeddings);
  if (rc.top != nullptr && !rc.per_layer_type && find(*rc.top, "original_max_position_embeddings"))
    r.original_max_position_embeddings =
        get_in_range(*rc.top, "original_max_position_embeddings", 1, kMaxPositions);
  CHECK(p.contains("factor"), "config.json: {} yarn rope needs a 'factor'", where);
  r.factor = get_double(
      p, "factor", double(rc.max_position_embeddings) / double(r.original_max_position_embeddings));
  CHECK(r.factor > 0, "config.json: {} yarn rope needs a positive 'factor', got {}", where,
        r.factor);
  const double mscale = get_double(p, "mscale", 0.0);
  const double mscale_all_dim = get_double(p, "mscale_all_dim", 0.0);
  if (find(p, "attention_factor")) {
    r.attention_factor = get_double(p, "attention_factor", 1.0);
  } else if (mscale != 0 && mscale_all_dim != 0) {
    r.attention_factor = yarn_mscale(r.factor, mscale) / yarn_mscale(r.factor, mscale_all_dim);
  } else {
    r.attention_factor = yarn_mscale(r.factor, 1.0);
  }
  CHECK(r.attention_factor > 0 && std::isfinite(r.attention_factor),
        "config.json: {} yarn rope needs a positive attention factor, got {}", where,
        r.attention_factor);
  const double beta_fast = get_double(p, "beta_fast", 0.0);
  const double beta_slow = get_double(p, "beta_slow", 0.0);
  r.beta_fast = beta_fast != 0 ? beta_fast : 32.0;
  r.beta_slow = beta_slow != 0 ? beta_slow : 1.0;
  CHECK(r.beta_fast > 0 && r.beta_slow > 0,
        "config.json: {} yarn rope needs positive beta_fast and beta_slow, got {} and {}", where,
        r.beta_fast, r.beta_slow);
  // transformers tests `if truncate:`, so an explicit null turns the rounding off.
  const auto t = p.find("truncate");
  r.truncate =
      rc.per_layer_type || t == p.end() || (!t->is_null() && get_bool(p, "truncate", true));
}

// One rope parameter set: transformers 5 `rope_parameters` (with rope_theta inside) or
// transformers 4 `rope_scaling` (theta given separately). A null set is the default rope.
RopeConfig parse_rope(const json* p, const RopeContext& rc, const std::string& where) {
  RopeConfig r;
  r.theta = rc.theta;
  if (p == nullptr) return r;
  CHECK(p->is_object(), "config.json: {} must be an object, got {}", where, json_excerpt(*p));
  r.theta = get_double(*p, "rope_theta", rc.theta);
  std::string type = get_string(*p, "rope_type", get_string(*p, "type", "default"));
  if (type == "default") {
    r.type = RopeConfig::Type::default_;
  } else if (type == "linear") {
    r.type = RopeConfig::Type::linear;
    r.factor = get_double(*p, "factor", 0.0);
    CHECK(r.factor > 0, "config.json: {} linear rope needs a positive 'factor'", where);
  } else if (type == "llama3") {
    r.type = RopeConfig::Type::llama3;
    r.factor = get_double(*p, "factor", 0.0);
    r.low_freq_factor = get_double(*p, "low_freq_factor", 0.0);
    r.high_freq_factor = get_double(*p, "high_freq_factor", 0.0);
    r.original_max_position_embeddings =
        get_in_range(*p, "original_max_position_embeddings", 1, kMaxPositions, 0);
    CHECK(r.factor > 0 && r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
              r.original_max_position_embeddings > 0,
          "config.json: {} llama3 rope needs factor > 0, 0 < low_freq_factor < "
          "high_freq_factor and original_max_position_embeddings > 0",
          where);
  } else if (type == "yarn") {
    parse_yarn(*p, rc, where, r);
  } else {
    // dynamic NTK changes the frequencies with the sequence length, longrope switches factor
    // sets past the original length: neither is a fixed inv_freq, which the forward assumes.
    RAISE(
        "config.json: {} rope type '{}' is not supported (supported: default, linear, llama3, "
        "yarn)",
        where, type);
  }
  CHECK(r.theta > 0, "config.json: {} rope_theta must be positive", where);
  return r;
}

// Which layers slide: `layer_types` when present, else each family's older fields.
std::vector<bool> sliding_layers(const json& j, Arch arch, int64_t n, int64_t window) {
  std::vector<bool> sliding(size_t(n), false);
  if (const json* lt = find(j, "layer_types")) {
    CHECK(lt->is_array() && int64_t(lt->size()) == n,
          "config.json: 'layer_types' must list {} layer types", n);
    for (int64_t i = 0; i < n; ++i) {
      const json& t = (*lt)[size_t(i)];
      CHECK(t.is_string() && (t == "sliding_attention" || t == "full_attention"),
            "config.json: layer_types[{}] must be 'sliding_attention' or 'full_attention', got {}",
            i, json_excerpt(t));
      sliding[size_t(i)] = t == "sliding_attention";
    }
  } else if (arch == Arch::gemma3) {
    const int64_t pattern = get_in_range(j, "sliding_window_pattern", 1, kMaxLayers, 6);
    for (int64_t i = 0; i < n; ++i) sliding[size_t(i)] = (i + 1) % pattern != 0;
  } else if (arch == Arch::mistral) {
    for (int64_t i = 0; i < n; ++i) sliding[size_t(i)] = window > 0;
  } else if (arch == Arch::qwen3_moe) {
    // Qwen3-MoE has no max_window_layers: with use_sliding_window every layer slides.
    const bool use = get_bool(j, "use_sliding_window", false);
    for (int64_t i = 0; i < n; ++i) sliding[size_t(i)] = use;
  } else if (arch == Arch::qwen2 || arch == Arch::qwen3) {
    const bool use = get_bool(j, "use_sliding_window", false);
    const int64_t max_window_layers = get_in_range(j, "max_window_layers", 0, kMaxLayers, n);
    for (int64_t i = 0; i < n; ++i) sliding[size_t(i)] = use && i >= max_window_layers;
  }
  for (int64_t i = 0; i < n; ++i) {
    CHECK(!sliding[size_t(i)] || window > 0,
          "config.json: layer {} uses sliding attention but 'sliding_window' is not set", i);
  }
  return sliding;
}

// The MoE fields of Qwen3-MoE and which layers they apply to. A layer is sparse unless listed
// in mlp_only_layers, when (layer + 1) is a multiple of decoder_sparse_step and there are
// experts, as transformers decides it; the other layers keep a dense MLP of intermediate_size.
MoeConfig parse_moe(const json& j, int64_t num_layers, std::vector<bool>& sparse) {
  MoeConfig m;
  // transformers 5 writes num_local_experts (num_experts is its alias); 4 writes num_experts.
  const json* a = find(j, "num_experts");
  const json* b = find(j, "num_local_experts");
  CHECK(a || b, "config.json: missing required field 'num_experts' (or 'num_local_experts')");
  if (a && b)
    CHECK(*a == *b, "config.json: 'num_experts' ({}) and 'num_local_experts' ({}) disagree",
          json_excerpt(*a), json_excerpt(*b));
  m.num_experts = get_in_range(j, a ? "num_experts" : "num_local_experts", 0, kMaxExperts);
  const int64_t step = get_in_range(j, "decoder_sparse_step", 1, kMaxLayers, 1);
  std::vector<bool> dense_only(size_t(num_layers), false);
  if (const json* only = find(j, "mlp_only_layers")) {
    CHECK(only->is_array(),
          "config.json: 'mlp_only_layers' must be a list of layer indices, got {}",
          json_excerpt(*only));
    for (size_t i = 0; i < only->size(); ++i) {
      const json& v = (*only)[i];
      CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < num_layers,
            "config.json: mlp_only_layers[{}] = {} is not a layer index in [0, {})", i,
            json_excerpt(v), num_layers);
      dense_only[size_t(v.get<int64_t>())] = true;
    }
  }
  bool any = false;
  for (int64_t i = 0; i < num_layers; ++i) {
    sparse[size_t(i)] = !dense_only[size_t(i)] && m.num_experts > 0 && (i + 1) % step == 0;
    any = any || sparse[size_t(i)];
  }
  m.norm_topk_prob = get_bool(j, "norm_topk_prob", false);
  if (!any) return m;  // a dense model spelled as MoE: the expert fields are never read
  m.top_k = get_in_range(j, "num_experts_per_tok", 1, m.num_experts);
  m.intermediate_size = get_in_range(j, "moe_intermediate_size", 1, kMaxIntermediate);
  return m;
}

}  // namespace

bool ModelConfig::has_moe() const {
  for (const LayerConfig& l : layers)
    if (l.moe) return true;
  return false;
}

std::string_view rope_type_name(RopeConfig::Type t) {
  switch (t) {
    case RopeConfig::Type::default_:
      return "default";
    case RopeConfig::Type::linear:
      return "linear";
    case RopeConfig::Type::llama3:
      return "llama3";
    case RopeConfig::Type::yarn:
      return "yarn";
  }
  RAISE("unknown rope type {}", int(t));
}

std::string context_description(const ModelConfig& c) {
  for (const LayerConfig& l : c.layers) {
    const RopeConfig& r = l.rope;
    if (r.type == RopeConfig::Type::yarn && c.max_context > c.max_position_embeddings) {
      // A factor past what positions can be (an int32 position, with room) is capped: say so,
      // or the product would not be the number printed.
      const bool capped =
          r.factor * double(r.original_max_position_embeddings) > double(kMaxPositions);
      return fmt::format("{} positions (yarn factor {} x original_max_position_embeddings {}{})",
                         c.max_context, r.factor, r.original_max_position_embeddings,
                         capped ? ", capped at the most positions fp8rl takes" : "");
    }
  }
  return fmt::format("{} positions (max_position_embeddings)", c.max_context);
}

void check_context(const ModelConfig& c, int64_t length, const std::string& what,
                   const std::string& advice) {
  CHECK(length <= c.max_context, "{} ({} tokens) exceeds the model's context of {}{}", what, length,
        context_description(c), advice.empty() ? "" : "; " + advice);
}

std::string_view arch_name(Arch a) {
  for (const auto& e : kArchs)
    if (e.arch == a) return e.class_name;
  RAISE("unknown architecture {}", int(a));
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> v;
  for (const auto& e : kArchs) v.emplace_back(e.class_name);
  for (const auto& e : kClassifierArchs) v.emplace_back(e.class_name);
  return v;
}

ModelConfig ModelConfig::from_json(const json& j) {
  CHECK(j.is_object(), "config.json: top level must be an object");
  ModelConfig c;
  c.raw = j;
  const json* archs = find(j, "architectures");
  CHECK(archs && archs->is_array() && !archs->empty() && (*archs)[0].is_string(),
        "config.json: 'architectures' must be a non-empty list of class names");
  c.architecture = (*archs)[0].get<std::string>();
  bool known = false;
  for (const auto& e : kArchs) {
    if (c.architecture == e.class_name) {
      c.arch = e.arch;
      known = true;
    }
  }
  for (const auto& e : kClassifierArchs) {
    if (c.architecture == e.class_name) {
      c.arch = e.arch;
      c.sequence_classification = true;
      known = true;
    }
  }
  CHECK(known, "config.json: architecture '{}' is not supported (supported: {})", c.architecture,
        fmt::join(supported_architectures(), ", "));

  c.vocab_size = get_in_range(j, "vocab_size", 1, kMaxVocab);
  c.hidden_size = get_in_range(j, "hidden_size", 1, kMaxHidden);
  c.intermediate_size = get_in_range(j, "intermediate_size", 1, kMaxIntermediate);
  c.num_layers = get_in_range(j, "num_hidden_layers", 1, kMaxLayers);
  c.num_heads = get_in_range(j, "num_attention_heads", 1, kMaxHeads);
  c.num_kv_heads = get_in_range(j, "num_key_value_heads", 1, c.num_heads, c.num_heads);
  CHECK(c.num_heads % c.num_kv_heads == 0,
        "config.json: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
        c.num_heads, c.num_kv_heads);
  CHECK(find(j, "head_dim") || c.hidden_size % c.num_heads == 0,
        "config.json: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no "
        "head_dim is given",
        c.hidden_size, c.num_heads);
  c.head_dim = get_in_range(j, "head_dim", 1, kMaxHeadDim, c.hidden_size / c.num_heads);
  check_range("num_attention_heads x head_dim", c.num_heads * c.head_dim, 1, kMaxProjection);
  CHECK(c.head_dim % 2 == 0, "config.json: head_dim ({}) must be even for rotary embeddings",
        c.head_dim);
  c.max_position_embeddings = get_in_range(j, "max_position_embeddings", 1, kMaxPositions, 4096);
  c.rms_norm_eps = get_double(j, "rms_norm_eps", 1e-6);
  CHECK(c.rms_norm_eps > 0, "config.json: rms_norm_eps must be positive");
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings",
                                   c.arch == Arch::gemma3);  // HF default per family
  const std::string dtype = get_string(j, "dtype", get_string(j, "torch_dtype", "bfloat16"));
  if (dtype == "float32")
    c.dtype = DType::f32;
  else if (dtype == "float16")
    c.dtype = DType::f16;
  else if (dtype == "bfloat16")
    c.dtype = DType::bf16;
  else
    RAISE("config.json: dtype '{}' is not supported (float32, float16, bfloat16)", dtype);

  const std::string act = get_string(j, c.arch == Arch::gemma3 ? "hidden_activation" : "hidden_act",
                                     c.arch == Arch::gemma3 ? "gelu_pytorch_tanh" : "silu");
  if (act == "silu" || act == "swish")
    c.activation = MlpActivation::silu;
  else if (act == "gelu_pytorch_tanh" || act == "gelu_tanh")
    c.activation = MlpActivation::gelu_tanh;
  else
    RAISE("config.json: MLP activation '{}' is not supported (silu, gelu_pytorch_tanh)", act);

  switch (c.arch) {
    case Arch::llama:
      c.qkv_bias = c.o_bias = get_bool(j, "attention_bias", false);
      c.mlp_bias = get_bool(j, "mlp_bias", false);
      break;
    case Arch::qwen2:
      c.qkv_bias = true;  // Qwen2 always has q/k/v biases, never an o bias
      break;
    case Arch::qwen3:
    case Arch::qwen3_moe:
      c.qkv_bias = c.o_bias = get_bool(j, "attention_bias", false);
      c.qk_norm = true;
      break;
    case Arch::mistral:
      break;
    case Arch::gemma3:
      c.qkv_bias = c.o_bias = get_bool(j, "attention_bias", false);
      c.qk_norm = true;
      c.norm_plus_one = true;
      c.sandwich_norms = true;
      c.embedding_scale = std::sqrt(double(c.hidden_size));
      c.final_logit_softcapping = get_double(j, "final_logit_softcapping", 0.0);
      // Type-checked but not applied, as in transformers: Gemma3Attention stores
      // attn_logit_softcapping and never passes it to the attention (Gemma 2's did). The
      // golden tests/data/goldens/gemma3_softcap sets it and equals HF's logits without it.
      (void)get_double(j, "attn_logit_softcapping", 0.0);
      CHECK(!get_bool(j, "use_bidirectional_attention", false),
            "config.json: use_bidirectional_attention is not supported");
      break;
  }
  const double qpas = c.arch == Arch::gemma3 ? get_double(j, "query_pre_attn_scalar", 0.0) : 0.0;
  CHECK(qpas >= 0, "config.json: query_pre_attn_scalar must be positive");
  c.attention_scale = 1.0 / std::sqrt(qpas > 0 ? qpas : double(c.head_dim));

  c.sliding_window = get_in_range(j, "sliding_window", 0, kMaxPositions, 0);
  const std::vector<bool> sliding = sliding_layers(j, c.arch, c.num_layers, c.sliding_window);
  std::vector<bool> sparse(size_t(c.num_layers), false);
  if (c.arch == Arch::qwen3_moe) c.moe = parse_moe(j, c.num_layers, sparse);

  // RoPE: transformers 5 keeps everything in rope_parameters (per layer type for Gemma 3);
  // transformers 4 has rope_theta + rope_scaling, and Gemma 3 rope_local_base_freq for the
  // sliding layers (which never take the scaling).
  const json* params = find(j, "rope_parameters");
  RopeContext rc;
  rc.theta = get_double(j, "rope_theta", 10000.0);
  rc.max_position_embeddings = c.max_position_embeddings;
  rc.top = &j;
  RopeConfig global_rope, local_rope;
  if (params && params->is_object() &&
      (params->contains("full_attention") || params->contains("sliding_attention"))) {
    rc.per_layer_type = true;
    global_rope = parse_rope(find(*params, "full_attention"), rc, "rope_parameters.full_attention");
    local_rope =
        parse_rope(find(*params, "sliding_attention"), rc, "rope_parameters.sliding_attention");
  } else {
    const json* scaling = params ? params : find(j, "rope_scaling");
    global_rope = parse_rope(scaling, rc, params ? "rope_parameters" : "rope_scaling");
    local_rope = global_rope;
    if (c.arch == Arch::gemma3) {
      local_rope = RopeConfig{};
      local_rope.theta = get_double(j, "rope_local_base_freq", 10000.0);
    }
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerConfig l;
    l.sliding = sliding[size_t(i)];
    l.moe = sparse[size_t(i)];
    l.rope = (c.arch == Arch::gemma3 && l.sliding) ? local_rope : global_rope;
    c.layers.push_back(l);
  }
  c.max_context = c.max_position_embeddings;
  for (const LayerConfig& l : c.layers) {
    if (l.rope.type != RopeConfig::Type::yarn) continue;
    const double extended =
        std::floor(l.rope.factor * double(l.rope.original_max_position_embeddings));
    if (extended > double(c.max_context))
      c.max_context = int64_t(std::min(extended, double(kMaxPositions)));
  }
  if (const json* q = find(j, "quantization_config")) c.quantization = *q;
  // transformers' PretrainedConfig: num_labels is the size of id2label, 2 without one. Read
  // for the classifier architectures only: a causal LM's labels and pad id play no part.
  if (c.sequence_classification) {
    if (const json* labels = find(j, "id2label")) {
      CHECK(labels->is_object() && !labels->empty() && labels->size() <= size_t(kMaxLabels),
            "config.json: 'id2label' must be an object of 1 to {} labels, got {}", kMaxLabels,
            json_excerpt(*labels));
      c.num_labels = int64_t(labels->size());
    }
    c.num_labels = get_in_range(j, "num_labels", 1, kMaxLabels, c.num_labels);
    if (find(j, "pad_token_id"))
      c.pad_token_id = get_in_range(j, "pad_token_id", 0, c.vocab_size - 1);
  } else if (const json* pad = find(j, "pad_token_id"); pad && pad->is_number_integer() &&
                                                        pad->get<int64_t>() >= 0 &&
                                                        pad->get<int64_t>() < c.vocab_size) {
    c.pad_token_id = pad->get<int64_t>();  // for a classifier head an adapter adds
  }
  return c;
}

ModelConfig ModelConfig::load(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  CHECK(std::filesystem::exists(path), "cannot open '{}': is '{}' a Hugging Face model directory?",
        path, model_dir);
  const json j = read_json_file(path);
  try {
    return from_json(j);
  } catch (const Error& e) {
    throw Error(fmt::format("{} ({})", e.what(), path), e.file(), e.line());
  }
}

}  // namespace fp8rl
