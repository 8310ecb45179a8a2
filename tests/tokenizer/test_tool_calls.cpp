// Tool calls parsed from model output in each template family's format, and output that is
// not a well-formed call left as text.
#include <gtest/gtest.h>

#include "tokenizer/tool_calls.h"

using namespace fp8rl;

namespace {

TEST(ToolCalls, FormatOfTemplate) {
  EXPECT_EQ(tool_call_format_of_template("{% if tools %}<tool_call>{% endif %}"),
            ToolCallFormat::hermes);
  EXPECT_EQ(tool_call_format_of_template("[AVAILABLE_TOOLS]{{ x }}[TOOL_CALLS]"),
            ToolCallFormat::mistral);
  EXPECT_EQ(tool_call_format_of_template("<|start_header_id|>ipython<|end_header_id|>"),
            ToolCallFormat::llama3);
  EXPECT_EQ(tool_call_format_of_template("{{ messages }}"), ToolCallFormat::hermes);
}

TEST(ToolCalls, Hermes) {
  const auto p = parse_tool_calls(
      "<think>weather</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": "
      "{}}</tool_call>\n",
      ToolCallFormat::hermes);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->content, "<think>weather</think>");
  ASSERT_EQ(p->calls.size(), 2u);
  EXPECT_EQ(p->calls[0].name, "get_weather");
  EXPECT_EQ(p->calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(p->calls[1].name, "now");
  EXPECT_EQ(p->calls[1].arguments, "{}");
}

// Negative controls: plain text, bad JSON, no name, a call cut off, text after a call, and
// arguments that are not an object: no calls, the output stays text.
TEST(ToolCalls, HermesUnparseableStaysText) {
  for (const char* text :
       {"just an answer", "<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"f\"",
        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> and more",
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"})
    EXPECT_FALSE(parse_tool_calls(text, ToolCallFormat::hermes).has_value()) << text;
}

TEST(ToolCalls, ArgumentsGivenAsAString) {
  const auto p = parse_tool_calls(
      R"(<tool_call>{"name": "f", "arguments": "{\"x\": 1}"}</tool_call>)", ToolCallFormat::hermes);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->calls.at(0).arguments, R"({"x":1})");
  EXPECT_FALSE(parse_tool_calls(R"(<tool_call>{"name": "f", "arguments": "{x"}</tool_call>)",
                                ToolCallFormat::hermes)
                   .has_value());
}

TEST(ToolCalls, Mistral) {
  const auto list = parse_tool_calls(
      "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"k\": \"]\"}}, {\"name\": \"b\", "
      "\"arguments\": {}}]",
      ToolCallFormat::mistral);
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(list->content, "Sure.");
  ASSERT_EQ(list->calls.size(), 2u);
  EXPECT_EQ(list->calls[0].arguments, R"({"k":"]"})");
  EXPECT_EQ(list->calls[1].name, "b");
  const auto named = parse_tool_calls("[TOOL_CALLS]a[ARGS]{\"x\": 1}[TOOL_CALLS]b[ARGS]{}",
                                      ToolCallFormat::mistral);
  ASSERT_TRUE(named.has_value());
  ASSERT_EQ(named->calls.size(), 2u);
  EXPECT_EQ(named->calls[0].name, "a");
  EXPECT_EQ(named->calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(named->calls[1].name, "b");
  // Negative controls.
  for (const char* text : {"no calls here", "[TOOL_CALLS] [{\"name\": \"a\"", "[TOOL_CALLS] []",
                           "[TOOL_CALLS]a{\"x\": 1}", "[TOOL_CALLS] [{\"name\": 3}]"})
    EXPECT_FALSE(parse_tool_calls(text, ToolCallFormat::mistral).has_value()) << text;
}

TEST(ToolCalls, Llama3) {
  const auto p = parse_tool_calls(
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"q\": \"x;y\"}}; {\"name\": \"b\", "
      "\"parameters\": {}}",
      ToolCallFormat::llama3);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->content, "");
  ASSERT_EQ(p->calls.size(), 2u);
  EXPECT_EQ(p->calls[0].arguments, R"({"q":"x;y"})");
  EXPECT_EQ(p->calls[1].name, "b");
  // Negative controls: prose, a JSON object that is no call, junk after a call.
  for (const char* text :
       {"The answer is 4.", "{\"answer\": 4}", "{\"name\": \"a\", \"parameters\": {}} and then"})
    EXPECT_FALSE(parse_tool_calls(text, ToolCallFormat::llama3).has_value()) << text;
}

TEST(ToolCalls, AMarkerThatDoesNotParseIsToldFromPlainText) {
  struct Case {
    const char* text;
    ToolCallFormat format;
    bool marker;
  };
  for (const Case& c : {
           Case{"<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>", ToolCallFormat::hermes,
                true},
           Case{"<tool_call>{\"name\": \"f\"}", ToolCallFormat::hermes, true},
           Case{"The answer is 4.", ToolCallFormat::hermes, false},
           Case{"[TOOL_CALLS]f[ARGS]{oops", ToolCallFormat::mistral, true},
           Case{"<tool_call> is not mistral's", ToolCallFormat::mistral, false},
           Case{"<|python_tag|>{\"name\": 3}", ToolCallFormat::llama3, true},
           Case{"{\"name\": \"a\", \"parameters\": [1]}", ToolCallFormat::llama3, true},
           Case{"{\"answer\": 4}", ToolCallFormat::llama3, false},
       }) {
    EXPECT_EQ(has_tool_call_marker(c.text, c.format), c.marker) << c.text;
    EXPECT_FALSE(parse_tool_calls(c.text, c.format).has_value()) << c.text;
  }
  // A well-formed call has its marker too.
  EXPECT_TRUE(
      has_tool_call_marker("<tool_call>{\"name\": \"f\"}</tool_call>", ToolCallFormat::hermes));
}

}  // namespace
