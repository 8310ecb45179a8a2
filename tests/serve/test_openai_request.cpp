// OpenAI request bodies read into what the engine runs, and every bad body refused with a
// message naming the key.
#include <gtest/gtest.h>

#include "core/check.h"
#include "serve/openai_request.h"

using namespace fp8rl;
using namespace fp8rl::serve;
using OrderedJson = nlohmann::ordered_json;

namespace {

OrderedJson chat_body() {
  return OrderedJson::parse(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
}

// The parse fails and its message contains `part`.
template <typename Parse>
void expect_refused(Parse parse, const OrderedJson& body, const std::string& part) {
  try {
    parse(body);
    ADD_FAILURE() << "accepted: " << body.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "message: " << e.what() << "\nbody: " << body.dump();
  }
}

TEST(OpenAiRequest, ChatDefaults) {
  const ApiRequest r = parse_chat_request(chat_body());
  EXPECT_EQ(r.endpoint, Endpoint::chat);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.sampling.n, 1);
  EXPECT_EQ(r.sampling.temperature, 1.0);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_TRUE(r.tools.is_null());
}

TEST(OpenAiRequest, ChatEveryKey) {
  OrderedJson b = chat_body();
  b["messages"][0]["content"] = OrderedJson::parse(R"([{"type": "text", "text": "a"},
                                               {"type": "text", "text": "b"}])");
  b.update(OrderedJson::parse(R"({"temperature": 0.5, "top_p": 0.9, "top_k": 5, "min_p": 0.1,
    "max_tokens": 7, "max_completion_tokens": 9, "n": 3, "stop": "x", "seed": 4, "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2,
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto",
    "chat_template_kwargs": {"enable_thinking": false}, "user": "u", "frequency_penalty": 0})"));
  const ApiRequest r = parse_chat_request(b);
  EXPECT_EQ(r.messages[0]["content"], "ab");
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.max_tokens, 9);  // max_completion_tokens wins, as OpenAI's newer name
  EXPECT_EQ(r.sampling.n, 3);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.sampling.seed, 4u);
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.sampling.logprobs, 2);  // the engine returns that many alternatives
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
  // tool_choice "none" drops the tools.
  b["tool_choice"] = "none";
  EXPECT_TRUE(parse_chat_request(b).tools.is_null());
}

TEST(OpenAiRequest, ChatRefusals) {
  auto with = [](const char* patch) {
    OrderedJson b = chat_body();
    b.update(OrderedJson::parse(patch));
    return b;
  };
  expect_refused(parse_chat_request, with(R"({"temprature": 0})"),
                 "unknown request key 'temprature' (did you mean 'temperature'?)");
  expect_refused(parse_chat_request, with(R"({"temperature": -1})"), "'temperature' must be >= 0");
  expect_refused(parse_chat_request, with(R"({"temperature": "hot"})"), "must be a number");
  expect_refused(parse_chat_request, with(R"({"n": 0})"), "'n' must be in [1, 128]");
  expect_refused(parse_chat_request, with(R"({"max_tokens": 0})"), "'max_tokens' must be in");
  expect_refused(parse_chat_request, with(R"({"top_logprobs": 3})"), "needs 'logprobs': true");
  expect_refused(parse_chat_request, with(R"({"top_logprobs": 21, "logprobs": true})"),
                 "'top_logprobs' must be in [0, 20]");
  expect_refused(parse_chat_request, with(R"({"stream_options": {"include_usage": true}})"),
                 "only allowed with stream: true");
  expect_refused(parse_chat_request, with(R"({"tool_choice": "required"})"), "'tool_choice'");
  expect_refused(parse_chat_request, with(R"({"tools": [{"type": "function"}]})"), "'tools[0]'");
  expect_refused(parse_chat_request, with(R"({"presence_penalty": 0.5})"), "not supported");
  expect_refused(parse_chat_request, with(R"({"seed": -1})"), "'seed' must be a non-negative");
  expect_refused(parse_chat_request, with(R"({"stop": [""]})"), "'stop' entries");
  expect_refused(parse_chat_request, with(R"({"messages": []})"), "'messages' must be");
  expect_refused(parse_chat_request, with(R"({"messages": [{"content": "x"}]})"),
                 "'messages[0]' must be an object with a string 'role'");
  expect_refused(parse_chat_request,
                 with(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
                 "only text parts");
  expect_refused(parse_chat_request, OrderedJson::parse(R"({"messages": []})"), "'model' must be");
  expect_refused(parse_chat_request, OrderedJson::parse("[1]"), "must be a JSON object");
}

TEST(OpenAiRequest, CompletionPrompts) {
  auto parse = [](const char* text) { return parse_completion_request(OrderedJson::parse(text)); };
  EXPECT_EQ(parse(R"({"model": "m", "prompt": "hi"})").prompt_texts,
            std::vector<std::string>{"hi"});
  EXPECT_EQ(parse(R"({"model": "m", "prompt": ["a", "b"]})").prompt_texts.size(), 2u);
  EXPECT_EQ(parse(R"({"model": "m", "prompt": [1, 2, 3]})").prompt_ids.at(0),
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse(R"({"model": "m", "prompt": [[1], [2, 3]]})").prompt_ids.size(), 2u);
  const ApiRequest r = parse(R"({"model": "m", "prompt": "x", "logprobs": 2, "max_tokens": 5})");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_EQ(r.max_tokens, 5);
}

TEST(OpenAiRequest, CompletionRefusals) {
  auto refused = [](const char* text, const std::string& part) {
    expect_refused(parse_completion_request, OrderedJson::parse(text), part);
  };
  refused(R"({"model": "m"})", "'prompt' is required");
  refused(R"({"model": "m", "prompt": ["a", [1]]})", "mixes strings and token ids");
  refused(R"({"model": "m", "prompt": [[-1]]})", "'prompt' entries");
  refused(R"({"model": "m", "prompt": "x", "echo": true})", "'echo'");
  refused(R"({"model": "m", "prompt": "x", "logprobs": true})", "'logprobs' must be an integer");
  refused(R"({"model": "m", "prompt": ["a", "b"], "n": 100})", "more than 128 choices");
  refused(R"({"model": "m", "prompt": "x", "messages": []})", "unknown request key 'messages'");
}

}  // namespace
