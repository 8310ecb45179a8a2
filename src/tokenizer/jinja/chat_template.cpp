#include "tokenizer/jinja/chat_template.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/parser.h"

namespace fp8rl {
namespace {

[[noreturn]] void raise_template_error(const jinja::TemplateError& e) {
  const char* what = e.kind() == jinja::TemplateError::Kind::syntax   ? "syntax error"
                     : e.kind() == jinja::TemplateError::Kind::raised ? "raised an exception"
                                                                      : "error";
  if (e.line() > 0) RAISE("chat template {} (template line {}): {}", what, e.line(), e.what());
  RAISE("chat template {}: {}", what, e.what());
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  CHECK(in.good(), "cannot open {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object.
std::optional<std::string> token_content(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return std::nullopt;
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
                                 const ChatTemplateOptions& options) const {
  CHECK(context.is_object(), "chat template context must be a JSON object, got {}",
        context.type_name());
  try {
    jinja::Interpreter interp(*tpl_, jinja::from_json(context),
                              jinja::RenderOptions{options.fixed_now});
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
  // Plain (unordered) JSON: configs can hold thousands of added tokens, which an ordered_json
  // would insert in quadratic time, and no field read here depends on key order.
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(read_file(file));
  } catch (const nlohmann::json::exception& e) {
    RAISE("{} is not valid JSON: {}", file.string(), e.what());
  }
  CHECK(cfg.is_object(), "{} must hold a JSON object", file.string());

  // Templates by name, as transformers assembles them: tokenizer_config.json's chat_template (a
  // string is "default"), then chat_template.jinja beside it (which replaces "default"), then
  // additional_chat_templates/NAME.jinja.
  std::vector<std::pair<std::string, std::string>> templates;
  const auto set_template = [&](const std::string& name, std::string source) {
    for (auto& [n, s] : templates) {
      if (n == name) {
        s = std::move(source);
        return;
      }
    }
    templates.emplace_back(name, std::move(source));
  };
  const auto ct = cfg.find("chat_template");
  if (ct != cfg.end() && ct->is_string()) {
    set_template("default", ct->get<std::string>());
  } else if (ct != cfg.end() && ct->is_array()) {
    for (const auto& entry : *ct) {
      CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                entry.contains("template") && entry["template"].is_string(),
            "{}: chat_template list entries must be {{\"name\": ..., \"template\": ...}}",
            file.string());
      set_template(entry["name"].get<std::string>(), entry["template"].get<std::string>());
    }
  } else if (ct != cfg.end() && !ct->is_null()) {
    RAISE("{}: chat_template must be a string or a list of named templates, got {}", file.string(),
          ct->type_name());
  }
  const fs::path dir = file.parent_path();
  if (fs::is_regular_file(dir / "chat_template.jinja")) {
    set_template("default", read_file(dir / "chat_template.jinja"));
  }
  if (fs::is_directory(dir / "additional_chat_templates")) {
    std::vector<fs::path> extra;
    for (const auto& entry : fs::directory_iterator(dir / "additional_chat_templates")) {
      if (entry.is_regular_file() && entry.path().extension() == ".jinja") {
        extra.push_back(entry.path());
      }
    }
    std::sort(extra.begin(), extra.end());
    for (const auto& path : extra) set_template(path.stem().string(), read_file(path));
  }
  CHECK(!templates.empty(), "{} has no chat template (no chat_template field, no {})",
        file.string(), (dir / "chat_template.jinja").string());

  ChatTemplateConfig out;
  const std::string wanted = template_name.empty() ? "default" : template_name;
  std::string names;
  for (const auto& [name, source] : templates) {
    names += (names.empty() ? "" : ", ") + name;
    if (name == wanted) {
      out.name = name;
      out.source = source;
    }
  }
  CHECK(!out.name.empty(), "{} has no chat template named '{}' (available: {})", file.string(),
        wanted, names);

  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    const auto it = cfg.find(key);
    if (it == cfg.end()) continue;
    if (auto content = token_content(*it)) out.special_tokens[key] = *content;
  }
  const auto extra = cfg.find("additional_special_tokens");
  if (extra != cfg.end() && extra->is_array() && !extra->empty()) {
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
    for (const auto& t : *extra) {
      if (auto content = token_content(t)) tokens.push_back(*content);
    }
    out.special_tokens["additional_special_tokens"] = tokens;
  }
  return out;
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
