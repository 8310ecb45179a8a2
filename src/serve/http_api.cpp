#include "serve/http_api.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "formats/json_read.h"
#include "serve/openai_response.h"

namespace fp8rl::serve {

namespace {

using OJson = nlohmann::ordered_json;

// What a streaming response keeps between the provider's calls and its release.
struct Stream {
  Prepared prepared;
  std::unique_ptr<ResponseShaper> shaper;
  std::shared_ptr<Channel> channel;
  std::vector<TokenEvent> events;  // kept for on_end
  AnswerEnd on_end;
  bool started = false, ended = false;

  void end(bool answered) {
    if (ended) return;
    ended = true;
    if (on_end) on_end(answered ? &events : nullptr);
  }
};

}  // namespace

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(json_line(error_body(e.message, e.type, e.code)), "application/json");
}

void send_json(httplib::Response& res, const nlohmann::json& j) {
  res.status = 200;
  res.set_content(json_line(j), "application/json");
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ResponseIds::ResponseIds() : run_(std::random_device{}()) {}

std::string ResponseIds::next(const char* prefix) {
  return fmt::format("{}-{:08x}{:08x}", prefix, run_, uint32_t(counter_++));
}

void check_api_key(const std::string& api_key, const httplib::Request& req) {
  if (api_key.empty()) return;
  if (req.get_header_value("Authorization") != "Bearer " + api_key)
    throw HttpError{401, "Incorrect API key provided", "invalid_request_error", "invalid_api_key"};
}

ApiRequest parse_body(const httplib::Request& http, Endpoint endpoint) {
  try {
    OJson body;
    try {
      body = OJson::parse(http.body);
    } catch (const nlohmann::json::exception& e) {
      RAISE("the request body is not valid JSON: {}", e.what());
    }
    return endpoint == Endpoint::chat ? parse_chat_request(body) : parse_completion_request(body);
  } catch (const Error& e) {
    throw HttpError{400, e.what(), "invalid_request_error", ""};
  }
}

void answer(const AnswerContext& c, Prepared p, httplib::Response& res, const AnswerEnd& on_end) {
  auto s = std::make_shared<Stream>();
  s->prepared = std::move(p);
  s->on_end = on_end;
  const ApiRequest& api = s->prepared.api;
  ShaperOptions so;
  so.request = &api;
  so.id = c.ids->next(api.endpoint == Endpoint::chat ? "chatcmpl" : "cmpl");
  so.created = unix_seconds();
  so.parts = int(s->prepared.requests.size());
  so.prompt_tokens = s->prepared.prompt_tokens;
  so.tokenizer = c.tokenizer;
  so.stop_ids = c.stop_ids;
  so.stop_ids.insert(so.stop_ids.end(), api.sampling.stop_token_ids.begin(),
                     api.sampling.stop_token_ids.end());
  if (!api.tools.is_null()) so.tool_format = c.tool_format;
  s->shaper = std::make_unique<ResponseShaper>(std::move(so));
  Release release;
  for (const std::string& stop : api.sampling.stop)
    release.holdback = std::max(release.holdback, stop.size() - 1);
  release.hold_all = !api.tools.is_null();
  s->channel = c.queue->submit(std::move(s->prepared.requests), release);
  if (!api.stream) {
    while (!s->shaper->finished()) {
      if (std::optional<TokenEvent> e = s->channel->pop(std::chrono::milliseconds(100))) {
        s->shaper->add(*e);
        if (on_end) s->events.push_back(std::move(*e));
      } else if (std::optional<std::string> error = s->channel->error()) {
        s->end(false);
        throw HttpError{503, *error, "server_error", ""};
      }
    }
    s->end(true);
    send_json(res, s->shaper->response());
    return;
  }
  RequestQueue* queue = c.queue;
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
        if (std::optional<TokenEvent> e = s->channel->pop(std::chrono::milliseconds(100))) {
          const std::string text = s->shaper->stream_event(*e);
          if (s->on_end) s->events.push_back(std::move(*e));
          if (s->shaper->finished()) s->end(true);
          if (!write(text)) return false;
          if (s->shaper->finished()) {
            if (!write(s->shaper->stream_end())) return false;
            sink.done();
          }
          return true;
        }
        if (std::optional<std::string> error = s->channel->error()) {
          s->end(false);
          write(sse_event(error_body(*error, "server_error")));
          sink.done();
        }
        return true;
      },
      // A client gone before the end: its sequences are freed.
      [s, queue](bool) {
        if (!s->shaper->finished()) queue->abort(*s->channel);
        s->end(false);
      });
}

void configure_server(httplib::Server& server, int threads) {
  server.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  server.set_payload_max_length(size_t(64) << 20);
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

int bind_server(httplib::Server& server, const std::string& host, int port) {
  auto listening = std::make_shared<socket_t>(INVALID_SOCKET);
  // cpp-httplib's default also sets SO_REUSEPORT, under which a second server on a busy port
  // shares it silently instead of failing: only SO_REUSEADDR (a restart reuses the port).
  server.set_socket_options([listening](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    *listening = sock;
  });
  const int bound =
      port == 0 ? server.bind_to_any_port(host) : (server.bind_to_port(host, port) ? port : -1);
  // Listening again on a listening socket only changes its backlog.
  if (bound > 0 && *listening != INVALID_SOCKET) ::listen(*listening, SOMAXCONN);
  return bound;
}

}  // namespace fp8rl::serve
