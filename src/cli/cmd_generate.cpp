// fp8rl generate MODEL --prompts IN.jsonl --out OUT.jsonl [--adapter DIR] [--n N]
//                [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]
//                [--repetition-penalty R] [--stop S ...] [--seed S] [--ignore-eos]
//                [--logprobs K] [--fp8 ...] [--kv-dtype bf16|fp8] [--kv-memory GIB] [--device ...]
//                [--chat-template-kwargs JSON]
//
// Input: one JSON object per line with `prompt_ids` (list of ints), `prompt` (text, tokenized
// with the model's tokenizer, special tokens added as vLLM does) or `messages` (the chat
// template applied with the generation prompt; `chat_template_kwargs`, as vLLM's requests take
// it, over the command line's), and optionally any sampling key of SamplingParams
// (engine/sampling_params.h) to override the command line for that line; any other key is an
// error naming it. Every line is tokenized and checked against the model's config.json before
// the weights load.
// Output: one line per input line, in input order:
//   {"completions": [{"completion_ids": [...], "text": "...", "logprobs": [...],
//                     "finish_reason": "stop"|"length"}, ...n]}
// written to a temporary file renamed over OUT at the end, so a failed run leaves no output
// that looks complete.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/model_session.h"
#include "cli/output_path.h"
#include "cli/progress.h"
#include "core/check.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "core/spelling.h"
#include "engine/engine.h"
#include "formats/json_read.h"

namespace fp8rl::cli {

namespace {

struct GenerateOptions {
  SessionOptions session;
  std::string prompts, out, kv_dtype = "bf16";
  SamplingParams sampling;
  int64_t seed = -1;
  double kv_memory_gib = 0;
  int64_t max_num_seqs = 256, max_num_batched_tokens = 2048;
  bool no_prefix_caching = false;
};

struct Line {
  int64_t number = 0;           // in the file, from 1
  nlohmann::ordered_json json;  // keys in file order: chat templates see messages as written
};

// The keys a line may hold besides the sampling keys.
constexpr std::array<const char*, 4> kLineColumns = {"prompt_ids", "prompt", "messages",
                                                     "chat_template_kwargs"};

// A key that is neither a column nor a sampling key would change nothing (a misspelled
// "temprature" would sample at the default): an error naming it, as a misspelled config key is.
void check_line_keys(const nlohmann::ordered_json& line, const std::string& path, int64_t number) {
  const std::vector<std::string>& sampling = sampling_param_keys();
  for (const auto& [key, value] : line.items()) {
    if (std::find(kLineColumns.begin(), kLineColumns.end(), key) != kLineColumns.end() ||
        std::find(sampling.begin(), sampling.end(), key) != sampling.end())
      continue;
    std::vector<std::string> known(kLineColumns.begin(), kLineColumns.end());
    known.insert(known.end(), sampling.begin(), sampling.end());
    const std::optional<std::string> near = nearest_spelling(key, known);
    std::string list;
    for (const std::string& k : sampling) list += (list.empty() ? "" : ", ") + k;
    RAISE(
        "{} line {}: unknown key '{}'{}; a line holds one of prompt_ids, prompt, messages, "
        "optionally chat_template_kwargs, and sampling keys ({})",
        path, number, key, near ? fmt::format(" (did you mean '{}'?)", *near) : std::string(),
        list);
  }
}

// The non-blank lines of the prompts file, each a JSON object (read before the model loads,
// so a bad file fails at once).
std::vector<Line> read_lines(const std::string& path) {
  // An input file read by lines of bounded length (core/input_file.h): a FIFO or device is an
  // error at once, an endless line an error at its limit.
  constexpr uint64_t kMaxLineBytes = uint64_t{64} << 20;
  InputLines in(path, "--prompts file", kMaxLineBytes);
  std::vector<Line> lines;
  std::string text;
  while (in.next(text)) {
    const auto number = static_cast<int64_t>(in.line_number());
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    // The JSON reading policy (formats/json_read.h): a line nested without bound is an error,
    // not a recursion later (dump(), copies) that overflows the stack.
    nlohmann::ordered_json j;
    try {
      j = parse_ordered_json_text(text, "the line");
    } catch (const Error& e) {
      RAISE("{} line {}: not a JSON object ({})", path, number, e.what());
    }
    CHECK(j.is_object(), "{} line {}: not a JSON object", path, number);
    const int fields =
        int(j.contains("prompt_ids")) + int(j.contains("prompt")) + int(j.contains("messages"));
    CHECK(fields == 1, "{} line {}: needs exactly one of prompt_ids, prompt, messages", path,
          number);
    check_line_keys(j, path, number);
    lines.push_back({number, std::move(j)});
  }
  CHECK(!lines.empty(), "{} holds no prompts", path);
  return lines;
}

// One line's request: its prompt as ids, the command line's sampling with the line's keys.
GenerationRequest make_request(const ModelText& text, const nlohmann::ordered_json& line,
                               const SamplingParams& defaults) {
  GenerationRequest r;
  if (line.contains("prompt_ids")) {
    const nlohmann::ordered_json& ids = line["prompt_ids"];
    CHECK(ids.is_array() && !ids.empty(), "prompt_ids must be a non-empty list");
    for (const auto& v : ids) {
      CHECK(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX,
            "prompt id {} is not a token id", json_excerpt(v, 40));
      r.prompt_ids.push_back(v.get<int32_t>());
    }
  } else if (line.contains("prompt")) {
    CHECK(line["prompt"].is_string(), "prompt must be a string");
    r.prompt_ids = text.encode_text(line["prompt"].get<std::string>());
  } else {
    r.prompt_ids = text.encode_chat(line["messages"],
                                    line.value("chat_template_kwargs", nlohmann::ordered_json()));
  }
  CHECK(!line.contains("chat_template_kwargs") || line.contains("messages"),
        "chat_template_kwargs applies to a messages line only");
  CHECK(!r.prompt_ids.empty(), "the prompt is empty after tokenization");
  nlohmann::json overrides = nlohmann::json(line);
  for (const char* column : kLineColumns) overrides.erase(column);
  r.params = sampling_params_from_json(overrides, defaults);
  return r;
}

void write_outputs(const std::string& path, const std::vector<GenerationRequest>& requests,
                   const std::vector<RequestOutput>& outputs) {
  // Written to a temporary name and renamed over a regular file only (core/output_file.h).
  ReplacingFile file(path);
  {
    for (size_t i = 0; i < outputs.size(); ++i) {
      nlohmann::json line;
      line["completions"] = nlohmann::json::array();
      for (const CompletionOutput& c : outputs[i].completions) {
        nlohmann::json cj;
        cj["completion_ids"] = c.ids;
        cj["text"] = c.text;
        cj["logprobs"] = c.logprobs;
        if (requests[i].params.processed_logprobs) cj["processed_logprobs"] = c.processed_logprobs;
        if (requests[i].params.logprobs > 0) {
          nlohmann::json tops = nlohmann::json::array();
          for (const auto& step : c.top_logprobs) {
            nlohmann::json s = nlohmann::json::array();
            for (const auto& [id, lp] : step) s.push_back({{"id", id}, {"logprob", lp}});
            tops.push_back(std::move(s));
          }
          cj["top_logprobs"] = std::move(tops);
        }
        cj["finish_reason"] = finish_reason_name(c.finish);
        line["completions"].push_back(std::move(cj));
      }
      const std::string text = json_line(line) + '\n';
      file.write(text.data(), text.size());
    }
  }
  file.commit();
}

void run_generate(const GenerateOptions& o) {
  const KvDType kv_dtype = parse_kv_dtype(o.kv_dtype);
  CHECK(o.kv_memory_gib >= 0, "--kv-memory must be >= 0 GiB, got {}", o.kv_memory_gib);
  SamplingParams defaults = o.sampling;
  if (o.seed >= 0) defaults.seed = uint64_t(o.seed);
  defaults.validate();
  // Never over an input (`--out` the prompts file) nor a special file, checked before any work.
  check_output_file(o.out, {o.session.model, o.prompts, o.session.adapter});
  const std::vector<Line> lines = read_lines(o.prompts);

  // Every line's request before the weights load (config.json and the tokenizer suffice): a
  // prompt with no room for max_tokens in the model's context fails at once.
  ModelText text(o.session.model, o.session.chat_template_kwargs);
  std::vector<GenerationRequest> requests;
  for (const Line& line : lines) {
    try {
      requests.push_back(make_request(text, line.json, defaults));
      validate_request(requests.back(), text.config());
    } catch (const Error& e) {
      RAISE("{} line {}: {}", o.prompts, line.number, e.what());
    }
  }

  ModelSession session(o.session, std::move(text));
  EngineOptions eo;
  eo.kv_memory_bytes = size_t(o.kv_memory_gib * double(size_t(1) << 30));
  eo.kv_dtype = kv_dtype;
  eo.max_num_seqs = o.max_num_seqs;
  eo.max_num_batched_tokens = o.max_num_batched_tokens;
  eo.prefix_caching = !o.no_prefix_caching;
  eo.seed = o.seed >= 0 ? uint64_t(o.seed) : 0;
  const std::unique_ptr<Engine> engine = session.make_engine(eo);

  // What needs the engine: the KV pool's size, stop strings' tokenizer.
  for (size_t i = 0; i < requests.size(); ++i) {
    try {
      engine->validate(requests[i]);
    } catch (const Error& e) {
      RAISE("{} line {}: {}", o.prompts, lines[i].number, e.what());
    }
  }

  int64_t total = 0;
  for (const GenerationRequest& r : requests) total += int64_t(r.params.n) * r.params.max_tokens;
  std::vector<RequestOutput> outputs;
  {
    Progress bar("generate", total, "tok");
    outputs = engine->generate(requests, [&](int64_t done) { bar.update(done); });
  }
  write_outputs(o.out, requests, outputs);
  const EngineStats& s = engine->stats();
  fmt::print(stderr, "generate: {}, {} in {}; prefix-cache hits {}, {}, KV blocks peak {} of {}\n",
             counted(int64_t(requests.size()), "prompt"), counted(s.output_tokens, "output token"),
             counted(s.steps, "step"), counted(s.prefix_hit_tokens, "token"),
             counted(s.preemptions, "preemption"), s.kv_blocks_peak_used, s.kv_blocks);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* c = app.add_subcommand(
      "generate", "Generate completions for the prompts of a JSONL file (batched, paged KV)");
  c->add_option("model", o->session.model, "Hugging Face model directory")->required();
  c->add_option("--prompts", o->prompts,
                "JSONL: prompt_ids | prompt | messages per line, plus sampling overrides")
      ->required();
  c->add_option("--out", o->out, "Output JSONL, one line per prompt")->required();
  c->add_option("--adapter", o->session.adapter, kAdapterHelp);
  add_chat_template_kwargs_option(*c, o->session);
  SamplingParams& s = o->sampling;
  c->add_option("--n", s.n, "Completions per prompt")->capture_default_str();
  c->add_option("--max-tokens", s.max_tokens, "New tokens at most")->capture_default_str();
  c->add_option("--min-tokens", s.min_tokens, "New tokens before a stop may end")
      ->capture_default_str();
  add_sampling_filter_options(*c, s);
  c->add_option("--stop", s.stop, "Stop string (repeatable); not included in the text");
  c->add_option("--stop-token-ids", s.stop_token_ids, "Extra stop token ids");
  c->add_option("--seed", o->seed, "Random seed (default 0)");
  c->add_flag("--ignore-eos", s.ignore_eos, "Do not stop at the eos ids (benchmarks)");
  c->add_option("--logprobs", s.logprobs, "Top logprobs per token (0-20)")->capture_default_str();
  c->add_flag(
      "--processed-logprobs", s.processed_logprobs,
      "Also the logprobs under the temperature-scaled full vocabulary (what RL recomputes)");
  c->add_option("--fp8", o->session.fp8, kFp8Help)->capture_default_str();
  c->add_option(
       "--kv-dtype", o->kv_dtype,
       "KV cache dtype: bf16 (the activation dtype) or fp8 (e4m3, a scale per token and head)")
      ->capture_default_str();
  c->add_option("--kv-memory", o->kv_memory_gib,
                "KV cache GiB (default: 90% of free device memory on CUDA, 1 GiB on the CPU)");
  c->add_option("--max-num-seqs", o->max_num_seqs, "Sequences per step")->capture_default_str();
  c->add_option("--max-num-batched-tokens", o->max_num_batched_tokens,
                "Tokens per step (chunked prefill budget)")
      ->capture_default_str();
  c->add_flag("--no-prefix-caching", o->no_prefix_caching, "Never reuse KV across requests");
  c->add_option("--device", o->session.device, "cpu or cuda")->capture_default_str();
  add_gpu_memory_option(*c, o->session.gpu_memory);
  c->callback([o] { run_generate(*o); });
}

}  // namespace fp8rl::cli
