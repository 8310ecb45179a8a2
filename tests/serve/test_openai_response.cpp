// OpenAI's response shapes from token events: a chat answer whose text is a tool call comes
// back as tool_calls with finish_reason "tool_calls", whole and streamed; text that is no
// call stays content (the negative control); usage counts every choice's tokens.
#include <gtest/gtest.h>

#include "formats/json_read.h"
#include "serve/openai_response.h"

using namespace fp8rl;
using namespace fp8rl::serve;
using Json = nlohmann::json;

namespace {

ApiRequest chat_request(bool stream) {
  ApiRequest r;
  r.endpoint = Endpoint::chat;
  r.model = std::string("m");  // (operator=(const char*) trips GCC 12's -Wrestrict)
  r.stream = stream;
  r.include_usage = stream;
  r.tools = nlohmann::ordered_json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  return r;
}

ShaperOptions options(const ApiRequest& r) {
  ShaperOptions o;
  o.request = &r;
  o.id = "chatcmpl-1";
  o.prompt_tokens = {5};
  o.tool_format = ToolCallFormat::hermes;
  return o;
}

// Two events: the first token (its text held back, as for a request with tools), then the
// last with the whole text.
std::vector<TokenEvent> events(const std::string& text) {
  TokenEvent first;
  first.token = 1;
  TokenEvent last;
  last.token = 2;
  last.text = text;
  last.done = true;
  last.finish = FinishReason::stop;
  return {first, last};
}

const char* kCall = R"(<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>)";

TEST(OpenAiResponse, ToolCallsWhole) {
  const ApiRequest r = chat_request(false);
  ResponseShaper s(options(r));
  for (const TokenEvent& e : events(kCall)) s.add(e);
  ASSERT_TRUE(s.finished());
  const Json j = s.response();
  const Json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"x":1})");
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  // Negative control: text that is no call stays content with the engine's finish reason.
  ResponseShaper plain(options(r));
  for (const TokenEvent& e : events("<tool_call>{\"name\": broken</tool_call>")) plain.add(e);
  const Json p = plain.response();
  EXPECT_EQ(p["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(p["choices"][0]["message"]["content"], "<tool_call>{\"name\": broken</tool_call>");
  EXPECT_FALSE(p["choices"][0]["message"].contains("tool_calls"));
}

// The data lines of a stream's text, parsed ([DONE] as a string).
std::vector<Json> data_lines(const std::string& sse) {
  std::vector<Json> out;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    const size_t end = sse.find("\n\n", at);
    const std::string body = sse.substr(at + 6, end - at - 6);
    out.push_back(body == "[DONE]" ? Json(body) : Json::parse(body));
    at = end;
  }
  return out;
}

TEST(OpenAiResponse, ToolCallsStreamed) {
  const ApiRequest r = chat_request(true);
  ResponseShaper s(options(r));
  std::string sse = s.stream_start();
  for (const TokenEvent& e : events(kCall)) sse += s.stream_event(e);
  sse += s.stream_end();
  const std::vector<Json> lines = data_lines(sse);
  ASSERT_EQ(lines.size(), 4u) << sse;  // role, the calls, usage, [DONE]
  EXPECT_EQ(lines[0]["choices"][0]["delta"]["role"], "assistant");
  const Json& delta = lines[1]["choices"][0]["delta"];
  EXPECT_EQ(lines[1]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(delta["tool_calls"][0]["index"], 0);
  EXPECT_EQ(delta["tool_calls"][0]["function"]["name"], "f");
  EXPECT_TRUE(lines[2]["choices"].empty());
  EXPECT_EQ(lines[2]["usage"]["completion_tokens"], 2);
  EXPECT_EQ(lines[3], "[DONE]");
}

TEST(OpenAiResponse, ErrorBody) {
  const Json e = error_body("bad", "invalid_request_error", "model_not_found");
  EXPECT_EQ(e["error"]["message"], "bad");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(e["error"].contains("param"));
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  // A token piece that ends inside a UTF-8 character is sent replaced, not thrown on.
  EXPECT_EQ(json_line(Json("a\xC3")), "\"a\xEF\xBF\xBD\"");
}

}  // namespace
