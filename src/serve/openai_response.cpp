#include "serve/openai_response.h"

#include <algorithm>

#include "core/check.h"
#include "formats/json_read.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl::serve {

namespace {
using Json = nlohmann::json;

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

std::string call_id(const std::string& request_id, size_t choice, size_t call) {
  return fmt::format("call_{}_{}_{}", request_id.substr(request_id.find('-') + 1), choice, call);
}
}  // namespace

Json error_body(const std::string& message, const std::string& type, const std::string& code) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", nullptr},
            {"code", code.empty() ? Json(nullptr) : Json(code)}}}};
}

std::string sse_event(const Json& j) {
  return "data: " + json_line(j) + "\n\n";
}

ResponseShaper::ResponseShaper(ShaperOptions options) : o_(std::move(options)) {
  CHECK(o_.request != nullptr, "response shaper without a request");
  choices_.resize(size_t(o_.parts) * size_t(o_.request->sampling.n));
}

ResponseShaper::Choice& ResponseShaper::record(const TokenEvent& e) {
  Choice& c = choices_.at(size_t(e.part) * size_t(o_.request->sampling.n) + size_t(e.sample));
  c.ids.push_back(e.token);
  c.logprobs.push_back(e.logprob);
  c.top.push_back(e.top);
  c.text += e.text;
  ++completion_tokens_;
  if (e.done) {
    c.finish = e.finish;
    ++finished_;
  }
  return c;
}

std::string ResponseShaper::piece(int32_t id) const {
  return o_.tokenizer != nullptr ? o_.tokenizer->decode({&id, 1}) : fmt::format("{}", id);
}

Json ResponseShaper::usage() const {
  int64_t prompt = 0;
  for (int64_t p : o_.prompt_tokens) prompt += p;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt + completion_tokens_}};
}

Json ResponseShaper::chat_logprobs(const Choice& c, size_t from, size_t to) const {
  Json content = Json::array();
  for (size_t i = from; i < to; ++i) {
    const std::string tok = piece(c.ids[i]);
    Json top = Json::array();
    for (const auto& [id, lp] : c.top[i]) {
      const std::string t = piece(id);
      top.push_back({{"token", t}, {"logprob", lp}, {"bytes", bytes_of(t)}});
    }
    content.push_back({{"token", tok},
                       {"logprob", c.logprobs[i]},
                       {"bytes", bytes_of(tok)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

Json ResponseShaper::completion_logprobs(const Choice& c, size_t from, size_t to,
                                         size_t text_offset) const {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (size_t i = from; i < to; ++i) {
    const std::string tok = piece(c.ids[i]);
    tokens.push_back(tok);
    lps.push_back(c.logprobs[i]);
    Json top = Json::object();
    for (const auto& [id, lp] : c.top[i]) top[piece(id)] = lp;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += tok.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

Json ResponseShaper::message(const Choice& c, std::string& finish_reason) const {
  finish_reason = finish_reason_name(c.finish.value_or(FinishReason::length));
  Json m = {{"role", "assistant"}, {"content", c.text}};
  if (!o_.tool_format) return m;
  // The calls are parsed from the text with special tokens kept ([TOOL_CALLS] is one), less
  // the id that stopped the choice.
  std::vector<int32_t> ids = c.ids;
  if (c.finish == FinishReason::stop && !ids.empty() &&
      std::find(o_.stop_ids.begin(), o_.stop_ids.end(), ids.back()) != o_.stop_ids.end())
    ids.pop_back();
  const std::string raw = o_.tokenizer != nullptr ? o_.tokenizer->decode(ids) : c.text;
  const std::optional<ParsedToolCalls> parsed = parse_tool_calls(raw, *o_.tool_format);
  if (!parsed) return m;
  const size_t index = size_t(&c - choices_.data());
  Json calls = Json::array();
  for (size_t k = 0; k < parsed->calls.size(); ++k)
    calls.push_back(
        {{"id", call_id(o_.id, index, k)},
         {"type", "function"},
         {"function",
          {{"name", parsed->calls[k].name}, {"arguments", parsed->calls[k].arguments}}}});
  m["content"] = parsed->content.empty() ? Json(nullptr) : Json(parsed->content);
  m["tool_calls"] = calls;
  finish_reason = "tool_calls";
  return m;
}

Json ResponseShaper::chunk(Json choice) const {
  const bool chat = o_.request->endpoint == Endpoint::chat;
  Json j = {{"id", o_.id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", o_.created},
            {"model", o_.request->model},
            {"choices", Json::array({std::move(choice)})}};
  if (o_.request->include_usage) j["usage"] = nullptr;
  return j;
}

std::string ResponseShaper::stream_start() const {
  if (o_.request->endpoint != Endpoint::chat) return "";
  std::string out;
  for (size_t i = 0; i < choices_.size(); ++i)
    out += sse_event(chunk({{"index", i},
                            {"delta", {{"role", "assistant"}, {"content", ""}}},
                            {"logprobs", nullptr},
                            {"finish_reason", nullptr}}));
  return out;
}

std::string ResponseShaper::stream_event(const TokenEvent& e) {
  Choice& c = record(e);
  const size_t index = size_t(&c - choices_.data());
  const bool chat = o_.request->endpoint == Endpoint::chat;
  // A choice whose text is held (tools) sends its tokens' logprobs with the text at the end.
  if (o_.tool_format && !e.done) return "";
  const size_t n = c.ids.size();
  const size_t from = o_.tool_format ? 0 : n - 1;
  Json logprobs = nullptr;
  if (o_.request->logprobs)
    logprobs = chat ? chat_logprobs(c, from, n)
                    : completion_logprobs(c, from, n, c.text.size() - e.text.size());
  Json finish = nullptr;
  Json delta;
  if (chat) {
    delta = {{"content", e.text}};
    if (e.done) {
      std::string reason;
      if (o_.tool_format) {
        const Json m = message(c, reason);
        delta = {{"content", m["content"]}};
        if (m.contains("tool_calls")) {
          Json calls = m["tool_calls"];
          for (size_t k = 0; k < calls.size(); ++k) calls[k]["index"] = k;
          delta["tool_calls"] = calls;
        }
      } else {
        reason = finish_reason_name(*c.finish);
      }
      finish = reason;
    }
    if (e.text.empty() && !e.done && logprobs.is_null()) return "";
    return sse_event(chunk(
        {{"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}}));
  }
  if (e.done) finish = finish_reason_name(*c.finish);
  if (e.text.empty() && !e.done && logprobs.is_null()) return "";
  return sse_event(chunk(
      {{"index", index}, {"text", e.text}, {"logprobs", logprobs}, {"finish_reason", finish}}));
}

std::string ResponseShaper::stream_end() const {
  std::string out;
  if (o_.request->include_usage) {
    const bool chat = o_.request->endpoint == Endpoint::chat;
    out += sse_event({{"id", o_.id},
                      {"object", chat ? "chat.completion.chunk" : "text_completion"},
                      {"created", o_.created},
                      {"model", o_.request->model},
                      {"choices", Json::array()},
                      {"usage", usage()}});
  }
  return out + "data: [DONE]\n\n";
}

void ResponseShaper::add(const TokenEvent& e) {
  record(e);
}

Json ResponseShaper::response() const {
  const bool chat = o_.request->endpoint == Endpoint::chat;
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    if (chat) {
      std::string reason;
      Json m = message(c, reason);
      choices.push_back(
          {{"index", i},
           {"message", m},
           {"logprobs", o_.request->logprobs ? chat_logprobs(c, 0, c.ids.size()) : Json(nullptr)},
           {"finish_reason", reason}});
    } else {
      choices.push_back(
          {{"index", i},
           {"text", c.text},
           {"logprobs",
            o_.request->logprobs ? completion_logprobs(c, 0, c.ids.size(), 0) : Json(nullptr)},
           {"finish_reason", finish_reason_name(c.finish.value_or(FinishReason::length))}});
    }
  }
  return {{"id", o_.id},           {"object", chat ? "chat.completion" : "text_completion"},
          {"created", o_.created}, {"model", o_.request->model},
          {"choices", choices},    {"usage", usage()}};
}

}  // namespace fp8rl::serve
