#include "tokenizer/chat_request.h"

#include "core/check.h"

namespace fp8rl {

ChatRequest chat_request_from_json(const nlohmann::ordered_json& data, std::string_view what) {
  ChatRequest request;
  if (data.is_array()) {
    request.messages = data;
    return request;
  }
  CHECK(data.is_object() && data.contains("messages"),
        "{} must hold an array of messages or an object with \"messages\"", what);
  request.messages = data["messages"];
  if (data.contains("tools")) request.tools = data["tools"];
  if (data.contains("documents")) request.documents = data["documents"];
  return request;
}

}  // namespace fp8rl
