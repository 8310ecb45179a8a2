// The body of an OpenAI request (POST /v1/chat/completions or /v1/completions) read and
// checked before anything is tokenized: the keys fp8rl acts on, the keys it may ignore, and an
// error naming any other key (with the nearest known spelling) or any value out of range, as
// a misspelled "temprature" would otherwise sample at the default. vLLM's extra sampling keys
// (top_k, min_p, repetition_penalty, min_tokens, stop_token_ids, ignore_eos,
// chat_template_kwargs) are read too.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace fp8rl::serve {

enum class Endpoint { chat, completions };

struct ApiRequest {
  Endpoint endpoint = Endpoint::chat;
  std::string model;
  // chat: the conversation, its tools (null: none; tool_choice "none" drops them) and the
  // template variables of the request.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;
  nlohmann::ordered_json chat_template_kwargs;
  // completions: the prompts, as text or as token ids (one choice set each).
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<int32_t>> prompt_ids;
  SamplingParams sampling;        // its max_tokens is set by the caller from max_tokens
  std::optional<int> max_tokens;  // absent: what the context leaves (vLLM)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // sampled tokens' logprobs (chat: logprobs; completions: >= 0)
  int top_logprobs = 0;        // alternatives per token (chat: top_logprobs; completions: logprobs)
};

// Most choices one request may ask for (n times prompts).
inline constexpr int kMaxChoices = 128;

// Raise fp8rl::Error naming the key and what is wrong (a 400 for the client).
ApiRequest parse_chat_request(const nlohmann::ordered_json& body);
ApiRequest parse_completion_request(const nlohmann::ordered_json& body);

}  // namespace fp8rl::serve
