// The assistant message of a multi-turn episode's turn when the environment serves tools: the
// model's calls, written in its chat template family's format (tokenizer/tool_calls.h), become
// OpenAI-style `tool_calls` ({"type": "function", "function": {"name", "arguments": <object>}}),
// as TRL's tool loop parses them, so that the environment runs them and the template re-renders
// them. A call marker that does not parse becomes "tool_call_error" (the environment answers it
// as the model's mistake): never a crash, never a silent drop.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "tokenizer/tool_calls.h"

namespace fp8rl {

// `text`: the turn decoded with special tokens skipped (the content without calls); `raw`: the
// turn decoded with special tokens kept, less its end-of-turn id (markers such as [TOOL_CALLS]
// are special tokens).
nlohmann::json assistant_message(const std::string& text, const std::string& raw,
                                 ToolCallFormat format);

}  // namespace fp8rl
