// The messages file of `fp8rl chat-template`: its two shapes, and the errors of the others.
#include <gtest/gtest.h>

#include "core/check.h"
#include "tokenizer/chat_request.h"

namespace fp8rl {
namespace {

using OrderedJson = nlohmann::ordered_json;

TEST(ChatRequest, AnArrayIsTheMessages) {
  const OrderedJson messages = OrderedJson::parse(R"([{"role": "user", "content": "hi"}])");
  const ChatRequest r = chat_request_from_json(messages, "m.json");
  EXPECT_EQ(r.messages, messages);
  EXPECT_TRUE(r.tools.is_null());
  EXPECT_TRUE(r.documents.is_null());
}

TEST(ChatRequest, AnObjectGivesMessagesToolsAndDocuments) {
  const OrderedJson data = OrderedJson::parse(R"({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function"}], "documents": [{"text": "d"}], "other": 1})");
  const ChatRequest r = chat_request_from_json(data, "m.json");
  EXPECT_EQ(r.messages, data["messages"]);
  EXPECT_EQ(r.tools, data["tools"]);
  EXPECT_EQ(r.documents, data["documents"]);
  EXPECT_FALSE(r.add_generation_prompt);
}

TEST(ChatRequest, OtherShapesAreAnErrorNamingTheFile) {
  for (const char* text : {R"({"tools": []})", "3", R"("messages")", "null"}) {
    try {
      chat_request_from_json(OrderedJson::parse(text), "m.json");
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("m.json must hold an array of messages"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace fp8rl
