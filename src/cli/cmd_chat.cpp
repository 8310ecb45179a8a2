// fp8rl chat MODEL [--adapter DIR] [--system TEXT] [--max-tokens N] [--temperature T]
//            [--top-k K] [--top-p P] [--min-p P] [--repetition-penalty R] [--seed S]
//            [--fp8 ...] [--kv-dtype bf16|fp8] [--kv-memory GIB] [--device cpu|cuda]
//
// An interactive conversation in the terminal: each line read from stdin is a user turn
// ("/reset" clears the history, "/exit" or end of input ends); the model's chat template is
// applied to the whole history with the generation prompt, and the reply is streamed to stdout
// as its tokens are sampled (engine's per-token callback -> tok::IncrementalDecoder), one line
// per reply. The "> " prompt and notes go to stderr, and only when stdin is a terminal, so a
// scripted session's stdout is the replies alone.
//
// One engine serves the whole session: its prefix cache keeps the KV of the history, so a turn
// prefills only what is new. max_tokens is clamped to what is left of the model's context.
//
// At a terminal the lines are read through libedit: line editing, and the lines entered (this
// session's and earlier ones') under the arrow keys, kept in $XDG_STATE_HOME/fp8rl/chat_history
// (~/.local/state/fp8rl/chat_history), best effort.
#include <editline/readline.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/model_session.h"
#include "core/check.h"
#include "core/spelling.h"
#include "engine/engine.h"
#include "tokenizer/incremental_decoder.h"

namespace fp8rl::cli {

namespace {

struct ChatOptions {
  SessionOptions session;
  std::string system;
  SamplingParams sampling;
  int64_t seed = -1;
  double kv_memory_gib = 0;
  std::string kv_dtype = "bf16";
};

// The user's lines: at a terminal through libedit, from a pipe or file by plain getline (a
// script's input wants no echo, no escape sequences and no history file).
class LineReader {
 public:
  explicit LineReader(bool interactive) : interactive_(interactive) {
    if (!interactive_) return;
    rl_readline_name = "fp8rl";  // ~/.editrc settings under "fp8rl:"
    rl_instream = stdin;
    rl_outstream = stderr;      // the prompt and the echo: stdout carries the replies alone
    rl_inhibit_completion = 1;  // Tab inserts itself: a conversation has no file names to complete
    using_history();
    stifle_history(kHistoryLines);
    history_file_ = history_path();
    if (!history_file_.empty()) read_history(history_file_.c_str());  // none the first time
  }

  // The next line, without its line end; false at the end of the input.
  bool next(std::string& line) {
    if (!interactive_) {
      if (!std::getline(std::cin, line)) return false;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return true;
    }
    char* text = readline("> ");
    if (text == nullptr) {  // Ctrl-D: end the prompt's line as the shell does
      std::fputc('\n', stderr);
      return false;
    }
    line = text;
    std::free(text);
    if (line.find_first_not_of(" \t") == std::string::npos) return true;
    add_history(line.c_str());
    // Written after each line, so that a session ended by a signal keeps what it read; private,
    // for it holds the conversations.
    if (!history_file_.empty() && write_history(history_file_.c_str()) == 0)
      ::chmod(history_file_.c_str(), S_IRUSR | S_IWUSR);
    return true;
  }

 private:
  static constexpr int kHistoryLines = 1000;

  // $XDG_STATE_HOME/fp8rl/chat_history (XDG's base directories: a relative XDG_STATE_HOME is
  // ignored, the default is ~/.local/state), its folder created; empty where there is none.
  static std::string history_path() {
    namespace fs = std::filesystem;
    const char* state = std::getenv("XDG_STATE_HOME");
    const char* home = std::getenv("HOME");
    fs::path dir;
    if (state != nullptr && state[0] == '/')
      dir = state;
    else if (home != nullptr && home[0] != '\0')
      dir = fs::path(home) / ".local" / "state";
    else
      return "";
    dir /= "fp8rl";
    std::error_code ec;
    fs::create_directories(dir, ec);
    return ec ? "" : (dir / "chat_history").string();
  }

  bool interactive_;
  std::string history_file_;
};

void write_out(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// Generates the reply to `messages`, streaming it to stdout; returns its text.
std::string reply(ModelSession& session, Engine& engine, const nlohmann::ordered_json& messages,
                  const SamplingParams& defaults, bool interactive) {
  GenerationRequest request;
  request.prompt_ids = session.encode_chat(messages);
  request.params = defaults;
  const ModelConfig& config = session.model().config();
  check_context(config, int64_t(request.prompt_ids.size()) + 1,
                fmt::format("the conversation of {} plus a reply's first token",
                            counted(int64_t(request.prompt_ids.size()), "token")),
                "/reset starts a new one");
  const int64_t room = config.max_context - int64_t(request.prompt_ids.size());
  request.params.max_tokens = int(std::min<int64_t>(request.params.max_tokens, room));
  tok::IncrementalDecoder decoder(session.require_tokenizer("chat"), /*skip_special=*/true);
  std::string text;
  const std::vector<RequestOutput> out =
      engine.generate({&request, 1}, {}, [&](size_t, int, int32_t token) {
        const std::string piece = decoder.push(token);
        text += piece;
        write_out(piece);
      });
  const std::string rest = decoder.finish();
  text += rest;
  write_out(rest + "\n");
  if (interactive && out[0].completions[0].finish == FinishReason::length)
    fmt::print(stderr, "[stopped at {}]\n", counted(request.params.max_tokens, "token"));
  return text;
}

void run_chat(const ChatOptions& o) {
  CHECK(o.kv_memory_gib >= 0, "--kv-memory must be >= 0 GiB, got {}", o.kv_memory_gib);
  const KvDType kv_dtype = parse_kv_dtype(o.kv_dtype);
  SamplingParams defaults = o.sampling;
  CHECK(defaults.n == 1, "chat draws one reply per turn");
  // Without --seed every session draws differently; with it, a turn equals `fp8rl generate`
  // on the same messages with the same --seed.
  defaults.seed = o.seed >= 0 ? uint64_t(o.seed) : uint64_t(std::random_device{}());
  defaults.validate();

  ModelSession session(o.session);
  session.require_tokenizer("chat");
  nlohmann::ordered_json start = nlohmann::ordered_json::array();
  if (!o.system.empty()) start.push_back({{"role", "system"}, {"content", o.system}});
  session.render_chat(start);  // no chat template, or one that fails: say so before the first turn

  EngineOptions eo;
  eo.kv_memory_bytes = size_t(o.kv_memory_gib * double(size_t(1) << 30));
  eo.kv_dtype = kv_dtype;
  eo.max_num_seqs = 1;
  const std::unique_ptr<Engine> engine = session.make_engine(eo);

  const bool interactive = ::isatty(STDIN_FILENO) != 0;
  if (interactive)
    std::fprintf(stderr, "fp8rl chat: %s (/reset clears the history, /exit or Ctrl-D ends)\n",
                 o.session.model.c_str());
  nlohmann::ordered_json messages = start;
  LineReader reader(interactive);
  std::string line;
  while (reader.next(line)) {
    if (line == "/exit") break;
    if (line == "/reset") {
      messages = start;
      if (interactive) std::fputs("[history cleared]\n", stderr);
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    try {
      const std::string text = reply(session, *engine, messages, defaults, interactive);
      messages.push_back({{"role", "assistant"}, {"content", text}});
    } catch (const Error& e) {
      // At the terminal a turn that cannot run (the context is full) leaves the session
      // going; a script stops with the error.
      if (!interactive) throw;
      messages.erase(messages.size() - 1);
      std::fprintf(stderr, "fp8rl: error: %s\n", error_message(e).c_str());
    }
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  o->sampling.max_tokens = 1024;
  CLI::App* c = app.add_subcommand(
      "chat", "Interactive conversation: user turns from stdin, streamed replies on stdout");
  c->add_option("model", o->session.model,
                "Hugging Face model directory (with tokenizer.json and a chat template)")
      ->required();
  c->add_option("--adapter", o->session.adapter, kAdapterHelp);
  c->add_option("--system", o->system, "System message that starts the conversation");
  add_chat_template_kwargs_option(*c, o->session);
  SamplingParams& s = o->sampling;
  c->add_option("--max-tokens", s.max_tokens,
                "New tokens per reply at most (and what the context leaves)")
      ->capture_default_str();
  add_sampling_filter_options(*c, s);
  c->add_option("--seed", o->seed, "Random seed (default: a new one per session)");
  c->add_option("--fp8", o->session.fp8, kFp8Help)->capture_default_str();
  c->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype: bf16 or fp8")->capture_default_str();
  c->add_option("--kv-memory", o->kv_memory_gib,
                "KV cache GiB (default: 90% of free device memory on CUDA, less on the CPU)");
  c->add_option("--device", o->session.device, "cpu or cuda")->capture_default_str();
  c->callback([o] { run_chat(*o); });
}

}  // namespace fp8rl::cli
