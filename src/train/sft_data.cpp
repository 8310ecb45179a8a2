#include "train/sft_data.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <string_view>

#include "core/check.h"
#include "core/input_file.h"
#include "core/parallel.h"
#include "formats/json_read.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace fp8rl {
namespace {

using OrderedJson = nlohmann::ordered_json;

// One row is one JSON value; the JSON reading policy's own size limit.
constexpr uint64_t kMaxLineBytes = uint64_t{64} << 20;
// Rows encoded in parallel at a time: enough to keep the cores busy, little memory.
constexpr size_t kChunkRows = 4096;
constexpr uint64_t kChunkBytes = uint64_t{64} << 20;

struct RowReader {
  const tok::Tokenizer* tokenizer_or_null;  // null: rows of token ids only
  const ChatTemplateConfig* chat;
  const ChatTemplate* chat_template;  // parsed once from chat->source
  const SftDataOptions& options;
  ChatTemplateOptions render_options;  // one fixed time for every render of the file
  int64_t vocab_size;

  // The tokenizer a row of text needs.
  const tok::Tokenizer& tokenizer() const {
    CHECK(tokenizer_or_null != nullptr,
          "a text row needs the model's tokenizer.json, and the model has none (rows of "
          "input_ids need no tokenizer)");
    return *tokenizer_or_null;
  }

  SftExample row(const OrderedJson& row) const;
  SftExample token_row(const OrderedJson& ids, const OrderedJson* completion_mask) const;
  SftExample text_row(const OrderedJson& text) const;
  SftExample prompt_completion_row(const OrderedJson& prompt, const OrderedJson& completion,
                                   const OrderedJson& tools) const;
  SftExample chat_row(const OrderedJson& messages, size_t first_completion,
                      const OrderedJson& tools) const;
  std::vector<int32_t> render_tokens(const OrderedJson& messages, size_t count,
                                     bool generation_prompt, const OrderedJson& tools) const;
  void append_eos(std::vector<int32_t>& ids) const;
  // An example of n tokens is longer than max_length only with truncation (an error naming
  // both otherwise).
  void check_length(int64_t n) const;
};

// A field that is absent or null (a column this row does not use) is nullptr.
const OrderedJson* field(const OrderedJson& row, std::string_view key) {
  const auto it = row.find(key);
  return it == row.end() || it->is_null() ? nullptr : &*it;
}

const std::string& string_field(const OrderedJson& value, std::string_view name) {
  CHECK(value.is_string(), "\"{}\" must be a string, got {}", name, value.type_name());
  CHECK(!value.get_ref<const std::string&>().empty(), "\"{}\" is an empty string", name);
  return value.get_ref<const std::string&>();
}

void check_messages(const OrderedJson& messages, std::string_view name) {
  CHECK(messages.is_array(), "\"{}\" must be a list of {{role, content}} messages, got {}", name,
        messages.type_name());
  CHECK(!messages.empty(), "\"{}\" is an empty list", name);
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& m = messages[i];
    CHECK(m.is_object(), "{}[{}] must be a {{role, content}} object, got {}", name, i,
          m.type_name());
    const OrderedJson* role = field(m, "role");
    CHECK(role != nullptr && role->is_string(), "{}[{}] has no string \"role\"", name, i);
  }
}

bool is_prefix(const std::vector<int32_t>& prefix, const std::vector<int32_t>& ids) {
  return prefix.size() <= ids.size() && std::equal(prefix.begin(), prefix.end(), ids.begin());
}

std::string keys_of(const OrderedJson& row) {
  std::string keys;
  for (const auto& [key, value] : row.items()) {
    if (keys.size() > 80) return keys + ", ...";
    keys += (keys.empty() ? "" : ", ") + key;
  }
  return keys.empty() ? "none" : keys;
}

void RowReader::check_length(int64_t n) const {
  CHECK(n <= options.max_length || options.truncation,
        "{} tokens, longer than max_length {} (ask for truncation to keep the first {})", n,
        options.max_length, options.max_length);
}

void RowReader::append_eos(std::vector<int32_t>& ids) const {
  CHECK(options.eos_token_id >= 0,
        "text and completions get an EOS token appended, and the tokenizer has none");
  if (ids.empty() || ids.back() != options.eos_token_id) ids.push_back(options.eos_token_id);
}

SftExample RowReader::token_row(const OrderedJson& ids, const OrderedJson* completion_mask) const {
  CHECK(ids.is_array(), "\"input_ids\" must be a list of token ids, got {}", ids.type_name());
  CHECK(!ids.empty(), "\"input_ids\" is an empty list");
  SftExample ex;
  for (size_t i = 0; i < ids.size(); ++i) {
    const OrderedJson& id = ids[i];
    CHECK(id.is_number_integer(), "input_ids[{}] must be an integer, got {}", i,
          json_excerpt(id, 24));
    const bool in_vocab = id.is_number_unsigned()
                              ? id.get<uint64_t>() < uint64_t(vocab_size)
                              : id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size;
    CHECK(in_vocab, "input_ids[{}] = {} is outside the vocabulary [0, {})", i, json_excerpt(id),
          vocab_size);
    ex.input_ids.push_back(int32_t(id.get<int64_t>()));
  }
  ex.loss_mask.assign(ex.input_ids.size(), 1);
  if (completion_mask != nullptr && options.completion_only_loss.value_or(true)) {
    const OrderedJson& m = *completion_mask;
    CHECK(m.is_array() && m.size() == ids.size(),
          "\"completion_mask\" must be a list of as many 0/1 as input_ids ({})", ids.size());
    for (size_t i = 0; i < m.size(); ++i) {
      CHECK(m[i].is_number_integer() && (m[i] == 0 || m[i] == 1),
            "completion_mask[{}] must be 0 or 1, got {}", i, json_excerpt(m[i], 24));
      ex.loss_mask[i] = uint8_t(m[i].get<int>());
    }
  }
  return ex;
}

SftExample RowReader::text_row(const OrderedJson& text) const {
  SftExample ex;
  ex.input_ids = tokenizer().encode(string_field(text, options.dataset_text_field), true);
  append_eos(ex.input_ids);
  ex.loss_mask.assign(ex.input_ids.size(), 1);
  return ex;
}

SftExample RowReader::prompt_completion_row(const OrderedJson& prompt,
                                            const OrderedJson& completion,
                                            const OrderedJson& tools) const {
  if (prompt.is_array() || completion.is_array()) {
    check_messages(prompt, "prompt");
    check_messages(completion, "completion");
    OrderedJson messages = prompt;
    for (const OrderedJson& m : completion) messages.push_back(m);
    return chat_row(messages, prompt.size(), tools);
  }
  const std::string& p = string_field(prompt, "prompt");
  const std::string& c = string_field(completion, "completion");
  SftExample ex;
  ex.input_ids = tokenizer().encode(p + c, true);
  append_eos(ex.input_ids);
  ex.loss_mask.assign(ex.input_ids.size(), 1);
  if (options.completion_only_loss.value_or(true)) {
    // The prompt's tokens up to the first that differs (see the header on boundary merges).
    const std::vector<int32_t> prompt_ids = tokenizer().encode(p, true);
    const size_t n = std::min(prompt_ids.size(), ex.input_ids.size());
    const size_t same = size_t(
        std::mismatch(prompt_ids.begin(), prompt_ids.begin() + ptrdiff_t(n), ex.input_ids.begin())
            .first -
        prompt_ids.begin());
    std::fill(ex.loss_mask.begin(), ex.loss_mask.begin() + ptrdiff_t(same), uint8_t{0});
  }
  return ex;
}

std::vector<int32_t> RowReader::render_tokens(const OrderedJson& messages, size_t count,
                                              bool generation_prompt,
                                              const OrderedJson& tools) const {
  ChatRequest request;
  for (size_t i = 0; i < count; ++i) request.messages.push_back(messages[i]);
  request.add_generation_prompt = generation_prompt;
  request.tools = tools;
  request.variables = chat_template_variables(options.chat_template_kwargs);
  // The template writes the special tokens itself (apply_chat_template's tokenize=True).
  return tokenizer().encode(
      chat_template->render(build_chat_context(*chat, request), render_options), false);
}

SftExample RowReader::chat_row(const OrderedJson& messages, size_t first_completion,
                               const OrderedJson& tools) const {
  CHECK(chat_template != nullptr,
        "conversational rows need a chat template, and the tokenizer has none");
  SftExample ex;
  ex.input_ids = render_tokens(messages, messages.size(), false, tools);
  CHECK(!ex.input_ids.empty(), "the chat template rendered the conversation as no tokens");
  const size_t n = ex.input_ids.size();
  // The length first: the turns' renders below cost a render of the conversation so far each,
  // quadratic in its turns, and an example over max_length is refused whatever they find.
  check_length(int64_t(n));
  const bool completion_only = first_completion > 0 && options.completion_only_loss.value_or(true);
  if (!options.assistant_only_loss && !completion_only) {
    ex.loss_mask.assign(n, 1);
    return ex;
  }
  // The number of tokens of the render of messages[0..count), required to be a prefix of the
  // whole conversation's tokens.
  const auto prefix_length = [&](size_t count, bool generation_prompt) {
    const std::vector<int32_t> ids = render_tokens(messages, count, generation_prompt, tools);
    CHECK(is_prefix(ids, ex.input_ids),
          "the chat template's render of messages[0..{}){} is not a token prefix of the whole "
          "conversation's, so the tokens of each turn are not known (the template renders a turn "
          "differently once later turns follow, or a token spans a turn boundary); "
          "set assistant_only_loss to false to train on all tokens",
          count, generation_prompt ? " with the generation prompt" : "");
    return ids.size();
  };
  ex.loss_mask.assign(n, 0);
  const auto train = [&](size_t begin, size_t end) {
    std::fill(ex.loss_mask.begin() + ptrdiff_t(begin), ex.loss_mask.begin() + ptrdiff_t(end),
              uint8_t{1});
  };
  if (!options.assistant_only_loss) {  // everything after the prompt
    train(prefix_length(first_completion, true), n);
    return ex;
  }
  const size_t first = completion_only ? first_completion : 0;
  int64_t turns = 0;
  for (size_t i = first; i < messages.size(); ++i) {
    if (messages[i]["role"].get_ref<const std::string&>() != "assistant") continue;
    const size_t begin = prefix_length(i, true);
    ++turns;
    // Truncation keeps the first max_length tokens: a turn that begins after them trains
    // nothing, nor do the ones after it (each render is a prefix of the whole), so the renders
    // stay within the tokens kept.
    if (options.truncation && int64_t(begin) >= options.max_length) break;
    const size_t end = i + 1 == messages.size() ? n : prefix_length(i + 1, false);
    CHECK(begin <= end, "messages[{}] renders shorter than its generation prompt", i);
    train(begin, end);
  }
  CHECK(turns > 0, "no assistant turn {}to train on (assistant_only_loss)",
        completion_only ? "in the completion " : "");
  return ex;
}

SftExample RowReader::row(const OrderedJson& row) const {
  CHECK(row.is_object(), "a row must be a JSON object, got {}", row.type_name());
  SftExample ex;
  // apply_chat_template's tools (None when absent) for conversational rows.
  const OrderedJson tools = field(row, "tools") ? row["tools"] : OrderedJson(nullptr);
  if (const OrderedJson* ids = field(row, "input_ids")) {
    ex = token_row(*ids, field(row, "completion_mask"));
  } else if (const OrderedJson* messages = field(row, "messages")) {
    check_messages(*messages, "messages");
    ex = chat_row(*messages, 0, tools);
  } else if (field(row, "prompt") || field(row, "completion")) {
    const OrderedJson* prompt = field(row, "prompt");
    const OrderedJson* completion = field(row, "completion");
    CHECK(prompt != nullptr, "a row with \"completion\" needs a \"prompt\"");
    CHECK(completion != nullptr,
          "a row with \"prompt\" needs a \"completion\" (prompt-only rows are for RL, not SFT)");
    ex = prompt_completion_row(*prompt, *completion, tools);
  } else if (const OrderedJson* text = field(row, options.dataset_text_field)) {
    ex = text_row(*text);
  } else {
    RAISE(
        "no usable field: expected input_ids, messages, prompt + completion or {} (the row has: "
        "{})",
        options.dataset_text_field, keys_of(row));
  }
  const auto n = int64_t(ex.input_ids.size());
  if (n > options.max_length) {
    check_length(n);
    ex.input_ids.resize(size_t(options.max_length));
    ex.loss_mask.resize(size_t(options.max_length));
  }
  CHECK(ex.num_targets() > 0, "no token to train on{}",
        n > options.max_length ? fmt::format(" in the first {} tokens", options.max_length)
                               : std::string());
  return ex;
}

// The local time now, one for every render of a dataset.
ChatTemplateOptions render_time_now() {
  ChatTemplateOptions render_options;
  std::tm now{};
  const std::time_t t = std::time(nullptr);
  render_options.fixed_now = *localtime_r(&t, &now);
  return render_options;
}

std::optional<ChatTemplate> parse_template(const ChatTemplateConfig* chat) {
  if (chat == nullptr) return std::nullopt;
  return std::optional<ChatTemplate>(std::in_place, chat->source);
}

}  // namespace

int64_t SftExample::num_targets() const {
  int64_t count = 0;
  for (size_t t = 1; t < loss_mask.size(); ++t) count += loss_mask[t] != 0;
  return count;
}

// The reader points at the template and the options, so they live beside it (members are
// built in this order).
struct SftRowReader::Impl {
  Impl(const tok::Tokenizer* tokenizer, const ChatTemplateConfig* chat, const SftDataOptions& o)
      : options(o),
        chat_template(parse_template(chat)),
        reader{tokenizer,
               chat,
               chat_template ? &*chat_template : nullptr,
               options,
               render_time_now(),
               options.vocab_size > 0 ? options.vocab_size : tokenizer->vocab_size()} {}
  SftDataOptions options;
  std::optional<ChatTemplate> chat_template;
  RowReader reader;
};

SftRowReader::SftRowReader(const tok::Tokenizer* tokenizer, const ChatTemplateConfig* chat,
                           const SftDataOptions& options) {
  CHECK(options.max_length >= 2, "max_length must be at least 2, got {}", options.max_length);
  CHECK(options.vocab_size >= 0, "vocab_size must not be negative, got {}", options.vocab_size);
  CHECK(tokenizer != nullptr || options.vocab_size > 0,
        "SFT data without a tokenizer: the model's vocab_size is needed to check input_ids");
  impl_ = std::make_unique<Impl>(tokenizer, chat, options);
}

SftRowReader::SftRowReader(const tok::Tokenizer& tokenizer, const ChatTemplateConfig* chat,
                           const SftDataOptions& options)
    : SftRowReader(&tokenizer, chat, options) {}

SftRowReader::~SftRowReader() = default;

SftExample SftRowReader::read(const nlohmann::ordered_json& row) const {
  return read_json_row([&] { return impl_->reader.row(row); });
}

std::vector<SftExample> read_sft_dataset(const std::string& path, const tok::Tokenizer& tokenizer,
                                         const ChatTemplateConfig* chat,
                                         const SftDataOptions& options) {
  return read_sft_dataset(path, &tokenizer, chat, options);
}

std::vector<SftExample> read_sft_dataset(const std::string& path, const tok::Tokenizer* tokenizer,
                                         const ChatTemplateConfig* chat,
                                         const SftDataOptions& options) {
  const SftRowReader reader(tokenizer, chat, options);

  // Rows are read in chunks and each chunk encoded in parallel (the tokenizer and the template
  // are safe to share); a chunk's errors are reported in line order, so the error of a file
  // with several bad rows names the first, whatever the thread count.
  std::vector<SftExample> examples;
  InputLines lines(path, "dataset", kMaxLineBytes);
  std::vector<std::string> chunk;
  std::vector<int64_t> numbers;
  uint64_t chunk_bytes = 0;
  bool more = true;
  while (more) {
    chunk.clear();
    numbers.clear();
    chunk_bytes = 0;
    std::string line;
    while (chunk.size() < kChunkRows && chunk_bytes < kChunkBytes && (more = lines.next(line))) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      chunk_bytes += line.size();
      numbers.push_back(int64_t(lines.line_number()));
      chunk.push_back(std::move(line));
    }
    std::vector<SftExample> encoded(chunk.size());
    std::vector<std::string> errors(chunk.size());
    parallel_for(0, int64_t(chunk.size()), [&](int64_t i) {
      try {
        encoded[size_t(i)] = reader.read(parse_ordered_json_text(chunk[size_t(i)], "the row"));
        encoded[size_t(i)].line = numbers[size_t(i)];
      } catch (const Error& e) {
        errors[size_t(i)] = e.what();
      } catch (const nlohmann::json::exception& e) {
        errors[size_t(i)] = e.what();
      }
    });
    for (size_t i = 0; i < chunk.size(); ++i) {
      if (!errors[i].empty()) RAISE("{}:{}: {}", path, numbers[i], errors[i]);
      examples.push_back(std::move(encoded[i]));
    }
  }
  CHECK(!examples.empty(), "{}: no examples (the file has no non-blank line)", path);
  return examples;
}

SftTokenizerSetup load_sft_tokenizer_setup(const std::string& model_dir,
                                           const tok::Tokenizer& tokenizer) {
  SftTokenizerSetup setup;
  const tok::TokenizerConfig config = tok::TokenizerConfig::load(model_dir);
  if (config.eos_token) {
    setup.eos_token_id = tokenizer.token_to_id(*config.eos_token);
    CHECK(setup.eos_token_id >= 0, "{}: eos_token '{}' of tokenizer_config.json is not a token",
          model_dir, *config.eos_token);
  }
  // load_chat_template_config reads the templates through tokenizer_config.json.
  if (!config.chat_templates.empty() &&
      std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer_config.json"))
    setup.chat = load_chat_template_config(model_dir);
  return setup;
}

}  // namespace fp8rl
