#include "tokenizer/tool_calls.h"

#include <cctype>
#include <string_view>

namespace fp8rl {

namespace {

using Json = nlohmann::json;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The length of the JSON object or array that starts s (brackets matched outside strings), or
// 0 when it does not close.
size_t json_value_length(std::string_view s) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return 0;
}

std::optional<Json> parse_json(std::string_view s) {
  Json j = Json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// {"name": ..., "arguments" | "parameters": {...}} -> a call; nullopt when it is not one.
std::optional<ToolCall> call_of(const Json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  Json args = j.contains(key) ? j[key] : Json::object();
  // Some models write the arguments as a JSON string already.
  if (args.is_string()) {
    std::optional<Json> inner = parse_json(args.get<std::string>());
    if (!inner) return std::nullopt;
    args = *inner;
  }
  if (!args.is_object()) return std::nullopt;
  return ToolCall{j["name"].get<std::string>(), args.dump()};
}

std::optional<ParsedToolCalls> parse_hermes(std::string_view text) {
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  const size_t first = text.find(kOpen);
  if (first == std::string_view::npos) return std::nullopt;
  ParsedToolCalls out;
  out.content = std::string(trim(text.substr(0, first)));
  size_t at = first;
  while (at != std::string_view::npos) {
    const size_t body = at + kOpen.size();
    const size_t close = text.find(kClose, body);
    if (close == std::string_view::npos) return std::nullopt;  // cut off: not a call
    const std::optional<Json> j = parse_json(trim(text.substr(body, close - body)));
    std::optional<ToolCall> call = j ? call_of(*j) : std::nullopt;
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    const size_t next = text.find(kOpen, close + kClose.size());
    // Only whitespace may stand between and after the calls.
    const size_t gap_end = next == std::string_view::npos ? text.size() : next;
    if (!trim(text.substr(close + kClose.size(), gap_end - close - kClose.size())).empty())
      return std::nullopt;
    at = next;
  }
  return out;
}

std::optional<ParsedToolCalls> parse_mistral(std::string_view text) {
  static constexpr std::string_view kCalls = "[TOOL_CALLS]", kArgs = "[ARGS]";
  const size_t first = text.find(kCalls);
  if (first == std::string_view::npos) return std::nullopt;
  ParsedToolCalls out;
  out.content = std::string(trim(text.substr(0, first)));
  std::string_view rest = trim(text.substr(first + kCalls.size()));
  if (!rest.empty() && rest.front() == '[') {  // a JSON list of calls
    const size_t n = json_value_length(rest);
    if (n == 0 || !trim(rest.substr(n)).empty()) return std::nullopt;
    const std::optional<Json> j = parse_json(rest.substr(0, n));
    if (!j || !j->is_array() || j->empty()) return std::nullopt;
    for (const Json& c : *j) {
      std::optional<ToolCall> call = call_of(c);
      if (!call) return std::nullopt;
      out.calls.push_back(std::move(*call));
    }
    return out;
  }
  // name[ARGS]{...}, repeated with [TOOL_CALLS] between calls.
  for (;;) {
    const size_t args = rest.find(kArgs);
    if (args == std::string_view::npos) return std::nullopt;
    const std::string name(trim(rest.substr(0, args)));
    std::string_view tail = trim(rest.substr(args + kArgs.size()));
    const size_t n = json_value_length(tail);
    if (name.empty() || n == 0) return std::nullopt;
    const std::optional<Json> j = parse_json(tail.substr(0, n));
    std::optional<ToolCall> call =
        j ? call_of(Json{{"name", name}, {"arguments", *j}}) : std::nullopt;
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    rest = trim(tail.substr(n));
    if (rest.empty()) return out;
    if (rest.substr(0, kCalls.size()) != kCalls) return std::nullopt;
    rest = trim(rest.substr(kCalls.size()));
  }
}

std::optional<ParsedToolCalls> parse_llama3(std::string_view text) {
  static constexpr std::string_view kTag = "<|python_tag|>";
  std::string_view rest = trim(text);
  if (rest.substr(0, kTag.size()) == kTag) rest = trim(rest.substr(kTag.size()));
  if (rest.empty() || rest.front() != '{') return std::nullopt;
  ParsedToolCalls out;
  // One call, or several separated by ';'.
  while (!rest.empty()) {
    const size_t n = json_value_length(rest);
    if (n == 0) return std::nullopt;
    const std::optional<Json> j = parse_json(rest.substr(0, n));
    std::optional<ToolCall> call = j ? call_of(*j) : std::nullopt;
    if (!call) return std::nullopt;
    out.calls.push_back(std::move(*call));
    rest = trim(rest.substr(n));
    if (rest.empty()) break;
    if (rest.front() != ';') return std::nullopt;
    rest = trim(rest.substr(1));
  }
  return out;
}

}  // namespace

bool has_tool_call_marker(const std::string& text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::hermes:
      return text.find("<tool_call>") != std::string::npos;
    case ToolCallFormat::mistral:
      return text.find("[TOOL_CALLS]") != std::string::npos;
    case ToolCallFormat::llama3: {
      if (text.find("<|python_tag|>") != std::string::npos) return true;
      const std::string_view t = trim(text);
      return !t.empty() && t.front() == '{' && t.find("\"name\"") != std::string_view::npos;
    }
  }
  return false;
}

ToolCallFormat tool_call_format_of_template(const std::string& source) {
  if (source.find("[TOOL_CALLS]") != std::string::npos) return ToolCallFormat::mistral;
  if (source.find("<tool_call>") != std::string::npos) return ToolCallFormat::hermes;
  if (source.find("<|python_tag|>") != std::string::npos ||
      source.find("ipython") != std::string::npos)
    return ToolCallFormat::llama3;
  return ToolCallFormat::hermes;
}

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::hermes:
      return "hermes";
    case ToolCallFormat::mistral:
      return "mistral";
    case ToolCallFormat::llama3:
      return "llama3";
  }
  return "?";
}

std::optional<ParsedToolCalls> parse_tool_calls(const std::string& text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::hermes:
      return parse_hermes(text);
    case ToolCallFormat::mistral:
      return parse_mistral(text);
    case ToolCallFormat::llama3:
      return parse_llama3(text);
  }
  return std::nullopt;
}

}  // namespace fp8rl
