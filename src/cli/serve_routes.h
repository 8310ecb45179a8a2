// fp8rl serve's HTTP routes (cpp-httplib): the OpenAI endpoints over one engine.
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health
// A handler thread parses and checks its request (serve/openai_request.h), renders and
// tokenizes the prompt, checks it against the engine (Engine::validate), submits it to the
// RequestQueue and writes what its channel yields: one JSON body, or server-sent events. A
// streaming client that goes away aborts its request, which frees its sequences.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "serve/request_queue.h"
#include "tokenizer/tool_calls.h"

namespace httplib {
class Server;
}

namespace fp8rl {
class Engine;
namespace cli {
class ModelText;
}
}  // namespace fp8rl

namespace fp8rl::cli {

struct ServeContext {
  const ModelText* text = nullptr;
  const Engine* engine = nullptr;
  serve::RequestQueue* queue = nullptr;
  std::string model_name;  // the one name requests may ask for
  std::string api_key;     // empty: none required
  int64_t max_context = 0;
  std::vector<int32_t> stop_ids;  // eos ids
  // The chat template's tool-call format; nullopt: no chat template (chat requests fail).
  std::optional<ToolCallFormat> tool_format;
  bool has_chat_template = false;
};

// Registers the routes; `ctx` must outlive the server.
void add_serve_routes(httplib::Server& server, const ServeContext& ctx);

}  // namespace fp8rl::cli
