// Chat templates: the public face of the Jinja2 interpreter in this folder.
//
// A chat template renders exactly as HF transformers renders it with Python jinja2
// (apply_chat_template(..., tokenize=False)): ImmutableSandboxedEnvironment with
// trim_blocks/lstrip_blocks and loop controls, HF's tojson (key order kept, no ASCII escaping),
// raise_exception and strftime_now. Every failure (syntax error, runtime error such as an
// undefined variable used in arithmetic, or the template's raise_exception) is an fp8rl::Error
// naming the template line.
//
//   auto cfg = fp8rl::load_chat_template_config("models/qwen3");          // tokenizer_config.json
//   ChatRequest req{.messages = msgs, .add_generation_prompt = true};
//   std::string prompt = fp8rl::ChatTemplate(cfg.source).render(build_chat_context(cfg, req));
#pragma once

#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <optional>
#include <string>

#include "tokenizer/jinja/budget.h"

namespace fp8rl {

namespace jinja {
struct Template;
}

struct ChatTemplateOptions {
  // The local time strftime_now() sees; unset: now. Set it for reproducible renders.
  std::optional<std::tm> fixed_now;
  // The execution budget of one render (steps, recursion, string/list sizes, output); exceeding
  // it is an fp8rl::Error "chat template exceeded its budget of N <limit> ...".
  jinja::RenderLimits limits;
};

// A parsed template; render() may be called many times (and concurrently).
class ChatTemplate {
 public:
  explicit ChatTemplate(const std::string& source);  // throws fp8rl::Error on a syntax error
  // `context` is a JSON object: the template's variables. `use`, when given, receives what the
  // render used of its budget (also when it fails).
  std::string render(const nlohmann::ordered_json& context, const ChatTemplateOptions& options = {},
                     jinja::BudgetUse* use = nullptr) const;

 private:
  std::shared_ptr<const jinja::Template> tpl_;
};

// "YYYY-MM-DDTHH:MM:SS" (or with a space) as a local time for ChatTemplateOptions::fixed_now,
// with the weekday and day of the year filled in.
std::tm parse_local_datetime(const std::string& text);

// Parse and render once.
std::string render_chat_template(const std::string& source, const nlohmann::ordered_json& context,
                                 const ChatTemplateOptions& options = {});

// What a model directory says about its chat template.
struct ChatTemplateConfig {
  std::string source;  // the selected template
  std::string name;    // its name ("default" for a model's only template)
  // HF's special_tokens_map: bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
  // mask_token (strings) and additional_special_tokens (array), those the config sets.
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

// `path` is tokenizer_config.json or a directory holding one. Templates are found as
// transformers finds them: the config's chat_template (a string, named "default", or a list of
// {name, template}), chat_template.jinja beside it (which wins over the config's "default"), and
// additional_chat_templates/NAME.jinja. `template_name` picks one (default: "default").
ChatTemplateConfig load_chat_template_config(const std::string& path,
                                             const std::string& template_name = "");

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = false;
  nlohmann::ordered_json tools = nullptr;      // None when absent, as HF passes it
  nlohmann::ordered_json documents = nullptr;  // None when absent
  // Extra variables (enable_thinking, date_string, ...), set last: they override the rest.
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
};

// apply_chat_template's extra keyword arguments (TRL's chat_template_kwargs, a JSON object;
// null: none) as ChatRequest::variables.
nlohmann::ordered_json chat_template_variables(const nlohmann::json& kwargs);

// HF's template context: special tokens, messages, tools, documents, add_generation_prompt,
// then the extra variables.
nlohmann::ordered_json build_chat_context(const ChatTemplateConfig& config,
                                          const ChatRequest& request);

}  // namespace fp8rl
