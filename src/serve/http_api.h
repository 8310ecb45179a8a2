// The HTTP half of an OpenAI-compatible endpoint over the engine (cpp-httplib), shared by
// `fp8rl serve` (cli/serve_routes.cpp) and the endpoint a GRPO run serves its agent program
// (rl/agent_endpoint.h): OpenAI's error answers, the API key check, the listening socket, and
// answering a checked request from its RequestQueue channel as one JSON body or as
// server-sent events.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/engine.h"
#include "serve/openai_request.h"
#include "serve/request_queue.h"
#include "tokenizer/tool_calls.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace fp8rl {
namespace tok {
class Tokenizer;
}
}  // namespace fp8rl

namespace fp8rl::serve {

// An answer other than 200, as OpenAI words it.
struct HttpError {
  int status;
  std::string message, type, code;
};

void send_error(httplib::Response& res, const HttpError& e);
void send_json(httplib::Response& res, const nlohmann::json& j);
int64_t unix_seconds();

// Response ids: a random prefix per server and a counter, unique within and across runs.
class ResponseIds {
 public:
  ResponseIds();
  std::string next(const char* prefix);

 private:
  const uint32_t run_;
  std::atomic<uint64_t> counter_{0};
};

// A 401 unless the request carries `Authorization: Bearer KEY` (an empty key: none needed).
void check_api_key(const std::string& api_key, const httplib::Request& req);

// The request's body read and checked for `endpoint`, or a 400 naming what is wrong.
ApiRequest parse_body(const httplib::Request& http, Endpoint endpoint);

// A request ready for the engine: the body, one engine request per prompt (checked with
// Engine::validate) and their prompt lengths.
struct Prepared {
  ApiRequest api;
  std::vector<GenerationRequest> requests;
  std::vector<int64_t> prompt_tokens;
};

struct AnswerContext {
  RequestQueue* queue = nullptr;
  ResponseIds* ids = nullptr;
  const tok::Tokenizer* tokenizer = nullptr;
  std::vector<int32_t> stop_ids;              // eos ids
  std::optional<ToolCallFormat> tool_format;  // the template's (used when the request has tools)
};

// Called once per answer: with every token event (parts and samples interleaved, in order)
// once all choices ended, before the last bytes of the response go out; with null when the
// answer ends otherwise (the engine refused it or stopped, the client went away).
using AnswerEnd = std::function<void(const std::vector<TokenEvent>* events)>;

// Submits `p` to the queue and answers from its channel: one JSON body, or server-sent events
// when the request streams (a client that goes away aborts its requests).
void answer(const AnswerContext& c, Prepared p, httplib::Response& res,
            const AnswerEnd& on_end = {});

// Handlers that turn HttpError and fp8rl::Error into OpenAI's error JSON.
template <typename F>
auto guarded(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const HttpError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, {500, e.what(), "server_error", ""});
    }
  };
}

// A pool of `threads` handler threads (a stream holds one to its end), bodies up to 64 MiB,
// OpenAI's error JSON for unknown routes and uncaught exceptions.
void configure_server(httplib::Server& server, int threads);

// Binds `host`:`port` (0: any free port) with SO_REUSEADDR but not SO_REUSEPORT (a second
// server on a busy port fails instead of sharing it) and a listen backlog of SOMAXCONN (the
// library's 5 drops connections when many clients connect at once, as an agent's episodes do).
// The port bound, or -1.
int bind_server(httplib::Server& server, const std::string& host, int port);

}  // namespace fp8rl::serve
