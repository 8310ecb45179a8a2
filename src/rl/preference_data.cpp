#include "rl/preference_data.h"

#include <algorithm>
#include <ctime>

#include "core/check.h"
#include "formats/json_read.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

namespace {

using OrderedJson = nlohmann::ordered_json;

bool is_preference_messages(const OrderedJson& v) {
  return v.is_array() && !v.empty() && v[0].is_object() && v[0].contains("role");
}

// A message list of the row ("prompt", "chosen" or "rejected"), checked before anything is
// rendered: objects with a string role, and content that is a string (or absent, null, or a
// list of content parts, which templates take). A number there rendered, if at all, unlike the
// prompt's render and was reported as a token-prefix mismatch.
void check_preference_messages(const OrderedJson& v, const char* name) {
  if (!v.is_array()) return;  // a string, or an error of its own later
  for (size_t i = 0; i < v.size(); ++i) {
    const OrderedJson& m = v[i];
    CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
          "\"{}\"[{}] must be a {{role, content}} object with a string role, got {}", name, i,
          json_excerpt(m));
    const auto content = m.find("content");
    CHECK(content == m.end() || content->is_string() || content->is_null() || content->is_array(),
          "\"{}\"[{}].content must be a string, got {}", name, i, json_excerpt(*content));
  }
}

// The local time now, one for every render of a dataset.
ChatTemplateOptions render_time_now() {
  ChatTemplateOptions render_options;
  std::tm now{};
  const std::time_t t = std::time(nullptr);
  render_options.fixed_now = *localtime_r(&t, &now);
  return render_options;
}

struct Reader {
  const tok::Tokenizer& tokenizer;
  const ChatTemplateConfig* chat;
  const ChatTemplate* tmpl;
  ChatTemplateOptions render_options;
  const PreferenceDataOptions& opt;

  std::vector<int32_t> render(const OrderedJson& messages, bool generation_prompt) const {
    CHECK(tmpl != nullptr, "the row holds chat messages and the model has no chat template");
    ChatRequest request;
    for (const OrderedJson& m : messages) {
      CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
            "a message must be a {{role, content}} object with a string role");
      request.messages.push_back(m);
    }
    request.add_generation_prompt = generation_prompt;
    request.variables = chat_template_variables(opt.chat_template_kwargs);
    return tokenizer.encode(tmpl->render(build_chat_context(*chat, request), render_options),
                            false);
  }

  // The tokens a completion adds after the prompt; `prompt_ids` must be their prefix.
  std::vector<int32_t> completion(const OrderedJson& prompt, const std::vector<int32_t>& prompt_ids,
                                  const OrderedJson& c, const char* name) const {
    std::vector<int32_t> full;
    if (is_preference_messages(prompt) || is_preference_messages(c)) {
      CHECK(is_preference_messages(prompt) && is_preference_messages(c),
            "\"prompt\" and \"{}\" must both be strings or both message lists", name);
      OrderedJson all = prompt;
      for (const OrderedJson& m : c) all.push_back(m);
      full = render(all, false);
    } else {
      CHECK(c.is_string() && !c.get_ref<const std::string&>().empty(),
            "\"{}\" must be a non-empty string or a list of messages", name);
      full = tokenizer.encode(prompt.get<std::string>() + c.get<std::string>(), true);
      CHECK(opt.eos_token_id >= 0, "completions get an EOS appended, and the tokenizer has none");
      // A normalizer may strip the text to nothing (Strip on "  "): no tokens, nothing to check.
      if (full.empty() || full.back() != opt.eos_token_id) full.push_back(opt.eos_token_id);
    }
    CHECK(full.size() > prompt_ids.size() &&
              std::equal(prompt_ids.begin(), prompt_ids.end(), full.begin()),
          "the prompt's tokens are not a prefix of prompt + \"{}\"'s (a token merges across "
          "the boundary, or the template renders the prompt differently)",
          name);
    return std::vector<int32_t>(full.begin() + ptrdiff_t(prompt_ids.size()), full.end());
  }

  // A row's prompt tokens: the chat template's render with the generation prompt, or the text.
  std::vector<int32_t> prompt_tokens(const OrderedJson& prompt) const {
    std::vector<int32_t> ids;
    if (is_preference_messages(prompt)) {
      ids = render(prompt, true);
    } else {
      CHECK(prompt.is_string() && !prompt.get_ref<const std::string&>().empty(),
            "\"prompt\" must be a non-empty string or a list of messages");
      ids = tokenizer.encode(prompt.get<std::string>(), true);
    }
    // The first completion token is predicted from the prompt's last: there must be one.
    CHECK(!ids.empty(), "the prompt has no tokens");
    return ids;
  }

  UnpairedExample unpaired(const OrderedJson& r) const {
    CHECK(r.is_object(), "a row must be a JSON object, got {}", r.type_name());
    CHECK(!r.contains("chosen") && !r.contains("rejected"),
          "the row has \"chosen\"/\"rejected\": kto reads unpaired rows (\"prompt\", "
          "\"completion\", \"label\"); write each pair as two rows");
    for (const char* key : {"prompt", "completion", "label"})
      CHECK(r.contains(key), "the row needs \"{}\" (unpaired rows: prompt, completion, label)",
            key);
    const OrderedJson& label = r["label"];
    CHECK(label.is_boolean(), "\"label\" must be true (desirable) or false (undesirable), got {}",
          json_excerpt(label));
    check_preference_messages(r["prompt"], "prompt");
    check_preference_messages(r["completion"], "completion");
    UnpairedExample e;
    e.prompt = prompt_tokens(r["prompt"]);
    e.completion = completion(r["prompt"], e.prompt, r["completion"], "completion");
    e.desirable = label.get<bool>();
    const int64_t np = int64_t(e.prompt.size()), total = np + int64_t(e.completion.size());
    CHECK(np < opt.max_length, "the prompt has {} tokens: max_length {} leaves no completion token",
          np, opt.max_length);
    CHECK(total <= opt.max_length || opt.truncation,
          "prompt + completion has {} tokens, more than max_length {}", total, opt.max_length);
    return e;
  }

  PreferencePair row(const OrderedJson& r) const {
    CHECK(r.is_object(), "a row must be a JSON object, got {}", r.type_name());
    CHECK(r.contains("chosen") && r.contains("rejected"),
          "the row needs \"chosen\" and \"rejected\"");
    if (r.contains("prompt")) check_preference_messages(r["prompt"], "prompt");
    check_preference_messages(r["chosen"], "chosen");
    check_preference_messages(r["rejected"], "rejected");
    OrderedJson prompt, chosen = r["chosen"], rejected = r["rejected"];
    if (r.contains("prompt") && !r["prompt"].is_null()) {
      prompt = r["prompt"];
    } else {
      CHECK(is_preference_messages(chosen) && is_preference_messages(rejected),
            "without \"prompt\", \"chosen\" and \"rejected\" must be message lists sharing the "
            "prompt's messages");
      size_t common = 0;
      while (common < chosen.size() && common < rejected.size() &&
             chosen[common] == rejected[common])
        ++common;
      CHECK(common > 0 && common < chosen.size() && common < rejected.size(),
            "\"chosen\" and \"rejected\" share no leading messages (the implicit prompt)");
      prompt = OrderedJson::array();
      for (size_t i = 0; i < common; ++i) prompt.push_back(chosen[i]);
      chosen = OrderedJson(chosen.begin() + ptrdiff_t(common), chosen.end());
      rejected = OrderedJson(rejected.begin() + ptrdiff_t(common), rejected.end());
    }
    PreferencePair p;
    p.prompt = prompt_tokens(prompt);
    p.chosen = completion(prompt, p.prompt, chosen, "chosen");
    p.rejected = completion(prompt, p.prompt, rejected, "rejected");
    const int64_t np = int64_t(p.prompt.size());
    if (opt.max_prompt_length && np > *opt.max_prompt_length) {
      CHECK(opt.truncation, "the prompt has {} tokens, more than max_prompt_length {}", np,
            *opt.max_prompt_length);
      p.prompt.erase(p.prompt.begin(), p.prompt.end() - *opt.max_prompt_length);
    }
    for (auto* c : {&p.chosen, &p.rejected}) {
      const int64_t total = int64_t(p.prompt.size() + c->size());
      if (total > opt.max_length) {
        CHECK(opt.truncation && int64_t(p.prompt.size()) < opt.max_length,
              "prompt + completion has {} tokens, more than max_length {}", total, opt.max_length);
        c->resize(size_t(opt.max_length - int64_t(p.prompt.size())));
      }
    }
    return p;
  }
};

}  // namespace

// The reader points at the template and the options, so they live beside it (members are
// built in this order).
struct PreferenceRowReader::Impl {
  Impl(const tok::Tokenizer& tokenizer, const ChatTemplateConfig* chat,
       const PreferenceDataOptions& o)
      : options(o),
        tmpl(chat ? std::optional<ChatTemplate>(std::in_place, chat->source) : std::nullopt),
        reader{tokenizer, chat, tmpl ? &*tmpl : nullptr, render_time_now(), options} {}
  PreferenceDataOptions options;
  std::optional<ChatTemplate> tmpl;
  Reader reader;
};

PreferenceRowReader::PreferenceRowReader(const tok::Tokenizer& tokenizer,
                                         const ChatTemplateConfig* chat,
                                         const PreferenceDataOptions& options)
    : impl_(std::make_unique<Impl>(tokenizer, chat, options)) {}

PreferenceRowReader::~PreferenceRowReader() = default;

PreferencePair PreferenceRowReader::read(const nlohmann::ordered_json& row) const {
  return read_json_row([&] { return impl_->reader.row(row); });
}

UnpairedExample PreferenceRowReader::read_unpaired(const nlohmann::ordered_json& row) const {
  return read_json_row([&] { return impl_->reader.unpaired(row); });
}

std::vector<UnpairedExample> read_unpaired_dataset(const std::string& path,
                                                   const tok::Tokenizer& tokenizer,
                                                   const ChatTemplateConfig* chat,
                                                   const PreferenceDataOptions& options) {
  const PreferenceRowReader reader(tokenizer, chat, options);
  std::vector<UnpairedExample> out;
  for_each_jsonl_row(path, [&](const OrderedJson& row, int64_t line) {
    UnpairedExample e = reader.read_unpaired(row);
    e.line = line;
    out.push_back(std::move(e));
  });
  CHECK(!out.empty(), "{}: no examples (the file has no non-blank line)", path);
  return out;
}

std::vector<PreferencePair> read_preference_dataset(const std::string& path,
                                                    const tok::Tokenizer& tokenizer,
                                                    const ChatTemplateConfig* chat,
                                                    const PreferenceDataOptions& options) {
  const PreferenceRowReader reader(tokenizer, chat, options);
  std::vector<PreferencePair> out;
  for_each_jsonl_row(path, [&](const OrderedJson& row, int64_t line) {
    PreferencePair p = reader.read(row);
    p.line = line;
    out.push_back(std::move(p));
  });
  CHECK(!out.empty(), "{}: no pairs (the file has no non-blank line)", path);
  return out;
}

}  // namespace fp8rl
