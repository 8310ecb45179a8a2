#include "cli/model_session.h"

#include <cstdlib>
#include <filesystem>

#include "cli/common.h"
#include "core/check.h"
#include "formats/json_read.h"
#include "formats/quant_config.h"
#include "ops/gpu_support.h"
#include "ops/memory_budget.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace fp8rl::cli {

namespace {

// --chat-template-kwargs: a JSON mapping, read before anything loads.
nlohmann::ordered_json parse_chat_template_kwargs(const std::string& text) {
  if (text.empty()) return nlohmann::ordered_json::object();
  nlohmann::ordered_json kwargs;
  try {
    kwargs = parse_ordered_json_text(text, "--chat-template-kwargs");
  } catch (const Error& e) {
    RAISE("--chat-template-kwargs: not JSON ({})", e.what());
  }
  CHECK(kwargs.is_object(),
        "--chat-template-kwargs {} is not a mapping of template variables (e.g. "
        "'{{\"enable_thinking\": false}}')",
        json_excerpt(kwargs));
  return kwargs;
}

}  // namespace

ModelText::ModelText(std::string dir, const std::string& chat_template_kwargs)
    : dir_(std::move(dir)),
      chat_template_kwargs_(parse_chat_template_kwargs(chat_template_kwargs)) {
  // config.json first: a directory that is not a model is named as such, not as one without a
  // tokenizer.
  if (!dir_.empty()) config_ = ModelConfig::load(dir_);
  if (!dir_.empty() && std::filesystem::exists(std::filesystem::path(dir_) / "tokenizer.json"))
    tokenizer_ = std::make_unique<tok::Tokenizer>(tok::Tokenizer::from_file(dir_));
}

ModelText::~ModelText() = default;
ModelText::ModelText(ModelText&&) noexcept = default;
ModelText& ModelText::operator=(ModelText&&) noexcept = default;

const ModelConfig& ModelText::config() const {
  CHECK(config_.has_value(), "no model directory, so no config.json");
  return *config_;
}

const tok::Tokenizer& ModelText::require_tokenizer(const std::string& what) const {
  CHECK(tokenizer_ != nullptr, "{} needs the model's tokenizer, and {} has no tokenizer.json", what,
        dir_.empty() ? std::string("the model") : dir_);
  return *tokenizer_;
}

std::vector<int32_t> ModelText::eos_ids() const {
  if (dir_.empty()) return {};
  const tok::TokenizerConfig tc = tok::TokenizerConfig::load(dir_);
  return tokenizer_ ? tc.stop_token_ids(*tokenizer_) : tc.generation_eos_token_ids;
}

std::vector<int32_t> ModelText::encode_text(const std::string& text) const {
  return require_tokenizer("a text prompt").encode(text, /*add_special=*/true);
}

const std::string& ModelText::chat_template_source() const {
  if (!chat_) chat_ = std::make_unique<ChatTemplateConfig>(load_chat_template_config(dir_));
  return chat_->source;
}

std::string ModelText::render_chat(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& kwargs,
                                   const nlohmann::ordered_json& tools) const {
  require_tokenizer("a chat (messages)");
  CHECK(messages.is_array(), "messages must be a list of {{role, content}} objects");
  CHECK(kwargs.is_null() || kwargs.is_object(),
        "chat_template_kwargs must be a mapping of template variables, got {}",
        json_excerpt(kwargs));
  if (!chat_) chat_ = std::make_unique<ChatTemplateConfig>(load_chat_template_config(dir_));
  ChatRequest req;
  req.messages = messages;
  req.add_generation_prompt = true;
  req.tools = tools;
  req.variables = chat_template_kwargs_;
  if (kwargs.is_object())
    for (const auto& [key, value] : kwargs.items()) req.variables[key] = value;
  return ChatTemplate(chat_->source).render(build_chat_context(*chat_, req));
}

std::vector<int32_t> ModelText::encode_chat(const nlohmann::ordered_json& messages,
                                            const nlohmann::ordered_json& kwargs,
                                            const nlohmann::ordered_json& tools) const {
  // The template wrote the special tokens itself.
  return tokenizer_->encode(render_chat(messages, kwargs, tools), /*add_special=*/false);
}

ModelSession::ModelSession(const SessionOptions& options)
    : ModelSession(options, ModelText(options.model, options.chat_template_kwargs)) {}

ModelSession::ModelSession(const SessionOptions& options, ModelText text) : text_(std::move(text)) {
  CHECK(text_.dir() == options.model, "the model text of {} given for a session of {}", text_.dir(),
        options.model);
  const std::optional<Fp8Scheme> fp8 = parse_fp8_option(options.fp8);
  open_device(options);
  // The checkpoint's scheme as stored unless --fp8 names one.
  const ModelConfig& config = text_.config();
  const Fp8Scheme stored = parse_quantization_config(config.quantization).weight;
  check_scheme(fp8.value_or(stored));
  // The model's shapes as random buffers planned on a dry-run context (nothing is allocated or
  // filled): a plan_only session's model, and what the budget check measures.
  const auto planned = [&](Context& ctx) {
    CHECK(!fp8 || stored == Fp8Scheme::off || *fp8 == stored,
          "--fp8 {}: the checkpoint is quantized with {} scaling already", scheme_name(*fp8),
          scheme_name(stored));
    // Model::load keeps a CPU model's unquantized weights in the checkpoint's precision; a
    // CUDA device holds them in bf16.
    const DType unquantized =
        ctx.device == Device::cpu && config.dtype == DType::f32 ? DType::f32 : DType::bf16;
    return Model::random(config, fp8 ? fp8 : std::optional<Fp8Scheme>(stored), ctx, 0, true,
                         unquantized);
  };
  check_weights_fit(planned);
  if (options.plan_only) {
    model_.emplace(planned(ctx_));
  } else {
    LoadOptions load;
    load.fp8 = fp8;
    model_.emplace(Model::load(options.model, load));
  }
  model_->to_device(ctx_);
  load_adapter(options);
}

ModelSession::ModelSession(const SessionOptions& options,
                           const std::function<Model(Context&)>& make)
    : text_(options.model, options.chat_template_kwargs) {
  open_device(options);
  check_weights_fit(make);
  model_.emplace(make(ctx_));
  model_->to_device(ctx_);
  load_adapter(options);
}

ModelSession::~ModelSession() {
  // The adapter's device copy and the model's weights go before the device.
  adapter_.reset();
  model_.reset();
}

void ModelSession::open_device(const SessionOptions& options) {
  const Device device = parse_device(options.device);
  CHECK(!options.bf16_activations || device == Device::cpu,
        "bf16 activations emulation applies to --device cpu only");
  size_t budget = 0;
  if (options.gpu_memory) {
    budget = gpu_memory_bytes("gpu_memory", *options.gpu_memory);
    CHECK(device == Device::cuda,
          "gpu_memory = {} applies to --device cuda only (the CPU runs in host memory)",
          *options.gpu_memory);
  }
  if (options.plan_only) {
    plan_arena_ =
        std::make_unique<Arena>(Arena::measuring(device, device == Device::cuda ? 256 : 64));
    ctx_ = Context{device, plan_arena_.get()};
    ctx_.dry_run = true;
    // The device planned for holds what a CudaDevice takes at start: the cuBLASLt workspace
    // and the first scratch arena.
    planned_ = std::make_unique<PlannedDevice>();
    planned_->budget = budget;
    if (device == Device::cuda) {
      const CudaDeviceOptions start = options.cuda;
      planned_->add(start.workspace_bytes + start.arena_bytes);
      planned_->scratch = start.arena_bytes;
    }
    ctx_.planned = planned_.get();
    return;
  }
  if (device == Device::cuda) {
    CHECK(CudaDevice::built(), "--device cuda: this fp8rl was built without the CUDA backend");
    CHECK(CudaDevice::count() > 0, "--device cuda: no CUDA device is visible");
    CudaDeviceOptions o = options.cuda;
    o.memory_budget = budget;
    o.forced_capability = forced_capability_of(std::getenv("FP8RL_CUDA_CAPABILITY"));
    cuda_ = std::make_unique<CudaDevice>(o);
    ctx_ = cuda_->context();
  }
  ctx_.bf16_activations = options.bf16_activations;
}

void ModelSession::check_weights_fit(const std::function<Model(Context&)>& make) {
  const size_t budget = ops::device_memory_budget(ctx_);
  if (budget == 0) return;
  Arena measuring = Arena::measuring(ctx_.device, 256);
  Context dry{ctx_.device, &measuring};
  dry.dry_run = true;
  const size_t weights = model_weight_bytes(make(dry));
  // What the device holds already: the cuBLASLt workspace, the first scratch arena.
  const size_t held = planned_ != nullptr ? planned_->held : ops::device_allocated_bytes(ctx_);
  const MemoryPart parts[] = {{"weights", weights}, {"workspace", held}};
  check_memory_budget(budget, parts,
                      "the weights alone do not fit: give a larger --gpu-memory, or FP8 weights "
                      "(--fp8 row, half of bf16's bytes), or a smaller model");
}

void ModelSession::check_scheme(Fp8Scheme scheme) const {
  if (cuda_ == nullptr) return;
  const GpuCapability gpu = cuda_->capability();
  const std::string refusal = fp8_scheme_refusal(scheme, gpu);
  CHECK(refusal.empty(), "{}", refusal);
  const std::string note = fp8_scheme_note(scheme, gpu);
  if (!note.empty()) fmt::print(stderr, "{}\n", note);
}

void ModelSession::load_adapter(const SessionOptions& options) {
  if (options.adapter.empty()) return;
  adapter_ = std::make_unique<LoraAdapter>(LoraAdapter::load_peft(options.adapter, *model_));
  adapter_->to_device(ctx_);
}

std::unique_ptr<Engine> ModelSession::make_engine(const EngineOptions& options) {
  auto engine = std::make_unique<Engine>(ctx_, *model_, adapter_.get(), text_.tokenizer(),
                                         eos_ids(), options);
  if (adapter_) engine->set_adapter_version(adapter_->version());
  return engine;
}

void add_chat_template_kwargs_option(CLI::App& c, SessionOptions& options) {
  c.add_option("--chat-template-kwargs", options.chat_template_kwargs,
               "Extra chat template variables, a JSON mapping (e.g. '{\"enable_thinking\": "
               "false}' for Qwen3)");
}

void add_gpu_memory_option(CLI::App& c, std::optional<double>& gib) {
  c.add_option("--gpu-memory", gib,
               "GiB of device memory the run may hold (weights, adapter, KV cache, activations, "
               "workspace); the KV cache takes what is left unless --kv-memory; default: the "
               "whole GPU");
}

size_t model_weight_bytes(const Model& m) {
  size_t n = m.embed.nbytes() + m.final_norm.nbytes();
  if (m.lm_head.weight.data != m.embed.data) n += m.lm_head.nbytes();
  for (const LayerWeights& l : m.layers) {
    for (int p = 0; p < 7; ++p) n += l.projection(p)->nbytes();
    for (const TensorView* t : {&l.input_norm, &l.post_attention_norm, &l.pre_feedforward_norm,
                                &l.post_feedforward_norm, &l.q_norm, &l.k_norm})
      if (!t->empty()) n += t->nbytes();
  }
  return n;
}

void add_sampling_filter_options(CLI::App& c, SamplingParams& s) {
  c.add_option("--temperature", s.temperature, "0 = greedy")->capture_default_str();
  c.add_option("--top-k", s.top_k, "0 or -1 = off")->capture_default_str();
  c.add_option("--top-p", s.top_p, "1 = off")->capture_default_str();
  c.add_option("--min-p", s.min_p, "0 = off")->capture_default_str();
  c.add_option("--repetition-penalty", s.repetition_penalty, "1 = off")->capture_default_str();
}

}  // namespace fp8rl::cli
