#include "cli/serve_routes.h"

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "cli/model_session.h"
#include "core/check.h"
#include "engine/engine.h"
#include "serve/http_api.h"
#include "serve/openai_request.h"

namespace fp8rl::cli {

namespace {

using serve::HttpError;

// A request of everything the engine needs, or a 400/404 naming what is wrong.
serve::Prepared prepare(const ServeContext& c, const httplib::Request& http,
                        serve::Endpoint endpoint) {
  serve::Prepared p;
  p.api = serve::parse_body(http, endpoint);
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

void complete(const ServeContext& c, serve::ResponseIds& ids, const httplib::Request& http,
              httplib::Response& res, serve::Endpoint endpoint) {
  serve::check_api_key(c.api_key, http);
  serve::AnswerContext a;
  a.queue = c.queue;
  a.ids = &ids;
  a.tokenizer = c.text->tokenizer();
  a.stop_ids = c.stop_ids;
  a.tool_format = c.tool_format;
  serve::answer(a, prepare(c, http, endpoint), res);
}

}  // namespace

void add_serve_routes(httplib::Server& server, const ServeContext& ctx) {
  const ServeContext* c = &ctx;
  auto ids = std::make_shared<serve::ResponseIds>();
  server.Post("/v1/chat/completions",
              serve::guarded([c, ids](const httplib::Request& req, httplib::Response& res) {
                complete(*c, *ids, req, res, serve::Endpoint::chat);
              }));
  server.Post("/v1/completions",
              serve::guarded([c, ids](const httplib::Request& req, httplib::Response& res) {
                complete(*c, *ids, req, res, serve::Endpoint::completions);
              }));
  server.Get("/v1/models", serve::guarded([c](const httplib::Request& req, httplib::Response& res) {
               serve::check_api_key(c->api_key, req);
               serve::send_json(res, {{"object", "list"},
                                      {"data",
                                       {{{"id", c->model_name},
                                         {"object", "model"},
                                         {"created", serve::unix_seconds()},
                                         {"owned_by", "fp8rl"},
                                         {"max_model_len", c->max_context}}}}});
             }));
  // Liveness and load: the sequences the engine holds, the requests being answered, and those
  // aborted so far (clients gone mid-answer).
  server.Get("/health", [c](const httplib::Request&, httplib::Response& res) {
    serve::send_json(res, {{"status", "ok"},
                           {"live_sequences", c->queue->live_sequences()},
                           {"live_requests", c->queue->live_requests()},
                           {"aborted_requests", c->queue->aborted_requests()}});
  });
}

}  // namespace fp8rl::cli
