#include "rl/conversation_tokens.h"

#include <algorithm>
#include <ctime>
#include <optional>

#include "core/check.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

struct ConversationTokens::Impl {
  const ChatTemplateConfig& chat;
  const tok::Tokenizer& tokenizer;
  std::vector<int32_t> end_ids;
  nlohmann::ordered_json variables;
  ChatTemplate chat_template;
  ChatTemplateOptions render_options;  // one fixed time for every render of the run

  bool is_end(int32_t id) const {
    return std::find(end_ids.begin(), end_ids.end(), id) != end_ids.end();
  }

  std::vector<int32_t> render(const nlohmann::json& messages, bool generation_prompt,
                              const nlohmann::json& tools) const {
    ChatRequest request;
    request.tools = nlohmann::ordered_json(tools);
    for (const nlohmann::json& m : messages) request.messages.push_back(nlohmann::ordered_json(m));
    request.add_generation_prompt = generation_prompt;
    request.variables = variables;
    return render(request);
  }

  std::vector<int32_t> render(const ChatRequest& request) const {
    return tokenizer.encode(chat_template.render(build_chat_context(chat, request), render_options),
                            false);
  }
};

ConversationTokens::ConversationTokens(const ChatTemplateConfig& chat,
                                       const tok::Tokenizer& tokenizer,
                                       std::vector<int32_t> end_ids,
                                       const nlohmann::json& chat_template_kwargs)
    : impl_(new Impl{chat,
                     tokenizer,
                     std::move(end_ids),
                     chat_template_variables(chat_template_kwargs),
                     ChatTemplate(chat.source),
                     {}}) {
  CHECK(!impl_->end_ids.empty(), "environment: the model has no eos ids to end a turn with");
  std::tm now{};
  const std::time_t t = std::time(nullptr);
  impl_->render_options.fixed_now = *localtime_r(&t, &now);
}

ConversationTokens::~ConversationTokens() = default;

std::vector<int32_t> ConversationTokens::opening(const nlohmann::json& messages,
                                                 const nlohmann::json& tools) const {
  return impl_->render(messages, true, tools);
}

std::vector<int32_t> ConversationTokens::opening(const nlohmann::ordered_json& messages,
                                                 const nlohmann::ordered_json& tools,
                                                 const nlohmann::ordered_json& kwargs) const {
  CHECK(messages.is_array(), "messages must be a list of {{role, content}} objects");
  CHECK(kwargs.is_null() || kwargs.is_object(),
        "chat_template_kwargs must be a mapping of template variables, got {}", kwargs.dump());
  ChatRequest request;
  request.messages = messages;
  request.tools = tools;
  request.add_generation_prompt = true;
  request.variables = impl_->variables;
  if (kwargs.is_object())
    for (const auto& [key, value] : kwargs.items()) request.variables[key] = value;
  return impl_->render(request);
}

bool ConversationTokens::ends_turn(int32_t id) const {
  return impl_->is_end(id);
}

ToolCallFormat ConversationTokens::tool_call_format() const {
  return tool_call_format_of_template(impl_->chat.source);
}

ConversationSuffix ConversationTokens::suffix(const std::vector<int32_t>& context,
                                              const nlohmann::json& conversation,
                                              const nlohmann::json& appended,
                                              const nlohmann::json& tools) const {
  const int64_t ends =
      std::count_if(context.begin(), context.end(), [&](int32_t id) { return impl_->is_end(id); });
  CHECK(!context.empty() && impl_->is_end(context.back()),
        "environment: the episode's last turn does not end with an end-of-turn id (a bug)");
  nlohmann::json all = conversation;
  for (const nlohmann::json& m : appended) all.push_back(m);
  const std::vector<int32_t> full = impl_->render(all, true, tools);
  // The end id that closes the model's turn in the re-render: the ends-th one.
  int64_t seen = 0;
  size_t cut = full.size();
  for (size_t k = 0; k < full.size(); ++k)
    if (impl_->is_end(full[k]) && ++seen == ends) {
      cut = k + 1;
      break;
    }
  CHECK(cut < full.size() || seen == ends,
        "environment: the chat template's render of the conversation with the environment's "
        "messages holds {} end-of-turn tokens, fewer than the {} of the episode so far: the "
        "template must close every turn with one for an episode to continue",
        seen, ends);
  ConversationSuffix s;
  s.extends_exactly =
      cut == context.size() && std::equal(context.begin(), context.end(), full.begin());
  s.ids.assign(full.begin() + ptrdiff_t(cut), full.end());
  return s;
}

}  // namespace fp8rl
