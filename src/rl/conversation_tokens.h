// The tokens of a multi-turn episode's conversation. The episode's sequence is built by
// concatenation, as TRL's multi-turn loop builds it: the opening (the chat template's render with
// the generation prompt), then each turn's sampled ids as the engine produced them (never
// re-tokenized), then the tokens of the environment's messages and the next generation prompt.
// Those last are cut from the template's render of the whole conversation after the end-of-turn
// token that closes the model's turn, so a template that re-renders earlier turns differently
// (Qwen3's drops the reasoning of earlier assistant turns) still gives the new messages exactly
// as it writes them; the re-render is compared with the episode's tokens and a difference
// counted (ConversationSuffix::extends_exactly), never trained on.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "tokenizer/tool_calls.h"

namespace fp8rl {

namespace tok {
class Tokenizer;
}
struct ChatTemplateConfig;

struct ConversationSuffix {
  std::vector<int32_t> ids;  // the appended messages and the next generation prompt
  // The render of the conversation up to the model's last end-of-turn token is the episode's
  // tokens so far, exactly: the template is prefix-preserving on this conversation.
  bool extends_exactly = false;
};

class ConversationTokens {
 public:
  // `end_ids`: the ids that end a turn (generation_config's eos ids). The template, the
  // tokenizer and the kwargs (TRL's chat_template_kwargs) must outlive this object.
  ConversationTokens(const ChatTemplateConfig& chat, const tok::Tokenizer& tokenizer,
                     std::vector<int32_t> end_ids, const nlohmann::json& chat_template_kwargs);
  ~ConversationTokens();

  // The render of `messages` with the generation prompt, tokenized without added special tokens
  // (as a chat prompt of the dataset is). `tools` (every render here): the template's `tools`,
  // a list of JSON schemas, or null (none).
  std::vector<int32_t> opening(const nlohmann::json& messages,
                               const nlohmann::json& tools = nullptr) const;
  // The same for an OpenAI request (rl/agent_environment.h): its messages and tools in their
  // key order, and its chat_template_kwargs over the run's (null: none), as fp8rl serve renders.
  std::vector<int32_t> opening(const nlohmann::ordered_json& messages,
                               const nlohmann::ordered_json& tools,
                               const nlohmann::ordered_json& kwargs) const;
  // `context`: the episode's tokens so far (opening and completion), its last turn closed by an
  // end id; `conversation`: its messages, that turn last; `appended`: the environment's.
  // An fp8rl::Error when the render of conversation + appended holds fewer end ids than the
  // context (a template that does not close each turn with one cannot be continued).
  ConversationSuffix suffix(const std::vector<int32_t>& context, const nlohmann::json& conversation,
                            const nlohmann::json& appended,
                            const nlohmann::json& tools = nullptr) const;

  // Whether `id` ends a turn (one of the end ids).
  bool ends_turn(int32_t id) const;
  // The format the template's family writes tool calls in.
  ToolCallFormat tool_call_format() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8rl
