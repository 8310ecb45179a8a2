#include "rl/prompt_data.h"

#include <ctime>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"
#include "formats/json_read.h"
#include "formats/model_config.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

namespace {

using OrderedJson = nlohmann::ordered_json;

bool is_messages(const OrderedJson& v) {
  return v.is_array() && !v.empty() && v[0].is_object() && v[0].contains("role");
}

void check_messages(const OrderedJson& messages, const char* name) {
  CHECK(messages.is_array() && !messages.empty(),
        "\"{}\" must be a non-empty list of {{role, content}} messages", name);
  for (size_t i = 0; i < messages.size(); ++i)
    CHECK(
        messages[i].is_object() && messages[i].contains("role") && messages[i]["role"].is_string(),
        "{}[{}] must be a {{role, content}} object with a string role", name, i);
}

}  // namespace

struct PromptRowReader::Impl {
  const tok::Tokenizer& tokenizer;
  const ChatTemplateConfig* chat;
  PromptDataOptions options;
  std::optional<ChatTemplate> chat_template;
  ChatTemplateOptions render_options;  // one fixed time for every render of the file

  PromptExample row(const OrderedJson& row) const;
};

PromptExample PromptRowReader::Impl::row(const OrderedJson& row) const {
  CHECK(row.is_object(), "a row must be a JSON object, got {}", row.type_name());
  PromptExample ex;
  const char* used = nullptr;
  const OrderedJson* messages = nullptr;
  if (row.contains("messages") && !row["messages"].is_null()) {
    used = "messages";
    messages = &row["messages"];
  } else if (row.contains("prompt") && is_messages(row["prompt"])) {
    used = "prompt";
    messages = &row["prompt"];
  } else if (row.contains("prompt") && !row["prompt"].is_null()) {
    used = "prompt";
    CHECK(row["prompt"].is_string() && !row["prompt"].get_ref<const std::string&>().empty(),
          "\"prompt\" must be a non-empty string or a list of messages, got {}",
          json_excerpt(row["prompt"], 40));
    ex.text = row["prompt"].get<std::string>();
    ex.ids = tokenizer.encode(ex.text, true);
  }
  CHECK(used != nullptr, "the row has neither \"prompt\" nor \"messages\"");
  if (messages != nullptr) {
    check_messages(*messages, used);
    CHECK(chat_template.has_value(),
          "\"{}\" holds chat messages and the model has no chat template", used);
    ChatRequest request;
    for (const OrderedJson& m : *messages) request.messages.push_back(m);
    request.add_generation_prompt = true;
    request.variables = chat_template_variables(options.chat_template_kwargs);
    ex.text = chat_template->render(build_chat_context(*chat, request), render_options);
    ex.ids = tokenizer.encode(ex.text, false);
    ex.messages = nlohmann::json(*messages);
  }
  CHECK(!ex.ids.empty(), "the prompt has no tokens");
  const int64_t n = int64_t(ex.ids.size());
  if (options.max_prompt_length && n > *options.max_prompt_length) {
    CHECK(options.truncation,
          "the prompt has {} tokens, more than max_prompt_length {} (set truncation to "
          "keep its last {} tokens)",
          n, *options.max_prompt_length, *options.max_prompt_length);
    ex.ids.erase(ex.ids.begin(), ex.ids.end() - *options.max_prompt_length);
  }
  ex.columns = nlohmann::json::object();
  for (const auto& [key, value] : row.items())
    if (key != used) ex.columns[key] = nlohmann::json(value);
  return ex;
}

PromptRowReader::PromptRowReader(const tok::Tokenizer& tokenizer, const ChatTemplateConfig* chat,
                                 const PromptDataOptions& options) {
  CHECK(!options.max_prompt_length || *options.max_prompt_length >= 1,
        "max_prompt_length must be at least 1, got {}", options.max_prompt_length.value_or(0));
  impl_.reset(new Impl{tokenizer, chat, options, std::nullopt, {}});
  if (chat != nullptr) impl_->chat_template.emplace(chat->source);
  std::tm now{};
  const std::time_t t = std::time(nullptr);
  impl_->render_options.fixed_now = *localtime_r(&t, &now);
}

PromptRowReader::~PromptRowReader() = default;

PromptExample PromptRowReader::read(const nlohmann::ordered_json& row) const {
  return read_json_row([&] { return impl_->row(row); });
}

std::vector<PromptExample> read_prompt_dataset(const std::string& path,
                                               const tok::Tokenizer& tokenizer,
                                               const ChatTemplateConfig* chat,
                                               const PromptDataOptions& options) {
  const PromptRowReader reader(tokenizer, chat, options);
  std::vector<PromptExample> out;
  for_each_jsonl_row(path, [&](const OrderedJson& row, int64_t number) {
    PromptExample ex = reader.read(row);
    ex.line = number;
    if (!out.empty()) {
      const PromptExample& first = out.front();
      CHECK(first.messages.is_null() == ex.messages.is_null(),
            "a {} prompt, but line {} holds a {} prompt; a dataset is all chat messages or all "
            "text (reward functions get one format, as in TRL)",
            ex.messages.is_null() ? "text" : "chat", first.line,
            first.messages.is_null() ? "text" : "chat");
    }
    out.push_back(std::move(ex));
  });
  CHECK(!out.empty(), "{}: no prompts (the file has no non-blank line)", path);
  return out;
}

void check_prompt_room(const std::vector<PromptExample>& prompts, const std::string& path,
                       int64_t max_completion_length, const ModelConfig& config) {
  const int64_t room = config.max_context - max_completion_length;
  const std::string advice =
      room >= 1 ? fmt::format(
                      "lower max_completion_length, or cut the prompts with "
                      "max_prompt_length: {} and truncation: true",
                      room)
                : fmt::format("max_completion_length must be below {}", config.max_context);
  for (const PromptExample& ex : prompts)
    check_context(config, int64_t(ex.ids.size()) + max_completion_length,
                  fmt::format("{}:{}: a prompt of {} tokens plus max_completion_length {}", path,
                              ex.line, ex.ids.size(), max_completion_length),
                  advice);
}

std::vector<size_t> prompt_epoch_order(uint64_t seed, int64_t epoch, size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  const uint64_t stream = rng_key(seed, uint64_t(epoch) + 0x9000);
  for (size_t i = order.size(); i > 1; --i) {
    const size_t j = size_t(uniform01(stream, i) * float(i)) % i;
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace fp8rl
