#include "cli/model_session.h"

#include <filesystem>

#include "cli/common.h"
#include "core/check.h"
#include "formats/json_read.h"
#include "formats/quant_config.h"
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
  if (options.plan_only) {
    // The checkpoint's scheme as stored unless --fp8 names one; random buffers of the right
    // shapes, planned on the dry-run context (nothing is allocated or filled).
    const ModelConfig& config = text_.config();
    const Fp8Scheme stored = parse_quantization_config(config.quantization).weight;
    CHECK(!fp8 || stored == Fp8Scheme::off || *fp8 == stored,
          "--fp8 {}: the checkpoint is quantized with {} scaling already", scheme_name(*fp8),
          scheme_name(stored));
    // Model::load keeps a CPU model's unquantized weights in the checkpoint's precision; a
    // CUDA device holds them in bf16.
    const DType unquantized =
        ctx_.device == Device::cpu && config.dtype == DType::f32 ? DType::f32 : DType::bf16;
    model_.emplace(Model::random(config, fp8 ? fp8 : std::optional<Fp8Scheme>(stored), ctx_, 0,
                                 true, unquantized));
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
  if (options.plan_only) {
    plan_arena_ =
        std::make_unique<Arena>(Arena::measuring(device, device == Device::cuda ? 256 : 64));
    ctx_ = Context{device, plan_arena_.get()};
    ctx_.dry_run = true;
    return;
  }
  if (device == Device::cuda) {
    CHECK(CudaDevice::built(), "--device cuda: this fp8rl was built without the CUDA backend");
    CHECK(CudaDevice::count() > 0, "--device cuda: no CUDA device is visible");
    cuda_ = std::make_unique<CudaDevice>(options.cuda);
    ctx_ = cuda_->context();
  }
  ctx_.bf16_activations = options.bf16_activations;
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

void add_sampling_filter_options(CLI::App& c, SamplingParams& s) {
  c.add_option("--temperature", s.temperature, "0 = greedy")->capture_default_str();
  c.add_option("--top-k", s.top_k, "0 or -1 = off")->capture_default_str();
  c.add_option("--top-p", s.top_p, "1 = off")->capture_default_str();
  c.add_option("--min-p", s.min_p, "0 = off")->capture_default_str();
  c.add_option("--repetition-penalty", s.repetition_penalty, "1 = off")->capture_default_str();
}

}  // namespace fp8rl::cli
