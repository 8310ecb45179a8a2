// Tool calls in a model's output, in the format its chat template family writes them, turned
// into OpenAI's `tool_calls`. The family is read from the template's text:
//   hermes   (Qwen2.5, Qwen3, Hermes)  <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//   mistral                            [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
//                                      or [TOOL_CALLS]name[ARGS]{...} (newer tokenizers)
//   llama3   (Llama 3.1 / 3.2)         <|python_tag|>? {"name": ..., "parameters": {...}}; ...
// A call that does not parse (bad JSON, no name, arguments that are not an object) leaves the
// whole output as text: the client sees what the model wrote, never a half-parsed call. Used by
// fp8rl serve and by multi-turn GRPO's tool turns (rl/episode_rollout.h).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fp8rl {

enum class ToolCallFormat { hermes, mistral, llama3 };

// The family of a chat template's source (hermes when it names none of the markers).
ToolCallFormat tool_call_format_of_template(const std::string& template_source);
const char* tool_call_format_name(ToolCallFormat format);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI sends it
};

struct ParsedToolCalls {
  std::string content;  // the text before the first call (trimmed)
  std::vector<ToolCall> calls;
};

// The calls in `text` (decoded with special tokens kept, so that markers such as
// [TOOL_CALLS] survive); nullopt when the text holds no call or a call that does not parse.
std::optional<ParsedToolCalls> parse_tool_calls(const std::string& text, ToolCallFormat format);

// Whether `text` starts a call in `format` (<tool_call>, [TOOL_CALLS], <|python_tag|>, or for
// llama3 a JSON object with a "name" key as the whole text): with parse_tool_calls giving
// nullopt, a call the model meant and wrote wrongly, not plain text.
bool has_tool_call_marker(const std::string& text, ToolCallFormat format);

}  // namespace fp8rl
