#include "tokenizer/jinja/chat_template.h"

#include "tokenizer/tokenizer_config.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/check.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/parser.h"

namespace fp8rl {
namespace {

[[noreturn]] void raise_template_error(const jinja::TemplateError& e) {
  if (e.kind() == jinja::TemplateError::Kind::budget) {
    if (e.line() > 0)
      RAISE("chat template exceeded its budget of {} (template line {})", e.what(), e.line());
    RAISE("chat template exceeded its budget of {}", e.what());
  }
  const char* what = e.kind() == jinja::TemplateError::Kind::syntax   ? "syntax error"
                     : e.kind() == jinja::TemplateError::Kind::raised ? "raised an exception"
                                                                      : "error";
  if (e.line() > 0) RAISE("chat template {} (template line {}): {}", what, e.line(), e.what());
  RAISE("chat template {}: {}", what, e.what());
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source) {
  try {
    tpl_ = jinja::parse_template(source);
  } catch (const jinja::TemplateError& e) {
    raise_template_error(e);
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const ChatTemplateOptions& options, jinja::BudgetUse* use) const {
  CHECK(context.is_object(), "chat template context must be a JSON object, got {}",
        context.type_name());
  try {
    jinja::Interpreter interp(*tpl_, jinja::from_json(context),
                              jinja::RenderOptions{options.fixed_now, options.limits, use});
    return interp.render();
  } catch (const jinja::TemplateError& e) {
    raise_template_error(e);
  }
}

std::tm parse_local_datetime(const std::string& text) {
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  char sep = 0;
  const int n = std::sscanf(text.c_str(), "%4d-%2d-%2d%c%2d:%2d:%2d", &year, &month, &day, &sep,
                            &hour, &minute, &second);
  CHECK(n == 7 && (sep == 'T' || sep == ' ') && month >= 1 && month <= 12 && day >= 1 &&
            day <= 31 && hour >= 0 && hour < 24 && minute >= 0 && minute < 60 && second >= 0 &&
            second <= 60,
        "'{}' is not a date-time of the form YYYY-MM-DDTHH:MM:SS", text);
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  // timegm normalises and fills tm_wday/tm_yday without consulting the local time zone.
  std::tm normalized = tm;
  const std::time_t t = timegm(&normalized);
  CHECK(t != static_cast<std::time_t>(-1) && normalized.tm_mday == day, "'{}' is not a valid date",
        text);
  normalized.tm_isdst = -1;
  return normalized;
}

std::string render_chat_template(const std::string& source, const nlohmann::ordered_json& context,
                                 const ChatTemplateOptions& options) {
  return ChatTemplate(source).render(context, options);
}

ChatTemplateConfig load_chat_template_config(const std::string& path,
                                             const std::string& template_name) {
  namespace fs = std::filesystem;
  fs::path file(path);
  if (fs::is_directory(file)) file /= "tokenizer_config.json";
  CHECK(fs::is_regular_file(file), "no tokenizer_config.json at {}", path);
  // One reader of the config files (tokenizer/tokenizer_config.h): it assembles the templates
  // as transformers does (chat_template, then chat_template.jinja, then
  // additional_chat_templates/NAME.jinja) and the special tokens the template sees.
  const tok::TokenizerConfig tc = tok::TokenizerConfig::load(file);
  CHECK(!tc.chat_templates.empty(), "{} has no chat template (no chat_template field, no {})",
        file.string(), (file.parent_path() / "chat_template.jinja").string());

  ChatTemplateConfig out;
  const std::string wanted = template_name.empty() ? "default" : template_name;
  std::string names;
  for (const tok::NamedChatTemplate& t : tc.chat_templates) {
    names += (names.empty() ? "" : ", ") + t.name;
    if (t.name == wanted) {
      out.name = t.name;
      out.source = t.source;
    }
  }
  CHECK(!out.name.empty(), "{} has no chat template named '{}' (available: {})", file.string(),
        wanted, names);
  for (const auto& [key, value] : tc.special_tokens_map()) out.special_tokens[key] = value;
  if (!tc.additional_special_tokens.empty())
    out.special_tokens["additional_special_tokens"] = tc.additional_special_tokens;
  return out;
}

nlohmann::ordered_json chat_template_variables(const nlohmann::json& kwargs) {
  CHECK(kwargs.is_object() || kwargs.is_null(),
        "chat_template_kwargs must be a mapping of template variables, got {}", kwargs.type_name());
  return kwargs.is_null() ? nlohmann::ordered_json::object() : nlohmann::ordered_json(kwargs);
}

nlohmann::ordered_json build_chat_context(const ChatTemplateConfig& config,
                                          const ChatRequest& request) {
  CHECK(request.messages.is_array(), "messages must be a JSON array, got {}",
        request.messages.type_name());
  CHECK(request.variables.is_object(), "template variables must be a JSON object");
  nlohmann::ordered_json context = config.special_tokens;
  context["messages"] = request.messages;
  context["tools"] = request.tools;
  context["documents"] = request.documents;
  context["add_generation_prompt"] = request.add_generation_prompt;
  for (const auto& [key, value] : request.variables.items()) context[key] = value;
  return context;
}

}  // namespace fp8rl
