#include "rl/agent_environment.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/check.h"
#include "core/interrupt.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "rl/conversation_tokens.h"
#include "rl/environment_process.h"
#include "serve/http_api.h"
#include "serve/request_queue.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

namespace {

using Json = nlohmann::json;
using serve::HttpError;

std::string random_key() {
  std::random_device r;
  return fmt::format("sk-fp8rl-{:08x}{:08x}{:08x}{:08x}", r(), r(), r(), r());
}

}  // namespace

struct AgentEnvironment::Impl {
  struct Episode {
    size_t index = 0;
    uint64_t seed = 0;
    bool open = false;
    bool busy = false;  // a completion in flight (an episode's requests run one at a time)
    int64_t calls = 0;
    AgentEpisodeResult result;
  };

  AgentOptions o;
  const ConversationTokens& chat;
  const tok::Tokenizer& tokenizer;
  std::vector<int32_t> eos_ids;
  std::optional<ToolCallFormat> tool_format;
  std::string api_key = random_key();
  std::string url;
  serve::ResponseIds response_ids;

  std::mutex render_mutex;  // one chat template interpreter
  std::mutex mutex;         // guards everything below
  std::map<std::string, Episode> episodes;
  std::shared_ptr<serve::RequestQueue> queue;  // the round's; null between rounds
  const Engine* engine = nullptr;
  std::atomic<int64_t> busy{0}, refused{0};

  httplib::Server server;
  std::thread listener;
  std::unique_ptr<EnvironmentProcess> program;

  Impl(const AgentOptions& options, const ConversationTokens& c, const tok::Tokenizer& t,
       std::vector<int32_t> eos)
      : o(options), chat(c), tokenizer(t), eos_ids(std::move(eos)) {
    try {
      tool_format = chat.tool_call_format();
    } catch (const Error&) {
      // A template without a tool-call family: requests with tools get text answers.
    }
  }

  Episode& episode(const std::string& id) {
    const auto it = episodes.find(id);
    if (it == episodes.end() || !it->second.open)
      throw HttpError{404,
                      fmt::format("no episode `{}` is running (unknown, or its round ended); "
                                  "give a running episode's id as the model or X-Episode-Id",
                                  id),
                      "invalid_request_error", "model_not_found"};
    return it->second;
  }

  void complete(const httplib::Request& http, httplib::Response& res) {
    serve::check_api_key(api_key, http);
    serve::Prepared p;
    p.api = serve::parse_body(http, serve::Endpoint::chat);
    const std::string id =
        http.has_header("X-Episode-Id") ? http.get_header_value("X-Episode-Id") : p.api.model;
    if (p.api.sampling.n != 1)
      throw HttpError{400,
                      fmt::format("n = {}: an episode's completion is one sample (ask for n = 1, "
                                  "the run samples num_generations episodes)",
                                  p.api.sampling.n),
                      "invalid_request_error", ""};
    std::vector<int32_t> prompt;
    try {
      std::lock_guard lock(render_mutex);
      prompt = chat.opening(p.api.messages, p.api.tools, p.api.chat_template_kwargs);
    } catch (const Error& e) {
      throw HttpError{400, e.what(), "invalid_request_error", ""};
    }
    GenerationRequest g;
    std::shared_ptr<serve::RequestQueue> q;
    {
      std::lock_guard lock(mutex);
      Episode& e = episode(id);
      if (e.busy)
        throw HttpError{409,
                        fmt::format("episode `{}` has a completion in flight: an episode's "
                                    "requests run one at a time",
                                    id),
                        "invalid_request_error", ""};
      const AgentTrajectory& t = e.result.trajectory;
      const int64_t room = std::min(t.room(prompt), o.max_context - int64_t(prompt.size()));
      if (room < 1)
        throw HttpError{400,
                        fmt::format("episode `{}`: a prompt of {} tokens leaves no room for a "
                                    "completion (the episode's {} completion tokens so far, "
                                    "max_completion_length {}, the context {})",
                                    id, prompt.size(), t.completion_tokens(),
                                    o.max_completion_length, o.max_context),
                        "invalid_request_error", ""};
      // The run's sampler: the policy being trained is the one the trainer's loss assumes, so
      // a request's own temperature, top_p, penalties and seed are not used.
      g.params = o.sampling;
      g.params.n = 1;
      g.params.max_tokens = int(std::min<int64_t>(room, p.api.max_tokens.value_or(INT32_MAX)));
      g.params.seed = rng_key(e.seed, uint64_t(e.calls));
      g.params.stop = p.api.sampling.stop;
      g.params.stop_token_ids = p.api.sampling.stop_token_ids;
      g.params.logprobs = p.api.sampling.logprobs;
      g.params.processed_logprobs = true;
      g.prompt_ids = prompt;
      try {
        engine->validate(g);
      } catch (const Error& err) {
        throw HttpError{400, err.what(), "invalid_request_error", ""};
      }
      e.busy = true;
      ++e.calls;
      ++busy;
      q = queue;
    }
    p.api.sampling = g.params;
    p.prompt_tokens = {int64_t(prompt.size())};
    p.requests = {std::move(g)};
    serve::AnswerContext a;
    a.queue = q.get();
    a.ids = &response_ids;
    a.tokenizer = &tokenizer;
    a.stop_ids = eos_ids;
    a.tool_format = tool_format;
    const Json messages = Json::parse(p.api.messages.dump());
    // The queue stays alive while the answer may use it (a stream outlives this handler).
    serve::answer(a, std::move(p), res,
                  [this, id, prompt, q, messages](const std::vector<serve::TokenEvent>* events) {
                    record(id, prompt, messages, events);
                  });
  }

  void record(const std::string& id, const std::vector<int32_t>& prompt, const Json& messages,
              const std::vector<serve::TokenEvent>* events) {
    std::lock_guard lock(mutex);
    --busy;
    const auto it = episodes.find(id);
    if (it == episodes.end()) return;
    Episode& e = it->second;
    e.busy = false;
    if (events == nullptr || !e.open || events->empty()) return;
    std::vector<int32_t> ids;
    std::vector<float> logp;
    for (const serve::TokenEvent& t : *events) {
      ids.push_back(t.token);
      logp.push_back(t.processed_logprob);
    }
    AgentEpisodeResult& r = e.result;
    if (r.trajectory.completions() == 0) r.opening = messages;
    r.trajectory.record(prompt, ids, logp);
    r.last_ids = ids;
    r.last_completion = tokenizer.decode(ids, /*skip_special=*/true);
    r.truncated = events->back().finish == FinishReason::length;
    r.messages = Json::array();
    for (size_t k = r.opening.size(); k < messages.size(); ++k) r.messages.push_back(messages[k]);
    r.messages.push_back({{"role", "assistant"}, {"content", r.last_completion}});
  }

  void refuse_counted(httplib::Response& res, const HttpError& e) {
    ++refused;
    serve::send_error(res, e);
  }
};

AgentEnvironment::AgentEnvironment(const AgentOptions& options, const ConversationTokens& chat,
                                   const tok::Tokenizer& tokenizer, std::vector<int32_t> eos_ids)
    : impl_(std::make_unique<Impl>(options, chat, tokenizer, std::move(eos_ids))) {
  Impl& im = *impl_;
  CHECK(options.max_prompt_length >= 1 && options.max_completion_length >= 1,
        "environment_server: a budget of {} prompt and {} completion tokens",
        options.max_prompt_length, options.max_completion_length);
  serve::configure_server(im.server, std::max(options.http_threads, 1));
  Impl* p = &im;
  im.server.Post("/v1/chat/completions", [p](const httplib::Request& req, httplib::Response& res) {
    try {
      p->complete(req, res);
    } catch (const HttpError& e) {
      p->refuse_counted(res, e);
    } catch (const Error& e) {
      p->refuse_counted(res, {500, e.what(), "server_error", ""});
    }
  });
  im.server.Get("/v1/models",
                serve::guarded([p](const httplib::Request& req, httplib::Response& res) {
                  serve::check_api_key(p->api_key, req);
                  Json data = Json::array();
                  {
                    std::lock_guard lock(p->mutex);
                    for (const auto& [id, e] : p->episodes)
                      if (e.open)
                        data.push_back({{"id", id},
                                        {"object", "model"},
                                        {"created", serve::unix_seconds()},
                                        {"owned_by", "fp8rl"}});
                  }
                  serve::send_json(res, {{"object", "list"}, {"data", data}});
                }));
  const int port = serve::bind_server(im.server, "127.0.0.1", 0);
  CHECK(port > 0, "environment_server: cannot listen on 127.0.0.1 (any port)");
  im.url = fmt::format("http://127.0.0.1:{}/v1", port);
  im.listener = std::thread([p] { p->server.listen_after_bind(); });
  EnvironmentOptions eo;
  eo.command = options.command;
  eo.timeout_s = options.timeout_s;
  eo.kind = "environment_server";
  eo.variables = {"OPENAI_BASE_URL=" + im.url, "OPENAI_API_KEY=" + im.api_key};
  try {
    im.program = std::make_unique<EnvironmentProcess>(eo);
  } catch (...) {
    im.server.stop();
    im.listener.join();
    throw;
  }
}

AgentEnvironment::~AgentEnvironment() {
  Impl& im = *impl_;
  im.program.reset();
  im.server.stop();
  if (im.listener.joinable()) im.listener.join();
}

const std::string& AgentEnvironment::who() const {
  return impl_->program->who();
}

const std::string& AgentEnvironment::base_url() const {
  return impl_->url;
}

std::vector<AgentEpisodeResult> AgentEnvironment::run(Engine& engine,
                                                      const std::vector<AgentEpisodeInput>& inputs,
                                                      AgentStats& stats) {
  Impl& im = *impl_;
  // The round goes on through a Ctrl-C (the trainer stops between steps, as with `environment`);
  // a second one ends the process.
  auto queue = std::make_shared<serve::RequestQueue>(StopRequest());
  std::vector<EpisodeStart> starts;
  {
    std::lock_guard lock(im.mutex);
    im.episodes.clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
      Impl::Episode e;
      e.index = i;
      e.seed = inputs[i].seed;
      e.open = true;
      e.result.trajectory = AgentTrajectory(im.o.max_prompt_length, im.o.max_completion_length);
      CHECK(im.episodes.emplace(inputs[i].id, std::move(e)).second,
            "environment_server: episode id {} twice in a round (a bug)", inputs[i].id);
      starts.push_back({inputs[i].id, inputs[i].row});
    }
    im.queue = queue;
    im.engine = &engine;
  }
  const int64_t refused_before = im.refused;
  std::vector<double> rewards;
  std::exception_ptr failure;
  std::atomic<bool> cancel{false};
  std::thread talk([&] {
    try {
      rewards = im.program->run_agents(starts, [&] {
        CHECK(!cancel, "the round was stopped");
        return im.busy > 0;
      });
    } catch (...) {
      failure = std::current_exception();
    }
    queue->stop();
  });
  const EngineStats before = engine.stats();
  try {
    engine.serve(*queue);
  } catch (...) {
    cancel = true;
    queue->stop();
    talk.join();
    queue->fail_all("the round stopped");
    std::lock_guard lock(im.mutex);
    im.queue.reset();
    for (auto& [id, e] : im.episodes) e.open = false;
    throw;
  }
  talk.join();
  const EngineStats& after = engine.stats();
  stats.prefill_tokens += after.prefill_tokens - before.prefill_tokens;
  stats.prefix_hit_tokens +=
      after.prefix_hit_tokens -
      (after.region_takebacks == before.region_takebacks ? before.prefix_hit_tokens : 0);
  // Requests still running when the program answered end with an error.
  queue->fail_all("the episode's round ended (the program reported its rewards)");
  std::map<std::string, Impl::Episode> done;
  {
    std::lock_guard lock(im.mutex);
    im.queue.reset();
    for (auto& [id, e] : im.episodes) e.open = false;
    done.swap(im.episodes);
  }
  stats.refused += im.refused - refused_before;
  if (failure) std::rethrow_exception(failure);
  std::vector<AgentEpisodeResult> out(inputs.size());
  for (auto& [id, e] : done) {
    CHECK(e.result.trajectory.completions() > 0,
          "{}: episode \"{}\" got its reward without asking for a completion (each episode "
          "needs at least one chat completion with model = its id)",
          who(), id);
    e.result.reward = rewards[e.index];
    stats.requests += e.result.trajectory.completions();
    out[e.index] = std::move(e.result);
  }
  return out;
}

}  // namespace fp8rl
