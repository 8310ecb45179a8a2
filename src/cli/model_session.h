// What every command that runs a model sets up, in one place: the device and its context, the
// model on that device, an optional PEFT adapter for it (which its forwards take), and the model
// directory's tokenizer, stop ids and chat template for commands that take text.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "engine/engine.h"
#include "model/adapter.h"
#include "model/model.h"
#include "ops/context.h"
#include "ops/device.h"
#include "ops/memory.h"

namespace fp8rl {
struct ChatTemplateConfig;
namespace tok {
class Tokenizer;
}
}  // namespace fp8rl

namespace fp8rl::cli {

struct SessionOptions {
  std::string model;         // Hugging Face model directory
  std::string adapter;       // PEFT adapter directory; empty: none
  std::string fp8 = "auto";  // --fp8 (parse_fp8_option)
  std::string device = "cpu";
  bool bf16_activations = false;  // CPU only (parse_activations)
  CudaDeviceOptions cuda;         // --device cuda: the device's options (bench --device-option)
  // --chat-template-kwargs: extra chat template variables for every chat render (JSON text of
  // a mapping, TRL's / vLLM's chat_template_kwargs); empty: none.
  std::string chat_template_kwargs;
  // An estimate (a training command's --dry-run without weights or without the device): the
  // model is its shapes only, planned buffers on a dry-run context of `device` (ops/memory.h:
  // DeviceBuffer), no weight read and no device opened; a run's objects built on that context
  // measure their memory and hold none.
  bool plan_only = false;
  // --gpu-memory GIB (YAML gpu_memory): the device memory budget (ops/memory_budget.h), CUDA
  // only; unset: the device's memory.
  std::optional<double> gpu_memory;
};

// --chat-template-kwargs into options.chat_template_kwargs.
void add_chat_template_kwargs_option(CLI::App& c, SessionOptions& options);
// --gpu-memory into `gib` (the training commands have it as their gpu_memory key).
void add_gpu_memory_option(CLI::App& c, std::optional<double>& gib);

// Bytes of the model's weights as the forward reads them (FP8 codes and scales, embeddings,
// norms; the lm_head once when tied).
size_t model_weight_bytes(const Model& model);

// Also the spelling of --adapter's help on every command.
inline const char* kAdapterHelp =
    "PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors)";

// --temperature, --top-k, --top-p, --min-p, --repetition-penalty into `s` (vLLM's meanings).
void add_sampling_filter_options(CLI::App& c, SamplingParams& s);

// What a model directory says without its weights: config.json (the shapes and the context)
// and the text side, tokenizer.json (when the directory has one), the chat template (on first
// use) and the stop ids. A command loads it first to tokenize its prompts and check their
// lengths against the context before the (slow) weight load, then hands it to its
// ModelSession: the one way to read the text first and the weights after.
class ModelText {
 public:
  // Reads the model directory's config.json, then its tokenizer.json (when it has one); `dir`
  // may be empty (no config, no tokenizer). `chat_template_kwargs` is --chat-template-kwargs'
  // JSON text (empty: none), checked here.
  ModelText(std::string dir, const std::string& chat_template_kwargs);
  ~ModelText();
  ModelText(ModelText&&) noexcept;
  ModelText& operator=(ModelText&&) noexcept;

  const std::string& dir() const { return dir_; }
  // config.json, parsed: what a command checks its lengths against before the weights load
  // (check_context: max_context, which YaRN extends past max_position_embeddings), and the
  // shapes of a plan_only session's model. An error when `dir` was empty.
  const ModelConfig& config() const;

  // The model's tokenizer, or null when its directory has no tokenizer.json.
  const tok::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The tokenizer, or an error saying that `what` needs it.
  const tok::Tokenizer& require_tokenizer(const std::string& what) const;
  // The ids that end generation: generation_config.json's eos ids, plus tokenizer_config's
  // eos_token when there is a tokenizer.
  std::vector<int32_t> eos_ids() const;

  // Text prompt -> ids, special tokens added as vLLM does (e.g. a bos).
  std::vector<int32_t> encode_text(const std::string& text) const;
  // The model's chat template applied to `messages` (a JSON list of {role, content}) with
  // the generation prompt -> the rendered text, then its ids (the template wrote the special
  // tokens itself, so none are added). The template's extra variables: the session's
  // --chat-template-kwargs, then `kwargs` (a request's own; null: none) over them.
  // `tools`: the template's tools variable (OpenAI's function list; null: none).
  std::string render_chat(const nlohmann::ordered_json& messages,
                          const nlohmann::ordered_json& kwargs = nullptr,
                          const nlohmann::ordered_json& tools = nullptr) const;
  std::vector<int32_t> encode_chat(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& kwargs = nullptr,
                                   const nlohmann::ordered_json& tools = nullptr) const;
  // The chat template's text (loaded here on first use: a server calls it before its
  // handler threads render concurrently).
  const std::string& chat_template_source() const;

 private:
  std::string dir_;
  std::optional<ModelConfig> config_;            // none when dir_ is empty
  nlohmann::ordered_json chat_template_kwargs_;  // --chat-template-kwargs, parsed
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  mutable std::unique_ptr<ChatTemplateConfig> chat_;  // loaded on first use
};

class ModelSession {
 public:
  // Loads the model directory's config and text side (ModelText), the checkpoint of
  // options.model onto the device, then the adapter (checked against the model, every mismatch
  // named). options.plan_only: no weights and no device, the model is text.config()'s shapes
  // on a dry-run context.
  explicit ModelSession(const SessionOptions& options);
  // The same with the ModelText of options.model loaded already.
  ModelSession(const SessionOptions& options, ModelText text);
  // The model made by `make` on the session's context (bench: random weights of a preset);
  // options.model may be empty (no tokenizer then).
  ModelSession(const SessionOptions& options, const std::function<Model(Context&)>& make);
  ~ModelSession();
  ModelSession(const ModelSession&) = delete;
  ModelSession& operator=(const ModelSession&) = delete;

  Context& ctx() { return ctx_; }
  Device device() const { return ctx_.device; }
  CudaDevice* cuda() { return cuda_.get(); }  // null on the CPU
  Model& model() { return *model_; }
  const LoraAdapter* adapter() const { return adapter_.get(); }

  // The text side's (ModelText).
  const ModelText& text() const { return text_; }
  const tok::Tokenizer* tokenizer() const { return text_.tokenizer(); }
  const tok::Tokenizer& require_tokenizer(const std::string& what) const {
    return text_.require_tokenizer(what);
  }
  std::vector<int32_t> eos_ids() const { return text_.eos_ids(); }
  std::vector<int32_t> encode_text(const std::string& text) const {
    return text_.encode_text(text);
  }
  std::string render_chat(const nlohmann::ordered_json& messages,
                          const nlohmann::ordered_json& kwargs = nullptr) const {
    return text_.render_chat(messages, kwargs);
  }
  std::vector<int32_t> encode_chat(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& kwargs = nullptr) const {
    return text_.encode_chat(messages, kwargs);
  }

  // An engine over the session's model, keyed by the adapter's version.
  std::unique_ptr<Engine> make_engine(const EngineOptions& options);

 private:
  void open_device(const SessionOptions& options);
  // Before the weights load, with a memory budget: that a model made by `make` on a dry-run
  // context (its shapes, nothing allocated) fits beside what the device holds already; an
  // error naming the weights, the budget and the excess otherwise. Nothing without a budget.
  void check_weights_fit(const std::function<Model(Context&)>& make);
  // The GPU can run the model's FP8 scheme (ops/gpu_support.h): an error at start if not, a
  // note when it runs on the dequantize fallback. Nothing without a device.
  void check_scheme(Fp8Scheme scheme) const;
  void load_adapter(const SessionOptions& options);

  ModelText text_;
  // The device outlives everything that holds its memory (declared first, destroyed last).
  std::unique_ptr<CudaDevice> cuda_;
  Arena arena_;
  std::unique_ptr<Arena> plan_arena_;       // plan_only: the measuring scratch arena
  std::unique_ptr<PlannedDevice> planned_;  // plan_only: the device planned for
  Context ctx_{Device::cpu, &arena_};
  std::optional<Model> model_;
  std::unique_ptr<LoraAdapter> adapter_;
};

}  // namespace fp8rl::cli
