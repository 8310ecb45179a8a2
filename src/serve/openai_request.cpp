#include "serve/openai_request.h"

#include <algorithm>
#include <limits>

#include "core/check.h"
#include "formats/json_read.h"

namespace fp8rl::serve {

namespace {

using OrderedJson = nlohmann::ordered_json;

using Body = JsonKeyReader<OrderedJson>;

int read_int(Body& b, const char* key, int low, int high, std::optional<int> fallback) {
  const OrderedJson* v = b.get(key);
  if (!v) {
    CHECK(fallback.has_value(), "'{}' is required", key);
    return *fallback;
  }
  CHECK(v->is_number_integer(), "'{}' must be an integer, got {}", key, v->dump());
  const int64_t x = v->get<int64_t>();
  CHECK(x >= low && x <= high, "'{}' must be in [{}, {}], got {}", key, low, high, x);
  return int(x);
}

std::optional<int> read_optional_int(Body& b, const char* key, int low, int high) {
  if (b.j.contains(key) && !b.j[key].is_null()) return read_int(b, key, low, high, std::nullopt);
  b.asked.emplace_back(key);
  return std::nullopt;
}

double read_number(Body& b, const char* key, double fallback) {
  const OrderedJson* v = b.get(key);
  if (!v) return fallback;
  CHECK(v->is_number(), "'{}' must be a number, got {}", key, v->dump());
  return v->get<double>();
}

bool read_bool(Body& b, const char* key, bool fallback) {
  const OrderedJson* v = b.get(key);
  if (!v) return fallback;
  CHECK(v->is_boolean(), "'{}' must be true or false, got {}", key, v->dump());
  return v->get<bool>();
}

// A key fp8rl does not implement is accepted only at the value that changes nothing.
void require_neutral(Body& b, const char* key, const OrderedJson& neutral) {
  const OrderedJson* v = b.get(key);
  CHECK(!v || *v == neutral || (v->is_object() && v->empty()),
        "'{}' = {} is not supported (only {})", key, v ? v->dump() : "", neutral.dump());
}

// The keys both endpoints share: sampling, streaming, ignored client fields.
void read_common(Body& b, ApiRequest& r) {
  const OrderedJson* model = b.get("model");
  CHECK(model && model->is_string() && !model->get<std::string>().empty(),
        "'model' must be a non-empty string (GET /v1/models lists the names)");
  r.model = model->get<std::string>();
  SamplingParams& p = r.sampling;
  p.temperature = read_number(b, "temperature", 1.0);
  CHECK(p.temperature >= 0, "'temperature' must be >= 0, got {}", p.temperature);
  p.top_p = read_number(b, "top_p", 1.0);
  CHECK(p.top_p > 0 && p.top_p <= 1, "'top_p' must be in (0, 1], got {}", p.top_p);
  p.top_k = read_int(b, "top_k", -1, std::numeric_limits<int>::max(), 0);
  p.min_p = read_number(b, "min_p", 0.0);
  CHECK(p.min_p >= 0 && p.min_p <= 1, "'min_p' must be in [0, 1], got {}", p.min_p);
  p.repetition_penalty = read_number(b, "repetition_penalty", 1.0);
  CHECK(p.repetition_penalty > 0, "'repetition_penalty' must be > 0, got {}", p.repetition_penalty);
  p.n = read_int(b, "n", 1, kMaxChoices, 1);
  p.min_tokens = read_int(b, "min_tokens", 0, std::numeric_limits<int>::max(), 0);
  p.ignore_eos = read_bool(b, "ignore_eos", false);
  if (const OrderedJson* v = b.get("stop")) {
    if (v->is_string()) {
      p.stop.push_back(v->get<std::string>());
    } else {
      CHECK(v->is_array(), "'stop' must be a string or an array of strings, got {}", v->dump());
      for (const OrderedJson& s : *v) {
        CHECK(s.is_string() && !s.get<std::string>().empty(),
              "'stop' entries must be non-empty strings, got {}", s.dump());
        p.stop.push_back(s.get<std::string>());
      }
    }
  }
  if (const OrderedJson* v = b.get("stop_token_ids")) {
    CHECK(v->is_array(), "'stop_token_ids' must be an array of token ids");
    for (const OrderedJson& id : *v) {
      CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                id.get<int64_t>() <= std::numeric_limits<int32_t>::max(),
            "'stop_token_ids' entries must be non-negative token ids, got {}", id.dump());
      p.stop_token_ids.push_back(int32_t(id.get<int64_t>()));
    }
  }
  if (const OrderedJson* v = b.get("seed")) {
    CHECK(v->is_number_integer() && (v->is_number_unsigned() || v->get<int64_t>() >= 0),
          "'seed' must be a non-negative integer, got {}", v->dump());
    p.seed = v->get<uint64_t>();
  }
  r.stream = read_bool(b, "stream", false);
  if (const OrderedJson* v = b.get("stream_options")) {
    CHECK(v->is_object(), "'stream_options' must be an object, got {}", v->dump());
    CHECK(r.stream, "'stream_options' is only allowed with stream: true");
    for (const auto& [key, value] : v->items()) {
      CHECK(key == "include_usage", "unknown stream_options key '{}' (only include_usage)", key);
      CHECK(value.is_boolean(), "'stream_options.include_usage' must be true or false");
      r.include_usage = value.get<bool>();
    }
  }
  require_neutral(b, "frequency_penalty", 0);
  require_neutral(b, "presence_penalty", 0);
  require_neutral(b, "logit_bias", OrderedJson::object());
  b.ignore({"user", "metadata", "store", "service_tier"});
}

std::optional<int> read_max_tokens(Body& b, const char* key) {
  return read_optional_int(b, key, 1, std::numeric_limits<int>::max());
}

// A message's content as text: a string, null, or a list of text parts (joined).
void normalize_content(OrderedJson& message, size_t index) {
  OrderedJson& content = message["content"];
  if (content.is_null() || content.is_string()) return;
  CHECK(content.is_array(), "'messages[{}].content' must be a string or a list of parts", index);
  std::string text;
  for (const OrderedJson& part : content) {
    CHECK(part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
              part["text"].is_string(),
          "'messages[{}].content': only text parts ({{\"type\": \"text\", \"text\": ...}}) are "
          "supported, got {}",
          index, part.dump());
    text += part["text"].get<std::string>();
  }
  content = text;
}

void read_tools(Body& b, ApiRequest& r) {
  if (const OrderedJson* v = b.get("tools")) {
    CHECK(v->is_array(), "'tools' must be an array of {{\"type\": \"function\", ...}} objects");
    for (size_t i = 0; i < v->size(); ++i) {
      const OrderedJson& t = (*v)[i];
      CHECK(t.is_object() && t.value("type", "") == "function" && t.contains("function") &&
                t["function"].is_object() && t["function"].contains("name") &&
                t["function"]["name"].is_string(),
            "'tools[{}]' must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i);
    }
    if (!v->empty()) r.tools = *v;
  }
  if (const OrderedJson* v = b.get("tool_choice")) {
    CHECK(v->is_string() && (*v == "auto" || *v == "none"),
          "'tool_choice' = {} is not supported (auto or none: fp8rl does not force a call)",
          v->dump());
    if (*v == "none") r.tools = nullptr;
  }
  b.ignore({"parallel_tool_calls"});
}

}  // namespace

ApiRequest parse_chat_request(const OrderedJson& body) {
  CHECK(body.is_object(), "the request body must be a JSON object");
  Body b{body, {}};
  ApiRequest r;
  r.endpoint = Endpoint::chat;
  read_common(b, r);
  const OrderedJson* messages = b.get("messages");
  CHECK(messages && messages->is_array() && !messages->empty(),
        "'messages' must be a non-empty array of {{role, content}} objects");
  r.messages = *messages;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    OrderedJson& m = r.messages[i];
    CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
          "'messages[{}]' must be an object with a string 'role'", i);
    if (m.contains("content")) normalize_content(m, i);
  }
  read_tools(b, r);
  if (const OrderedJson* v = b.get("chat_template_kwargs")) {
    CHECK(v->is_object(), "'chat_template_kwargs' must be an object, got {}", v->dump());
    r.chat_template_kwargs = *v;
  }
  const std::optional<int> max_tokens = read_max_tokens(b, "max_tokens");
  const std::optional<int> max_completion = read_max_tokens(b, "max_completion_tokens");
  r.max_tokens = max_completion ? max_completion : max_tokens;
  r.logprobs = read_bool(b, "logprobs", false);
  r.top_logprobs = read_int(b, "top_logprobs", 0, 20, 0);
  CHECK(r.top_logprobs == 0 || r.logprobs, "'top_logprobs' needs 'logprobs': true");
  r.sampling.logprobs = r.top_logprobs;
  if (const OrderedJson* v = b.get("response_format"))
    CHECK(v->is_object() && v->value("type", "") == "text",
          "'response_format' = {} is not supported (only {{\"type\": \"text\"}})", v->dump());
  b.ignore({"reasoning_effort", "modalities"});
  b.check_all_read("unknown request key ");
  return r;
}

ApiRequest parse_completion_request(const OrderedJson& body) {
  CHECK(body.is_object(), "the request body must be a JSON object");
  Body b{body, {}};
  ApiRequest r;
  r.endpoint = Endpoint::completions;
  read_common(b, r);
  const OrderedJson* prompt = b.get("prompt");
  CHECK(prompt != nullptr, "'prompt' is required");
  auto is_ids = [](const OrderedJson& v) {
    return v.is_array() && !v.empty() && std::all_of(v.begin(), v.end(), [](const OrderedJson& x) {
             return x.is_number_integer() && x.get<int64_t>() >= 0 &&
                    x.get<int64_t>() <= std::numeric_limits<int32_t>::max();
           });
  };
  auto ids_of = [](const OrderedJson& v) {
    std::vector<int32_t> ids;
    for (const OrderedJson& x : v) ids.push_back(int32_t(x.get<int64_t>()));
    return ids;
  };
  if (prompt->is_string()) {
    r.prompt_texts.push_back(prompt->get<std::string>());
  } else if (is_ids(*prompt)) {
    r.prompt_ids.push_back(ids_of(*prompt));
  } else {
    CHECK(prompt->is_array() && !prompt->empty(),
          "'prompt' must be a string, a list of strings, a list of token ids or a list of "
          "lists of token ids");
    for (const OrderedJson& p : *prompt) {
      if (p.is_string())
        r.prompt_texts.push_back(p.get<std::string>());
      else if (is_ids(p))
        r.prompt_ids.push_back(ids_of(p));
      else
        RAISE("'prompt' entries must be strings or non-empty lists of token ids, got {}", p.dump());
    }
    CHECK(r.prompt_texts.empty() || r.prompt_ids.empty(),
          "'prompt' mixes strings and token ids: send one kind");
  }
  const size_t prompts = r.prompt_texts.size() + r.prompt_ids.size();
  CHECK(prompts * size_t(r.sampling.n) <= size_t(kMaxChoices),
        "{} prompts x n = {} is more than {} choices in one request", prompts, r.sampling.n,
        kMaxChoices);
  r.max_tokens = read_max_tokens(b, "max_tokens");
  if (const OrderedJson* v = b.get("logprobs")) {
    CHECK(v->is_number_integer() && v->get<int64_t>() >= 0 && v->get<int64_t>() <= 20,
          "'logprobs' must be an integer in [0, 20], got {}", v->dump());
    r.logprobs = true;
    r.top_logprobs = int(v->get<int64_t>());
    r.sampling.logprobs = r.top_logprobs;
  }
  require_neutral(b, "echo", false);
  require_neutral(b, "suffix", "");
  if (const OrderedJson* v = b.get("best_of"))
    CHECK(v->is_number_integer() && v->get<int64_t>() == r.sampling.n,
          "'best_of' = {} is not supported (only best_of = n)", v->dump());
  b.check_all_read("unknown request key ");
  return r;
}

}  // namespace fp8rl::serve
