#include "cli/serve_routes.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/model_session.h"
#include "core/check.h"
#include "engine/engine.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"

namespace fp8rl::cli {

namespace {

using Json = nlohmann::json;
using OJson = nlohmann::ordered_json;

// An answer other than 200, as OpenAI words it.
struct HttpError {
  int status;
  std::string message, type, code;
};

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(serve::dump(serve::error_body(e.message, e.type, e.code)), "application/json");
}

void send_json(httplib::Response& res, const Json& j) {
  res.status = 200;
  res.set_content(serve::dump(j), "application/json");
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Response ids: a random prefix per server and a counter, unique within and across runs.
class ResponseIds {
 public:
  std::string next(const char* prefix) {
    return fmt::format("{}-{:08x}{:08x}", prefix, run_, uint32_t(counter_++));
  }

 private:
  const uint32_t run_ = std::random_device{}();
  std::atomic<uint64_t> counter_{0};
};

void check_key(const ServeContext& c, const httplib::Request& req) {
  if (c.api_key.empty()) return;
  if (req.get_header_value("Authorization") != "Bearer " + c.api_key)
    throw HttpError{401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"};
}

// A request of everything the engine needs, or a 400/404 naming what is wrong.
struct Prepared {
  serve::ApiRequest api;
  std::vector<GenerationRequest> requests;  // one per prompt
  std::vector<int64_t> prompt_tokens;
};

Prepared prepare(const ServeContext& c, const httplib::Request& http, serve::Endpoint endpoint) {
  Prepared p;
  try {
    OJson body;
    try {
      body = OJson::parse(http.body);
    } catch (const nlohmann::json::exception& e) {
      RAISE("the request body is not valid JSON: {}", e.what());
    }
    p.api = endpoint == serve::Endpoint::chat ? serve::parse_chat_request(body)
                                              : serve::parse_completion_request(body);
  } catch (const Error& e) {
    throw HttpError{400, e.what(), "invalid_request_error", ""};
  }
  if (p.api.model != c.model_name)
    throw HttpError{404,
                    fmt::format("The model `{}` does not exist; this server serves `{}`",
                                p.api.model, c.model_name),
                    "invalid_request_error", "model_not_found"};
  try {
    std::vector<std::vector<int32_t>> prompts;
    if (endpoint == serve::Endpoint::chat) {
      CHECK(c.has_chat_template, "the model has no chat template: use /v1/completions");
      prompts.push_back(
          c.text->encode_chat(p.api.messages, p.api.chat_template_kwargs, p.api.tools));
    } else {
      for (const std::string& t : p.api.prompt_texts) prompts.push_back(c.text->encode_text(t));
      for (const std::vector<int32_t>& ids : p.api.prompt_ids) prompts.push_back(ids);
    }
    for (std::vector<int32_t>& ids : prompts) {
      CHECK(!ids.empty(), "the prompt has no tokens");
      CHECK(int64_t(ids.size()) < c.max_context,
            "the prompt of {} tokens leaves no room in the model's context of {}", ids.size(),
            c.max_context);
      GenerationRequest g;
      g.params = p.api.sampling;
      g.params.max_tokens =
          int(p.api.max_tokens.value_or(int(c.max_context - int64_t(ids.size()))));
      p.prompt_tokens.push_back(int64_t(ids.size()));
      g.prompt_ids = std::move(ids);
      c.engine->validate(g);
      p.requests.push_back(std::move(g));
    }
  } catch (const Error& e) {
    throw HttpError{400, e.what(), "invalid_request_error", ""};
  }
  return p;
}

// What a streaming response keeps between the provider's calls and its release.
struct Stream {
  Prepared prepared;
  std::unique_ptr<serve::ResponseShaper> shaper;
  std::shared_ptr<serve::Channel> channel;
  bool started = false;
};

void complete(const ServeContext& c, ResponseIds& ids, const httplib::Request& http,
              httplib::Response& res, serve::Endpoint endpoint) {
  check_key(c, http);
  auto s = std::make_shared<Stream>();
  s->prepared = prepare(c, http, endpoint);
  const serve::ApiRequest& api = s->prepared.api;
  serve::ShaperOptions so;
  so.request = &api;
  so.id = ids.next(endpoint == serve::Endpoint::chat ? "chatcmpl" : "cmpl");
  so.created = unix_seconds();
  so.parts = int(s->prepared.requests.size());
  so.prompt_tokens = s->prepared.prompt_tokens;
  so.tokenizer = c.text->tokenizer();
  so.stop_ids = c.stop_ids;
  so.stop_ids.insert(so.stop_ids.end(), api.sampling.stop_token_ids.begin(),
                     api.sampling.stop_token_ids.end());
  if (!api.tools.is_null()) so.tool_format = c.tool_format;
  s->shaper = std::make_unique<serve::ResponseShaper>(std::move(so));
  serve::Release release;
  for (const std::string& stop : api.sampling.stop)
    release.holdback = std::max(release.holdback, stop.size() - 1);
  release.hold_all = !api.tools.is_null();
  s->channel = c.queue->submit(std::move(s->prepared.requests), release);
  if (!api.stream) {
    while (!s->shaper->finished()) {
      if (std::optional<serve::TokenEvent> e = s->channel->pop(std::chrono::milliseconds(100)))
        s->shaper->add(*e);
      else if (std::optional<std::string> error = s->channel->error())
        throw HttpError{503, *error, "server_error", ""};
    }
    send_json(res, s->shaper->response());
    return;
  }
  serve::RequestQueue* queue = c.queue;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [s](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& text) {
          return text.empty() || sink.write(text.data(), text.size());
        };
        if (!s->started) {
          s->started = true;
          return write(s->shaper->stream_start());
        }
        if (std::optional<serve::TokenEvent> e = s->channel->pop(std::chrono::milliseconds(100))) {
          if (!write(s->shaper->stream_event(*e))) return false;
          if (s->shaper->finished()) {
            if (!write(s->shaper->stream_end())) return false;
            sink.done();
          }
          return true;
        }
        if (std::optional<std::string> error = s->channel->error()) {
          write(serve::sse_event(serve::error_body(*error, "server_error")));
          sink.done();
        }
        return true;
      },
      // A client gone before the end: its sequences are freed.
      [s, queue](bool) {
        if (!s->shaper->finished()) queue->abort(*s->channel);
      });
}

// Runs a handler, turning HttpError and fp8rl::Error into OpenAI's error JSON.
template <typename F>
httplib::Server::Handler guarded(F f) {
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

}  // namespace

void add_serve_routes(httplib::Server& server, const ServeContext& ctx) {
  const ServeContext* c = &ctx;
  auto ids = std::make_shared<ResponseIds>();
  server.Post("/v1/chat/completions",
              guarded([c, ids](const httplib::Request& req, httplib::Response& res) {
                complete(*c, *ids, req, res, serve::Endpoint::chat);
              }));
  server.Post("/v1/completions",
              guarded([c, ids](const httplib::Request& req, httplib::Response& res) {
                complete(*c, *ids, req, res, serve::Endpoint::completions);
              }));
  server.Get("/v1/models", guarded([c](const httplib::Request& req, httplib::Response& res) {
               check_key(*c, req);
               send_json(res, {{"object", "list"},
                               {"data",
                                {{{"id", c->model_name},
                                  {"object", "model"},
                                  {"created", unix_seconds()},
                                  {"owned_by", "fp8rl"},
                                  {"max_model_len", c->max_context}}}}});
             }));
  // Liveness and load: the sequences the engine holds, the requests being answered, and those
  // aborted so far (clients gone mid-answer).
  server.Get("/health", [c](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"status", "ok"},
                    {"live_sequences", c->queue->live_sequences()},
                    {"live_requests", c->queue->live_requests()},
                    {"aborted_requests", c->queue->aborted_requests()}});
  });
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty())
      send_error(res, {404, fmt::format("no route {} {}", req.method, req.path),
                       "invalid_request_error", "not_found"});
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(res, {500, what, "server_error", ""});
      });
}

}  // namespace fp8rl::cli
