// fp8rl serve MODEL [--adapter DIR | --lora-modules NAME=DIR] [--host 127.0.0.1] [--port 8000]
//            [--api-key KEY] [--served-model-name NAME] [--chat-template-kwargs JSON]
//            [--fp8 ...] [--kv-dtype bf16|fp8] [--kv-memory GIB] [--max-num-seqs N]
//            [--device cpu|cuda]
//
// An OpenAI-compatible server over the one engine (serve_routes.h has the routes). The main
// thread runs Engine::serve: every live request's sequences are batched continuously in its
// steps, and requests join and leave between steps; cpp-httplib's handler threads parse
// requests and wait on their channels (serve/request_queue.h). Ctrl-C or SIGTERM stops it:
// the engine ends every live request, open requests get an error, the listener closes.
//
// One adapter at a time: the engine applies its adapter to every sequence of a step, so a
// server serves the base model or one adapter (vLLM's --lora-modules with one module, whose
// name is then the model name); a second module is an error.
#include <httplib.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/model_session.h"
#include "cli/serve_routes.h"
#include "core/check.h"
#include "core/interrupt.h"
#include "engine/engine.h"
#include "serve/http_api.h"
#include "serve/request_queue.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tool_calls.h"

namespace fp8rl::cli {

namespace {

struct ServeOptions {
  SessionOptions session;
  std::vector<std::string> lora_modules;
  std::string host = "127.0.0.1", api_key, served_model_name, kv_dtype = "bf16";
  int port = 8000;
  double kv_memory_gib = 0;
  int64_t max_num_seqs = 256;
  int http_threads = 256;
};

void run_serve(ServeOptions o) {
  CHECK(o.port >= 0 && o.port <= 65535, "--port must be in [0, 65535], got {}", o.port);
  CHECK(o.kv_memory_gib >= 0, "--kv-memory must be >= 0 GiB, got {}", o.kv_memory_gib);
  CHECK(o.max_num_seqs >= 1, "--max-num-seqs must be >= 1, got {}", o.max_num_seqs);
  CHECK(o.http_threads >= 1, "--http-threads must be >= 1, got {}", o.http_threads);
  const KvDType kv_dtype = parse_kv_dtype(o.kv_dtype);
  std::string name = o.served_model_name.empty() ? o.session.model : o.served_model_name;
  if (!o.lora_modules.empty()) {
    CHECK(o.lora_modules.size() == 1,
          "--lora-modules: {} adapters given; the engine applies one adapter to every sequence "
          "of a step, so one server serves one adapter (run a server per adapter)",
          o.lora_modules.size());
    CHECK(o.session.adapter.empty(), "--lora-modules and --adapter both name an adapter: give one");
    const std::string& m = o.lora_modules[0];
    const size_t eq = m.find('=');
    CHECK(eq != std::string::npos && eq > 0 && eq + 1 < m.size(),
          "--lora-modules: expected NAME=DIR, got '{}'", m);
    name = m.substr(0, eq);
    o.session.adapter = m.substr(eq + 1);
  }

  ModelSession session(o.session);
  ServeContext c;
  c.text = &session.text();
  c.model_name = name;
  c.api_key = o.api_key;
  c.max_context = session.model().config().max_context;
  c.stop_ids = session.eos_ids();
  if (session.tokenizer() != nullptr) {
    // Loaded before the handler threads start; a model without a template serves completions.
    try {
      c.tool_format = tool_call_format_of_template(session.text().chat_template_source());
      c.has_chat_template = true;
    } catch (const Error& e) {
      std::fprintf(stderr, "fp8rl serve: no chat template (%s): /v1/chat/completions is off\n",
                   e.what());
    }
  }
  EngineOptions eo;
  eo.kv_memory_bytes = size_t(o.kv_memory_gib * double(size_t(1) << 30));
  eo.kv_dtype = kv_dtype;
  eo.max_num_seqs = o.max_num_seqs;
  const std::unique_ptr<Engine> engine = session.make_engine(eo);
  c.engine = engine.get();

  InterruptHandler interrupt(
      "\nfp8rl serve: stopping: live requests end with an error (interrupt again to exit at "
      "once)\n");
  serve::RequestQueue queue(interrupt.stop_request());
  c.queue = &queue;
  httplib::Server server;
  // A handler thread serves one connection at a time and a stream holds its thread to the end:
  // the pool bounds the clients answered at once.
  serve::configure_server(server, o.http_threads);
  add_serve_routes(server, c);
  int port = o.port;
  if (port == 0) {
    port = serve::bind_server(server, o.host, 0);
    CHECK(port > 0, "cannot listen on {} (any port)", o.host);
  } else {
    CHECK(serve::bind_server(server, o.host, port) > 0,
          "cannot listen on {}:{} (in use, or not an address here)", o.host, port);
  }
  std::thread http([&server] { server.listen_after_bind(); });
  std::printf("fp8rl serve: %s on http://%s:%d/v1 (Ctrl-C stops)\n", name.c_str(), o.host.c_str(),
              port);
  std::fflush(stdout);
  auto shut_down = [&] {
    queue.fail_all("the server is shutting down");
    server.stop();
    http.join();
  };
  try {
    engine->serve(queue);
  } catch (...) {
    shut_down();
    throw;
  }
  shut_down();
  std::fprintf(stderr, "fp8rl serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* c = app.add_subcommand(
      "serve", "OpenAI-compatible server (chat and text completions) over the generation engine");
  c->add_option("model", o->session.model, "Hugging Face model directory")->required();
  c->add_option("--adapter", o->session.adapter, kAdapterHelp);
  c->add_option("--lora-modules", o->lora_modules,
                "NAME=DIR: a PEFT adapter served under the model name NAME (one per server)");
  c->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  c->add_option("--port", o->port, "Port to listen on (0: any free port, printed)")
      ->capture_default_str();
  c->add_option("--api-key", o->api_key, "Require 'Authorization: Bearer KEY' on /v1 requests");
  c->add_option("--served-model-name", o->served_model_name,
                "The model name requests give (default: MODEL as given)");
  add_chat_template_kwargs_option(*c, o->session);
  c->add_option("--fp8", o->session.fp8, kFp8Help)->capture_default_str();
  c->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype: bf16 or fp8")->capture_default_str();
  c->add_option("--kv-memory", o->kv_memory_gib,
                "KV cache GiB (default: 90% of free device memory on CUDA, less on the CPU)");
  c->add_option("--max-num-seqs", o->max_num_seqs, "Sequences in one engine step at most")
      ->capture_default_str();
  c->add_option("--http-threads", o->http_threads,
                "Connections answered at once (a stream holds one to its end)")
      ->capture_default_str();
  c->add_option("--device", o->session.device, "cpu or cuda")->capture_default_str();
  add_gpu_memory_option(*c, o->session.gpu_memory);
  c->callback([o] { run_serve(*o); });
}

}  // namespace fp8rl::cli
