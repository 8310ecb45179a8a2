// OpenAI's response bodies from a request's token events: a chat.completion / text_completion
// object, or the server-sent events of a stream (chat.completion.chunk / text_completion
// chunks, `data: [DONE]` last), with usage counts and logprobs in OpenAI's shapes. Tool calls
// are parsed from a finished choice's text (tokenizer/tool_calls.h); a stream of a request with
// tools gets each choice's text or calls in one delta when the choice ends.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/openai_request.h"
#include "serve/request_queue.h"
#include "tokenizer/tool_calls.h"

namespace fp8rl {
namespace tok {
class Tokenizer;
}
}  // namespace fp8rl

namespace fp8rl::serve {

// OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
nlohmann::json error_body(const std::string& message, const std::string& type,
                          const std::string& code = "");

// One server-sent event holding `j`.
std::string sse_event(const nlohmann::json& j);

struct ShaperOptions {
  const ApiRequest* request = nullptr;
  std::string id;                      // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;                 // unix seconds
  int parts = 1;                       // submitted requests (prompts)
  std::vector<int64_t> prompt_tokens;  // per part
  const tok::Tokenizer* tokenizer = nullptr;
  std::vector<int32_t> stop_ids;  // ids that end a choice (dropped before parsing tool calls)
  std::optional<ToolCallFormat> tool_format;  // set: the request has tools
};

class ResponseShaper {
 public:
  explicit ResponseShaper(ShaperOptions options);

  int choices() const { return int(choices_.size()); }
  bool finished() const { return finished_ == int(choices_.size()); }
  // Streams: the first events (chat: each choice's role), one token event's, the last ones.
  std::string stream_start() const;
  std::string stream_event(const TokenEvent& e);
  std::string stream_end() const;
  // Not streamed: the events kept, then the whole response.
  void add(const TokenEvent& e);
  nlohmann::json response() const;

 private:
  struct Choice {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    std::vector<std::vector<std::pair<int32_t, float>>> top;
    std::string text;
    std::optional<FinishReason> finish;
  };
  Choice& record(const TokenEvent& e);
  nlohmann::json chunk(nlohmann::json choice) const;
  nlohmann::json usage() const;
  // The chat message of a finished choice: its text, or its tool calls when it has tools and
  // they parse.
  nlohmann::json message(const Choice& c, std::string& finish_reason) const;
  nlohmann::json chat_logprobs(const Choice& c, size_t from, size_t to) const;
  nlohmann::json completion_logprobs(const Choice& c, size_t from, size_t to,
                                     size_t text_offset) const;
  std::string piece(int32_t id) const;

  ShaperOptions o_;
  std::vector<Choice> choices_;  // part * n + sample
  int finished_ = 0;
  int64_t completion_tokens_ = 0;
};

}  // namespace fp8rl::serve
