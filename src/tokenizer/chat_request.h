// The conversation file of `fp8rl chat-template --messages-file`: an array of messages, or an
// object with "messages" and optionally "tools" and "documents" (apply_chat_template's
// arguments). Apart from the command so that it can be tested and fuzzed on strings.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "tokenizer/jinja/chat_template.h"

namespace fp8rl {

// `data` is the parsed file; `what` names it in errors. add_generation_prompt and variables are
// left for the caller.
ChatRequest chat_request_from_json(const nlohmann::ordered_json& data, std::string_view what);

}  // namespace fp8rl
