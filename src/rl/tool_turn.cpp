#include "rl/tool_turn.h"

#include <fmt/format.h>

#include <optional>

namespace fp8rl {

nlohmann::json assistant_message(const std::string& text, const std::string& raw,
                                 ToolCallFormat format) {
  nlohmann::json m = {{"role", "assistant"}, {"content", text}};
  const std::optional<ParsedToolCalls> parsed = parse_tool_calls(raw, format);
  if (!parsed) {
    if (has_tool_call_marker(raw, format))
      m["tool_call_error"] = fmt::format(
          "the tool call does not parse: a {} call is {}", tool_call_format_name(format),
          format == ToolCallFormat::hermes
              ? "<tool_call>{\"name\": NAME, \"arguments\": {...}}</tool_call>"
          : format == ToolCallFormat::mistral
              ? "[TOOL_CALLS][{\"name\": NAME, \"arguments\": {...}}]"
              : "{\"name\": NAME, \"parameters\": {...}}");
    return m;
  }
  m["content"] = parsed->content;
  nlohmann::json calls = nlohmann::json::array();
  for (const ToolCall& c : parsed->calls)
    calls.push_back(
        {{"type", "function"},
         {"function", {{"name", c.name}, {"arguments", nlohmann::json::parse(c.arguments)}}}});
  m["tool_calls"] = std::move(calls);
  return m;
}

}  // namespace fp8rl
