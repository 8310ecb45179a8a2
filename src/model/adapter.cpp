#include "model/adapter.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>

#include "core/check.h"
#include "core/output_file.h"
#include "core/rng.h"
#include "formats/json_read.h"
#include "formats/safetensors.h"
#include "model/model.h"

namespace fp8rl {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kAllLinear = "all-linear";
// PEFT prefixes the base model's module paths with the PeftModel and LoraModel attributes.
constexpr const char* kPeftPrefix = "base_model.model.";

// Each matrix starts on a multiple of 64 elements (256 bytes in f32, 128 in bf16): aligned for
// SIMD loads and for the GEMM library's operand pointers.
int64_t align_elements(int64_t n) {
  return (n + 63) / 64 * 64;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// PEFT's list match: the path itself, or a path ending in "." + entry.
bool name_matches(const std::string& path, const std::string& entry) {
  return path == entry || ends_with(path, "." + entry);
}

std::regex compile_regex(const std::string& pattern) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    RAISE("target_modules regex '{}' is malformed: {}", pattern, e.what());
  }
}

// A key of adapter_config.json that must hold a given "off" value: fp8rl does not implement
// what other values mean, and silently ignoring them would compute something else.
void require_off(const json& j, const std::string& key, const std::string& where,
                 const std::string& why) {
  if (!j.contains(key)) return;
  const json& v = j[key];
  const bool off = v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
                   ((v.is_array() || v.is_object()) && v.empty());
  CHECK(off, "{}: {} = {} is not supported: {}", where, key, v.dump(), why);
}

template <typename T>
T get_or(const json& j, const std::string& key, T fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception& e) {
    RAISE("{}: {} = {} has the wrong type: {}", where, key, j[key].dump(), e.what());
  }
}

// adapter_config.json through the checked input path (regular files only, never blocking, depth
// bounded); PEFT writes about a kilobyte, so a megabyte is a generous cap.
json read_adapter_config(const std::string& path) {
  JsonLimits limits;
  limits.max_bytes = uint64_t{1} << 20;
  return read_json_file(path, limits);
}

}  // namespace

std::string peft_tensor_name(int64_t layer, int projection, bool b) {
  return kPeftPrefix + projection_path(layer, projection) +
         (b ? ".lora_B.weight" : ".lora_A.weight");
}

std::string expert_path(int64_t layer, int64_t expert, int projection) {
  CHECK(projection >= 4 && projection < kProjections, "projection {} is not an expert's",
        projection);
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + "." +
         kProjectionNames[projection];
}

std::string peft_expert_tensor_name(int64_t layer, int64_t expert, int projection, bool b) {
  return kPeftPrefix + expert_path(layer, expert, projection) +
         (b ? ".lora_B.weight" : ".lora_A.weight");
}

std::string projection_path(int64_t layer, int projection) {
  CHECK(projection >= 0 && projection < kProjections, "projection index {} is outside [0, 7)",
        projection);
  return "model.layers." + std::to_string(layer) + (projection < 4 ? ".self_attn." : ".mlp.") +
         kProjectionNames[projection];
}

// ---- LoraConfig --------------------------------------------------------------------------

double LoraConfig::scale() const {
  return use_rslora ? lora_alpha / std::sqrt(double(r)) : lora_alpha / double(r);
}

void LoraConfig::validate() const {
  CHECK(r > 0, "LoRA rank r = {} must be positive", r);
  // A non-positive alpha makes no sense as a scale (PEFT does not check; training refuses it).
  CHECK(std::isfinite(lora_alpha) && lora_alpha > 0, "lora_alpha = {} must be positive and finite",
        lora_alpha);
  CHECK(lora_dropout >= 0.0 && lora_dropout < 1.0, "lora_dropout = {} must be in [0, 1)",
        lora_dropout);
  CHECK(init_lora_weights == "default" || init_lora_weights == "gaussian",
        "init_lora_weights '{}' is not supported (default | gaussian)", init_lora_weights);
  CHECK(target_regex.empty() != target_modules.empty(),
        "give the LoRA targets either as target_modules (names or all-linear) or as a regex, "
        "exactly one of the two");
  CHECK(target_regex.empty() || layers_to_transform.empty(),
        "layers_to_transform cannot be combined with a target_modules regex (as in PEFT)");
  for (const std::string& t : target_modules)
    CHECK(!t.empty(), "target_modules has an empty module name");
  CHECK(target_modules.size() <= 1 || std::find(target_modules.begin(), target_modules.end(),
                                                kAllLinear) == target_modules.end(),
        "target_modules: 'all-linear' stands alone, not in a list of names");
  for (int64_t l : layers_to_transform)
    CHECK(l >= 0, "layers_to_transform has a negative layer index {}", l);
  if (!target_regex.empty()) compile_regex(target_regex);
}

bool LoraConfig::targets(const std::string& path, int64_t layer) const {
  if (!target_regex.empty()) return std::regex_match(path, compile_regex(target_regex));
  const bool named = (target_modules.size() == 1 && target_modules[0] == kAllLinear) ||
                     std::any_of(target_modules.begin(), target_modules.end(),
                                 [&](const std::string& t) { return name_matches(path, t); });
  return named && (layers_to_transform.empty() ||
                   std::find(layers_to_transform.begin(), layers_to_transform.end(), layer) !=
                       layers_to_transform.end());
}

LoraConfig LoraConfig::from_peft_json(const json& j, const std::string& where) {
  CHECK(j.is_object(), "{}: expected a JSON object", where);
  LoraConfig c;
  const std::string peft_type = get_or<std::string>(j, "peft_type", "", where);
  CHECK(peft_type == "LORA", "{}: peft_type is '{}', fp8rl loads LORA adapters only", where,
        peft_type);
  const std::string task = get_or<std::string>(j, "task_type", "CAUSAL_LM", where);
  CHECK(task == "CAUSAL_LM" || task == "SEQ_CLS",
        "{}: task_type is '{}', fp8rl runs CAUSAL_LM and SEQ_CLS (reward model) adapters only",
        where, task);
  c.sequence_classification = task == "SEQ_CLS";
  CHECK(j.contains("r") && j["r"].is_number_integer(), "{}: r must be an integer", where);
  c.r = j["r"].get<int64_t>();
  CHECK(c.r > 0, "{}: r = {} must be positive", where, c.r);
  c.lora_alpha = get_or<double>(j, "lora_alpha", 8.0, where);
  c.lora_dropout = get_or<double>(j, "lora_dropout", 0.0, where);
  c.use_rslora = get_or<bool>(j, "use_rslora", false, where);

  CHECK(j.contains("target_modules") && !j["target_modules"].is_null(),
        "{}: target_modules is missing or null (PEFT's per-architecture default); fp8rl needs "
        "the modules named",
        where);
  const json& t = j["target_modules"];
  if (t.is_string()) {
    if (t.get<std::string>() == kAllLinear)
      c.target_modules = {kAllLinear};
    else
      c.target_regex = t.get<std::string>();
  } else {
    CHECK(t.is_array() && !t.empty() &&
              std::all_of(t.begin(), t.end(), [](const json& e) { return e.is_string(); }),
          "{}: target_modules = {} must be a string or a non-empty list of strings", where,
          t.dump());
    for (const json& e : t) c.target_modules.push_back(e.get<std::string>());
  }

  if (j.contains("layers_to_transform") && !j["layers_to_transform"].is_null()) {
    const json& l = j["layers_to_transform"];
    if (l.is_number_integer()) {
      c.layers_to_transform = {l.get<int64_t>()};
    } else {
      CHECK(
          l.is_array() &&
              std::all_of(l.begin(), l.end(), [](const json& e) { return e.is_number_integer(); }),
          "{}: layers_to_transform = {} must be an integer or a list of integers", where, l.dump());
      for (const json& e : l) c.layers_to_transform.push_back(e.get<int64_t>());
    }
  }
  if (j.contains("layers_pattern") && !j["layers_pattern"].is_null()) {
    const json& p = j["layers_pattern"];
    const bool plain = (p.is_string() && (p == "" || p == "layers")) ||
                       (p.is_array() && (p.empty() || (p.size() == 1 && p[0] == "layers")));
    CHECK(plain, "{}: layers_pattern = {} is not supported (the decoder layers are 'layers')",
          where, p.dump());
  }

  if (j.contains("init_lora_weights")) {
    const json& i = j["init_lora_weights"];
    // Loading does not depend on how A was initialized, unless the init rewrote the base
    // weights (PiSSA, OLoRA, CorDA, LoftQ): then the adapter only fits the rewritten base.
    if (i.is_string() && i == "gaussian") {
      c.init_lora_weights = "gaussian";
    } else {
      CHECK(i.is_boolean() || (i.is_string() && (i == "eva" || i == "orthogonal")),
            "{}: init_lora_weights = {} is not supported: the adapter may only fit a base model "
            "that PEFT rewrote",
            where, i.dump());
    }
  }

  CHECK(!get_or<bool>(j, "fan_in_fan_out", false, where),
        "{}: fan_in_fan_out = true (Conv1D weights stored [K, N]) is not supported", where);
  const std::string bias = get_or<std::string>(j, "bias", "none", where);
  CHECK(bias == "none", "{}: bias = '{}' is not supported, only 'none' (fp8rl trains no biases)",
        where, bias);
  if (c.sequence_classification) {
    // PEFT adds the classifier heads itself; "classifier" names no module of these models.
    if (j.contains("modules_to_save") && !j["modules_to_save"].is_null()) {
      const json& m = j["modules_to_save"];
      CHECK(m.is_array() && std::all_of(m.begin(), m.end(),
                                        [](const json& e) {
                                          return e.is_string() &&
                                                 (e == "score" || e == "classifier");
                                        }),
            "{}: modules_to_save = {}: a SEQ_CLS adapter may save only the 'score' head "
            "('classifier' names no module of these models)",
            where, m.dump());
    }
  } else {
    require_off(j, "modules_to_save", where, "fp8rl trains only the LoRA matrices");
  }
  require_off(j, "use_dora", where, "DoRA's magnitude vectors are not implemented");
  require_off(j, "lora_bias", where, "LoRA biases are not implemented");
  require_off(j, "rank_pattern", where, "every module must have rank r");
  require_off(j, "alpha_pattern", where, "every module must have lora_alpha");
  require_off(j, "exclude_modules", where, "exclusions are not implemented");
  require_off(j, "layer_replication", where, "layer replication is not implemented");
  require_off(j, "target_parameters", where, "only nn.Linear modules are adapted");
  require_off(j, "trainable_token_indices", where, "trainable tokens are not implemented");
  require_off(j, "use_qalora", where, "QALoRA is not implemented");
  require_off(j, "alora_invocation_tokens", where, "activated LoRA is not implemented");
  require_off(j, "arrow_config", where, "Arrow routing is not implemented");
  require_off(j, "use_bdlora", where, "BD-LoRA is not implemented");
  try {
    c.validate();
  } catch (const Error& e) {
    RAISE("{}: {}", where, e.what());
  }
  return c;
}

json LoraConfig::to_peft_json(const std::string& base_model_name) const {
  json targets;
  if (!target_regex.empty()) {
    targets = target_regex;
  } else if (target_modules.size() == 1 && target_modules[0] == kAllLinear) {
    // PEFT expands all-linear to the module names before it saves.
    targets = json::array();
    for (const char* n : kProjectionNames) targets.push_back(n);
  } else {
    targets = target_modules;
  }
  return {{"peft_type", "LORA"},
          {"task_type", sequence_classification ? "SEQ_CLS" : "CAUSAL_LM"},
          {"base_model_name_or_path", base_model_name},
          {"revision", nullptr},
          {"inference_mode", true},
          {"r", r},
          // PEFT types lora_alpha as int; an integral value is written as one.
          {"lora_alpha", lora_alpha == std::round(lora_alpha) && std::fabs(lora_alpha) < 1e15
                             ? json(int64_t(lora_alpha))
                             : json(lora_alpha)},
          {"lora_dropout", lora_dropout},
          {"use_rslora", use_rslora},
          {"target_modules", targets},
          {"layers_to_transform",
           layers_to_transform.empty() ? json(nullptr) : json(layers_to_transform)},
          {"layers_pattern", nullptr},
          {"bias", "none"},
          {"fan_in_fan_out", false},
          // PEFT's reset_lora_parameters takes true (not a string) for kaiming-uniform A.
          {"init_lora_weights", init_lora_weights == "gaussian" ? json("gaussian") : json(true)},
          // What PeftModelForSequenceClassification writes for SEQ_CLS.
          {"modules_to_save",
           sequence_classification ? json::array({"classifier", "score"}) : json(nullptr)},
          {"use_dora", false},
          {"rank_pattern", json::object()},
          {"alpha_pattern", json::object()}};
}

// ---- LoraAdapter -------------------------------------------------------------------------

namespace {
// PEFT's saved name of a modules_to_save head (the wrapper's modules_to_save.<adapter> part
// dropped).
constexpr const char* kScoreTensor = "base_model.model.score.weight";
// Far above any adapter (a 1T-parameter model's full rank), and far below int64's end, so that
// the layout's sums and the byte counts cannot overflow.
constexpr int64_t kMaxAdapterParams = int64_t{1} << 52;
}  // namespace

LoraAdapter LoraAdapter::allocate(const LoraConfig& config, const Model& model) {
  config.validate();
  LoraAdapter a;
  a.config_ = config;
  a.num_layers_ = int64_t(model.layers.size());
  for (int64_t l : config.layers_to_transform)
    CHECK(l < a.num_layers_, "layers_to_transform has layer {}, the model has {} layers", l,
          a.num_layers_);

  // Every name (or the regex) must select something: a target that matches nothing here, such
  // as lm_head or embed_tokens, would otherwise be dropped silently.
  std::vector<std::string> entries = config.target_modules;
  if (!config.target_regex.empty()) entries = {config.target_regex};
  for (const std::string& e : entries) {
    LoraConfig one = config;
    if (config.target_regex.empty()) one.target_modules = {e};
    bool any = false;
    for (int64_t l = 0; l < a.num_layers_ && !any; ++l)
      for (int p = 0; p < kProjections && !any; ++p)
        any = one.targets(projection_path(l, p), l) ||
              (p >= 4 && !model.layers[size_t(l)].moe.empty() &&
               one.targets(expert_path(l, 0, p), l));
    CHECK(any,
          "target module '{}' selects none of the model's projections; fp8rl adapts "
          "model.layers.N.self_attn.{{q,k,v,o}}_proj and model.layers.N.mlp.{{gate,up,down}}_proj "
          "(in an MoE layer, model.layers.N.mlp.experts.E.{{gate,up,down}}_proj)",
          e);
  }

  const std::optional<std::regex> re =
      config.target_regex.empty() ? std::nullopt
                                  : std::optional<std::regex>(compile_regex(config.target_regex));
  // A layer's A matrices first, in projection order, then its B matrices: the A matrices of a
  // group reading one input (q/k/v, gate/up) then lie side by side, and the forward's down
  // product of the group is one GEMM over them (ops::linear_group).
  int64_t total = 0;
  a.slots_.resize(size_t(a.num_layers_) * kProjections);
  for (int64_t l = 0; l < a.num_layers_; ++l) {
    for (bool b : {false, true}) {
      for (int p = 0; p < kProjections; ++p) {
        const auto hits = [&](const std::string& path) {
          return re ? std::regex_match(path, *re) : config.targets(path, l);
        };
        const MoeWeights& moe = model.layers[size_t(l)].moe;
        Slot& s = a.slots_[size_t(l) * kProjections + size_t(p)];
        if (p >= 4 && !moe.empty()) {
          // PEFT adapts each expert module its targets match: all of a layer's, or none.
          const int64_t e = moe.gate.num_experts();
          int64_t matched = 0;
          for (int64_t x = 0; x < e; ++x) matched += hits(expert_path(l, x, p)) ? 1 : 0;
          if (matched == 0) continue;
          CHECK(matched == e,
                "LoRA targets {} of the {} experts' {} in layer {}: fp8rl adapts all of a "
                "layer's experts or none",
                matched, e, kProjectionNames[p], l);

          const ExpertLinear& w = p == 4 ? moe.gate : p == 5 ? moe.up : moe.down;
          s.n = w.out_features();
          s.k = w.in_features();
          s.experts = e;
        } else {
          if (!hits(projection_path(l, p))) continue;
          const Linear& lin = *model.layers[size_t(l)].projection(p);
          s.n = lin.out_features();
          s.k = lin.in_features();
        }
        (b ? s.offset_b : s.offset) = total;
        // lora_r scales every matrix: an absurd rank is refused below, never an overflow.
        const int64_t dim = (b ? s.n : s.k) * std::max<int64_t>(s.experts, 1);
        CHECK(config.r <= (kMaxAdapterParams - total) / dim,
              "lora_r = {} makes an adapter of more than {} parameters", config.r,
              kMaxAdapterParams);
        total = align_elements(total + config.r * dim);
      }
    }
  }
  if (config.sequence_classification) {
    const ModelConfig& mc = model.config();
    a.score_rows_ = config.num_labels;
    a.score_cols_ = mc.hidden_size;
    CHECK(!mc.sequence_classification || config.num_labels == mc.num_labels,
          "the adapter's score head has {} labels, the model '{}' has num_labels = {}",
          config.num_labels, model.dir(), mc.num_labels);
    CHECK(a.score_rows_ > 0, "the score head needs at least one label, got {}", a.score_rows_);
    total = (total + 63) / 64 * 64;
    a.score_offset_ = total;
    total += a.score_rows_ * a.score_cols_;
  }
  a.num_params_ = total;
  check_host_bytes(
      size_t(total) * sizeof(float),
      fmt::format("lora_r = {}: the adapter's {} parameters (f32 masters)", config.r, total));
  a.masters_ = Tensor::zeros({total}, DType::f32);
  return a;
}

const LoraAdapter::Slot& LoraAdapter::slot(int64_t layer, int projection) const {
  CHECK(layer >= 0 && layer < num_layers_ && projection >= 0 && projection < kProjections,
        "adapter slot (layer {}, projection {}) is outside the {} layers x 7 projections", layer,
        projection, num_layers_);
  return slots_[size_t(layer) * kProjections + size_t(projection)];
}

TensorView LoraAdapter::master_a(int64_t layer, int projection) const {
  return slice(master_params(), layer, projection, false);
}

TensorView LoraAdapter::master_b(int64_t layer, int projection) const {
  return slice(master_params(), layer, projection, true);
}

TensorView LoraAdapter::master_params() const {
  if (ctx_.device == Device::cpu) return masters_.view();
  return device_masters_.view({num_params_}, DType::f32);
}

TensorView LoraAdapter::compute_params() const {
  if (ctx_.device == Device::cpu) return {};
  return compute_copy_.view({num_params_}, DType::bf16);
}

Tensor LoraAdapter::host_masters() const {
  Tensor host = Tensor::empty({num_params_}, DType::f32);
  Context ctx = ctx_;
  ops::copy(ctx, master_params(), host.view());  // a download waits for the device
  return host;
}

TensorView LoraAdapter::matrix(const TensorView& flat, const Slot& s, bool b) const {
  const int64_t r = config_.r;
  const Shape shape = s.experts > 0 ? (b ? Shape{s.experts, s.n, r} : Shape{s.experts, r, s.k})
                                    : (b ? Shape{s.n, r} : Shape{r, s.k});
  const size_t offset = size_t(b ? s.offset_b : s.offset) * dtype_size(flat.dtype);
  return TensorView(static_cast<char*>(flat.data) + offset, flat.dtype, shape, flat.device);
}

TensorView LoraAdapter::score_slice(const TensorView& flat) const {
  CHECK(has_score_head(), "the adapter has no score head (task_type is not SEQ_CLS)");
  CHECK(flat.dtype == DType::f32 && flat.is_contiguous() && flat.numel() == num_params_,
        "adapter slice: the buffer must be contiguous f32 [{}] like the masters, got {} {}",
        num_params_, dtype_name(flat.dtype), flat.shape.str());
  return TensorView(flat.ptr<float>() + score_offset_, DType::f32, {score_rows_, score_cols_},
                    flat.device);
}

LinearWeight LoraAdapter::score_head(Device device) const {
  CHECK(has_score_head(), "the adapter has no score head (task_type is not SEQ_CLS)");
  CHECK(device == ctx_.device, "the adapter is on {}, its score head was asked for on {}",
        device_name(ctx_.device), device_name(device));
  LinearWeight w;
  if (ctx_.device == Device::cpu) {
    w.weight = score_slice(master_params());
  } else {
    const TensorView c = compute_params();
    w.weight = TensorView(static_cast<char*>(c.data) + size_t(score_offset_) * dtype_size(c.dtype),
                          c.dtype, {score_rows_, score_cols_}, c.device);
  }
  return w;
}

TensorView LoraAdapter::slice(const TensorView& flat, int64_t layer, int projection, bool b) const {
  const Slot& s = slot(layer, projection);
  CHECK(!s.empty(), "{} carries no adapter", projection_path(layer, projection));
  CHECK(flat.dtype == DType::f32 && flat.is_contiguous() && flat.numel() == num_params_,
        "adapter slice: the buffer must be contiguous f32 [{}] like the masters, got {} {}",
        num_params_, dtype_name(flat.dtype), flat.shape.str());
  return matrix(flat, s, b);
}

LoraAdapter LoraAdapter::init(const LoraConfig& config, const Model& model, uint64_t seed) {
  LoraConfig c = config;
  if (c.sequence_classification && model.config().sequence_classification)
    c.num_labels = model.config().num_labels;  // the head starts as the model's
  LoraAdapter a = allocate(c, model);
  const bool gaussian = config.init_lora_weights == "gaussian";
  for (size_t i = 0; i < a.slots_.size(); ++i) {
    const Slot& s = a.slots_[i];
    if (s.empty()) continue;
    // One stream per (layer, projection), so that targeting more modules leaves the values of
    // the others unchanged.
    const uint64_t stream = splitmix64(seed ^ splitmix64(uint64_t(i) + 1));
    float* pa = a.masters_.ptr<float>() + s.offset;  // B stays zero
    const float bound = 1.0f / std::sqrt(float(s.k));
    const float std_dev = 1.0f / float(config.r);
    for (int64_t j = 0; j < config.r * s.k * std::max<int64_t>(s.experts, 1); ++j)
      pa[j] = gaussian ? std_dev * normal01(stream, uint64_t(j))
                       : bound * (2.0f * uniform01(stream, uint64_t(j)) - 1.0f);
  }
  if (a.has_score_head()) {
    // PEFT's modules_to_save starts from the model's own head; a causal LM gets the head
    // transformers initializes for its classifier: normal with std initializer_range.
    const TensorView head = a.score_slice(a.masters_.view());
    const Model& m = model;
    if (m.config().sequence_classification) {
      // A model already on the device still has its checkpoint mapped on the host.
      const bool host = m.lm_head.weight.device == Device::cpu;
      CHECK(host || m.checkpoint().contains("score.weight"),
            "a SEQ_CLS adapter over '{}': its score head is on {} and not in a checkpoint", m.dir(),
            device_name(m.lm_head.weight.device));
      const TensorView src = host ? m.lm_head.weight : m.checkpoint().view("score.weight");
      convert(src.data, src.dtype, head.data, DType::f32, size_t(head.numel()));
    } else {
      const double std_dev = m.config().raw.is_object() &&
                                     m.config().raw.contains("initializer_range") &&
                                     m.config().raw["initializer_range"].is_number()
                                 ? m.config().raw["initializer_range"].get<double>()
                                 : 0.02;
      const uint64_t stream = splitmix64(seed ^ 0x5c0e'4ead'0000'0001ull);
      for (int64_t j = 0; j < head.numel(); ++j)
        head.ptr<float>()[j] = float(std_dev) * normal01(stream, uint64_t(j));
    }
  }
  return a;
}

LoraAdapter LoraAdapter::load_peft(const std::string& dir, const Model& model) {
  const std::string config_path = dir + "/adapter_config.json";
  const std::string tensors_path = dir + "/adapter_model.safetensors";
  CHECK(fs::exists(config_path), "'{}' is not a PEFT adapter: it has no adapter_config.json", dir);
  if (!fs::exists(tensors_path)) {
    CHECK(!fs::exists(dir + "/adapter_model.bin"),
          "'{}' stores its adapter as adapter_model.bin (pickle); fp8rl reads only "
          "adapter_model.safetensors (re-save it with safe_serialization=True)",
          dir);
    RAISE("'{}' has no adapter_model.safetensors", dir);
  }
  LoraConfig config = LoraConfig::from_peft_json(read_adapter_config(config_path), config_path);
  const auto file = SafetensorsFile::open(tensors_path);
  const SafetensorsTensorInfo* head = nullptr;
  if (config.sequence_classification) {
    const int64_t h = model.config().hidden_size;
    head = file->find(kScoreTensor);
    CHECK(head != nullptr,
          "{}: a SEQ_CLS adapter needs its score head '{}' [num_labels, {}] (PEFT's "
          "modules_to_save), and it is missing",
          tensors_path, kScoreTensor, h);
    CHECK(
        head->supported && head->shape.rank == 2 && head->shape[0] >= 1 && head->shape[1] == h &&
            (head->dtype == DType::f32 || head->dtype == DType::bf16 || head->dtype == DType::f16),
        "{}: the score head '{}' is {} {}, expected F32/BF16/F16 [num_labels, {}] (the model's "
        "hidden size)",
        tensors_path, kScoreTensor, head->dtype_str, head->shape.str(), h);
    config.num_labels = head->shape[0];
  }
  LoraAdapter a;
  try {
    a = allocate(config, model);
  } catch (const Error& e) {
    RAISE("{}: {}", config_path, e.what());
  }

  std::set<std::string> expected;
  if (head != nullptr) {
    expected.insert(kScoreTensor);
    const TensorView dst = a.score_slice(a.masters_.view());
    convert(file->view(*head).data, head->dtype, dst.data, DType::f32, size_t(dst.numel()));
    for (int64_t i = 0; i < dst.numel(); ++i)
      CHECK(std::isfinite(dst.ptr<float>()[i]), "{}: tensor '{}' element {} is {}", tensors_path,
            kScoreTensor, i, dst.ptr<float>()[i]);
  }
  const int64_t r = config.r;
  for (int64_t l = 0; l < a.num_layers_; ++l) {
    for (int p = 0; p < kProjections; ++p) {
      const Slot& s = a.slot(l, p);
      if (s.empty()) continue;
      for (const bool is_b : {false, true})
        for (int64_t x = 0; x < std::max<int64_t>(s.experts, 1); ++x) {
          // An MoE layer's experts: one PEFT module each, stacked in the slot.
          const std::string name =
              s.experts > 0 ? peft_expert_tensor_name(l, x, p, is_b) : peft_tensor_name(l, p, is_b);
          const std::string module = s.experts > 0 ? expert_path(l, x, p) : projection_path(l, p);
          expected.insert(name);
          const Shape want = is_b ? Shape{s.n, r} : Shape{r, s.k};
          const SafetensorsTensorInfo* info = file->find(name);
          CHECK(info != nullptr, "{}: missing tensor '{}' (expected {}: {} is targeted)",
                tensors_path, name, want.str(), module);
          CHECK(info->supported && (info->dtype == DType::f32 || info->dtype == DType::bf16 ||
                                    info->dtype == DType::f16),
                "{}: tensor '{}' has dtype {}, expected F32, BF16 or F16", tensors_path, name,
                info->dtype_str);
          const Shape& got = info->shape;
          if (got.rank == 2 && got[is_b ? 0 : 1] == want[is_b ? 0 : 1])
            CHECK(got[is_b ? 1 : 0] == r,
                  "{}: tensor '{}' has rank {} (shape {}), adapter_config.json says r = {}",
                  tensors_path, name, got[is_b ? 1 : 0], got.str(), r);
          CHECK(got == want,
                "{}: tensor '{}' has shape {}, expected {} (r = {}, the model's {} is [{}, {}])",
                tensors_path, name, got.str(), want.str(), r, module, s.n, s.k);
          const size_t n = size_t(want.numel());
          float* dst = a.masters_.ptr<float>() + (is_b ? s.offset_b : s.offset) + size_t(x) * n;
          convert(file->view(*info).data, info->dtype, dst, DType::f32, n);
          for (size_t i = 0; i < n; ++i)
            CHECK(std::isfinite(dst[i]), "{}: tensor '{}' element {} is {}", tensors_path, name, i,
                  dst[i]);
        }
    }
  }
  for (const SafetensorsTensorInfo& info : file->tensors())
    CHECK(expected.count(info.name) == 1,
          "{}: unexpected tensor '{}': not a lora_A/lora_B weight of a projection that "
          "adapter_config.json targets",
          tensors_path, info.name);
  return a;
}

void LoraAdapter::save_peft(const std::string& dir, const std::string& base_model_name) const {
  fs::path target = fs::path(dir);
  if (!target.has_filename()) target = target.parent_path();  // "out/" -> "out"
  const Tensor host = ctx_.device == Device::cpu ? masters_ : host_masters();
  SafetensorsWriter writer;
  for (int64_t l = 0; l < num_layers_; ++l)
    for (int p = 0; p < kProjections; ++p) {
      if (!targeted(l, p)) continue;
      const int64_t experts = slot(l, p).experts;
      for (const bool b : {false, true}) {
        const TensorView m = slice(host.view(), l, p, b);
        if (experts == 0) writer.add(peft_tensor_name(l, p, b), m);
        for (int64_t x = 0; x < experts; ++x)  // each expert's module, as PEFT saves them
          writer.add(peft_expert_tensor_name(l, x, p, b),
                     m.slice_rows(x, x + 1).reshape({m.dim(1), m.dim(2)}));
      }
    }
  if (has_score_head()) writer.add(kScoreTensor, score_slice(host.view()));
  const std::string config_text = config_.to_peft_json(base_model_name).dump(2) + "\n";

  // Each file is written under a temporary name and renamed (core/output_file.h); a new
  // directory is built whole under a temporary name and renamed, so that a failure (a full
  // disk) never leaves a directory that reads as an adapter.
  std::error_code ec;
  if (fs::exists(target)) {
    CHECK(fs::is_directory(target), "cannot save the adapter into '{}': not a directory",
          target.string());
    writer.write((target / "adapter_model.safetensors").string());
    write_file_replacing(target / "adapter_config.json", config_text);
    return;
  }
  const fs::path tmp = target.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  CHECK(!ec, "cannot create '{}': {}", tmp.string(), ec.message());
  try {
    writer.write((tmp / "adapter_model.safetensors").string());
    write_file_replacing(tmp / "adapter_config.json", config_text);
    fsync_directory(tmp);
    fs::rename(tmp, target, ec);
    CHECK(!ec, "cannot rename '{}' to '{}': {}", tmp.string(), target.string(), ec.message());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fsync_directory(target.has_parent_path() ? target.parent_path() : fs::path("."));
}

void LoraAdapter::to_device(Context& ctx) {
  if (ctx.device == ctx_.device) return;
  CHECK(ctx_.device == Device::cpu, "the adapter is on {} already; it moves once, from the host",
        device_name(ctx_.device));
  device_masters_ = DeviceBuffer(ctx, size_t(num_params_) * sizeof(float));
  compute_copy_ = DeviceBuffer(ctx, size_t(num_params_) * dtype_size(DType::bf16));
  ctx_ = ctx;
  ctx_.scratch = nullptr;  // the adapter's transfers need no scratch
  upload(masters_.view());
  masters_ = Tensor();
}

void LoraAdapter::upload(const TensorView& values) {
  Tensor staging = Tensor::empty({num_params_}, DType::bf16);  // [P] bf16 host
  convert(values.data, DType::f32, staging.ptr<uint16_t>(), DType::bf16, size_t(num_params_));
  ops::copy(ctx_, values, master_params());
  ops::copy(ctx_, staging.view(), compute_params());
  ops::synchronize(ctx_);  // the staging buffer and the caller's values may go now
}

void LoraAdapter::set_masters(const TensorView& values) {
  CHECK(values.device == Device::cpu && values.dtype == DType::f32 && values.is_contiguous() &&
            values.numel() == num_params_,
        "adapter masters: expected contiguous f32 [{}] host values, got {} {} on {}", num_params_,
        dtype_name(values.dtype), values.shape.str(), device_name(values.device));
  if (ctx_.device == Device::cpu)
    std::copy(values.ptr<float>(), values.ptr<float>() + num_params_, masters_.ptr<float>());
  else
    upload(values);
  mark_updated();
}

TensorView LoraAdapter::training_view(int64_t layer, int projection, bool b, Device device) const {
  CHECK(device == ctx_.device, "the adapter's masters are on {}, the backward runs on {}",
        device_name(ctx_.device), device_name(device));
  return slice(master_params(), layer, projection, b);
}

TensorView LoraAdapter::compute_view(const Slot& s, bool b, Device device) const {
  CHECK(device == ctx_.device,
        "the adapter is on {}: call to_device before a forward on {} uses it",
        device_name(ctx_.device), device_name(device));
  return matrix(device == Device::cpu ? master_params() : compute_params(), s, b);
}

LoraWeights LoraAdapter::weights(int64_t layer, int projection, Device device) const {
  const Slot& s = slot(layer, projection);
  if (s.empty()) return {};
  LoraWeights w;
  w.a = compute_view(s, false, device);
  w.b = compute_view(s, true, device);
  w.scale = scale();
  return w;
}

void LoraAdapter::check_fits(const Model& model) const {
  CHECK(int64_t(model.layers.size()) == num_layers_, "adapter made for {} layers, the model has {}",
        num_layers_, model.layers.size());
  CHECK(model.device() == ctx_.device,
        "the adapter is on {}, the model on {}: call to_device on the adapter too",
        device_name(ctx_.device), device_name(model.device()));
  for (int64_t l = 0; l < num_layers_; ++l)
    for (int p = 0; p < kProjections; ++p) {
      const Slot& s = slot(l, p);
      const MoeWeights& moe = model.layers[size_t(l)].moe;
      if (s.experts > 0) {
        const ExpertLinear& w = p == 4 ? moe.gate : p == 5 ? moe.up : moe.down;
        CHECK(!moe.empty() && w.num_experts() == s.experts && w.out_features() == s.n &&
                  w.in_features() == s.k,
              "adapter of {} is for {} experts of [{}, {}], the model's layer has {}",
              projection_path(l, p), s.experts, s.n, s.k,
              moe.empty() ? std::string("no experts") : w.weight.shape.str());
        continue;
      }
      const Linear& lin = *model.layers[size_t(l)].projection(p);
      CHECK(s.empty() || (lin.out_features() == s.n && lin.in_features() == s.k),
            "adapter of {} is for [{}, {}], the model's projection is [{}, {}]",
            projection_path(l, p), s.n, s.k, lin.out_features(), lin.in_features());
    }
  CHECK(!has_score_head() || score_cols_ == model.config().hidden_size,
        "the adapter's score head is [{}, {}], the model's hidden size is {}", score_rows_,
        score_cols_, model.config().hidden_size);
}

size_t LoraAdapter::nbytes() const {
  return masters_.nbytes() + device_masters_.size() + compute_copy_.size();
}

void add_lora_reference(const TensorView& x, const LoraWeights& lora, const TensorView& y) {
  CHECK(lora.active(), "add_lora_reference: the projection has no adapter");
  const TensorView& a = lora.a;  // [r, K]
  const TensorView& b = lora.b;  // [N, r]
  CHECK(x.device == Device::cpu && y.device == Device::cpu && a.device == Device::cpu &&
            x.dtype == DType::f32 && y.dtype == DType::f32 && a.dtype == DType::f32 &&
            b.dtype == DType::f32 && x.is_contiguous() && y.is_contiguous() && a.is_contiguous() &&
            b.is_contiguous(),
        "add_lora_reference takes contiguous f32 CPU tensors");
  const int64_t m = x.dim(0), k = x.dim(1), r = a.dim(0), n = b.dim(0);
  CHECK(a.dim(1) == k && b.dim(1) == r && y.dim(0) == m && y.dim(1) == n,
        "add_lora_reference: x {} A {} B {} y {} do not fit y = x A^T B^T", x.shape.str(),
        a.shape.str(), b.shape.str(), y.shape.str());
  std::vector<double> t(static_cast<size_t>(r));  // [r] one row of x A^T
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x.ptr<float>() + i * k;
    for (int64_t j = 0; j < r; ++j) {
      double acc = 0.0;
      for (int64_t c = 0; c < k; ++c) acc += double(xi[c]) * double(a.ptr<float>()[j * k + c]);
      t[size_t(j)] = acc;
    }
    float* yi = y.ptr<float>() + i * n;
    for (int64_t o = 0; o < n; ++o) {
      double acc = 0.0;
      for (int64_t j = 0; j < r; ++j) acc += t[size_t(j)] * double(b.ptr<float>()[o * r + j]);
      yi[o] = float(double(yi[o]) + double(lora.scale) * acc);
    }
  }
}

}  // namespace fp8rl
