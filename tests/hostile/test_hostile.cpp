// The hostile-input suite (issue 12, item 3): every class of input a hostile user found to crash,
// hang, exhaust memory, destroy files or mislead (and the fuzzers' kept findings), generated
// fresh per case and fed to the fp8rl binary under an address-space limit, a CPU limit and a
// wall clock. Each case must end in a clean one-line error naming the problem or in a correct
// success, within its memory bound, with its inputs and pre-existing outputs unchanged
// (verdict.h). The runner's own negative controls are in test_verdict.cpp.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "hostile/hostile_inputs.h"
#include "hostile/verdict.h"
#include "process_run.h"

namespace fp8rl::test::hostile {
namespace {

// A normal run of the demo model (generate, sft) needs 100-200 MB of address space with two
// OpenMP threads (measured: generate fails under 100 MB and runs under 200 MB); 2 GiB is ten
// times that. OMP_NUM_THREADS pins the thread count, so that the bound does not depend on the
// machine's cores, and passive waiting keeps idle threads from spending the CPU limit on a
// loaded machine. The slowest clean run (the GRPO control) takes ~1.5 s alone and took 11 s of
// wall time on the shared 2-core machine while test_cli ran beside it: 40 s of CPU stops a busy
// hang, 60 s of wall time a blocked one, with room for a loaded CI machine.
constexpr rlim_t kAddressSpace = rlim_t{2} << 30;
constexpr rlim_t kCpuSeconds = 40;
constexpr double kWallSeconds = 60;

ProcessLimits limits() {
  ProcessLimits l;
  l.address_space = kAddressSpace;
  l.cpu_seconds = kCpuSeconds;
  l.wall_seconds = kWallSeconds;
  l.env = {{"OMP_NUM_THREADS", "2"}, {"OMP_WAIT_POLICY", "PASSIVE"}};
  return l;
}

ProcessResult fp8rl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{FP8RL_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, limits());
}

// One case: the command (after `fp8rl`), what must come of it, the paths that must be unchanged
// (inputs and outputs that existed before), the model directories that must still load after
// it, and what to undo (a writer process to stop).
struct HostileRun {
  HostileRun(std::vector<std::string> a, Expect e, std::vector<fs::path> u)
      : args(std::move(a)), expect(std::move(e)), unchanged(std::move(u)) {}
  std::vector<std::string> args;
  Expect expect;
  std::vector<fs::path> unchanged;
  std::vector<fs::path> must_load;
  std::function<void()> cleanup;
};

struct Case {
  std::string name;
  std::function<HostileRun(const fs::path& dir)> make;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

Expect error(std::string fragment) {
  Expect e;
  e.fragment = std::move(fragment);
  return e;
}

Expect success(std::function<std::string(const ProcessResult&)> check) {
  Expect e;
  e.outcome = Outcome::success;
  e.success = std::move(check);
  return e;
}

std::function<std::string(const ProcessResult&)> stdout_has(const std::string& text) {
  return [text](const ProcessResult& r) {
    return r.out.find(text) != std::string::npos ? "" : "stdout lacks '" + text + "'";
  };
}

// ---- the inputs of each command ----

const std::string kSftRow = R"({"prompt": "What is 2+2? ", "completion": "4"})";
const std::string kGrpoRow = R"({"messages": [{"role": "user", "content": "What is 1+1?"}], )"
                             R"("answer": "2"})";
const std::string kDpoRow = R"({"prompt": "What is 2+2? ", "chosen": "4", "rejected": "5"})";

std::vector<std::string> info(const fs::path& model) {
  return {"info", model};
}

std::vector<std::string> tokenize(const fs::path& model, const fs::path& text) {
  return {"tokenize", model, "--text-file", text};
}

std::vector<std::string> chat_template(const fs::path& model, const fs::path& messages) {
  return {"chat-template", model, "--messages-file", messages};
}

fs::path messages_file(const fs::path& dir) {
  write_bytes(dir / "messages.json", R"([{"role": "user", "content": "hi"}])");
  return dir / "messages.json";
}

fs::path text_file(const fs::path& dir) {
  write_bytes(dir / "text.txt", "What is 2+2?");
  return dir / "text.txt";
}

std::vector<std::string> sft(const fs::path& model, const fs::path& data, const fs::path& out) {
  return {"sft",         model, "--data",       data, "--out",    out,
          "--max-steps", "1",   "--batch-size", "1",  "--device", "cpu"};
}

std::vector<std::string> dpo(const fs::path& model, const fs::path& data, const fs::path& out) {
  return {"dpo",         model, "--data",       data, "--out",    out,
          "--max-steps", "1",   "--batch-size", "1",  "--device", "cpu"};
}

// A GRPO run config naming the model and dataset; `extra` is appended (YAML).
fs::path grpo_config(const fs::path& dir, const fs::path& model, const fs::path& data,
                     const std::string& extra = "") {
  write_bytes(dir / "run.yaml", "model: " + model.string() + "\ndata: " + data.string() +
                                    "\noutput_dir: " + (dir / "run").string() +
                                    "\nrewards:\n  - {type: answer_match, mode: numeric}\n" +
                                    extra);
  return dir / "run.yaml";
}

std::vector<std::string> grpo(const fs::path& config) {
  return {"grpo", "--config",
          config, "--max-steps",
          "1",    "--num-generations",
          "2",    "--per-device-train-batch-size",
          "2",    "--max-completion-length",
          "2",    "--device",
          "cpu"};
}

std::vector<std::string> generate(const fs::path& model, const fs::path& prompts,
                                  const fs::path& out) {
  return {"generate", model, "--prompts", prompts, "--out", out, "--max-tokens", "2"};
}

void edit_config(const fs::path& model, const std::function<void(ojson&)>& edit) {
  edit_json(model / "config.json", edit);
}

// ---- deep JSON (100k levels) in every JSON the CLI reads ----

constexpr int kDeep = 100000;

std::vector<Case> deep_json_cases() {
  const std::string deep = deep_array(kDeep);
  return {
      {"DeepJson_SafetensorsHeader",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors::write_with_header(m / "model.safetensors",
                                           R"({"__metadata__": {"a": )" + deep + "}}", "");
         return HostileRun{info(m), error("nest"), {m}};
       }},
      {"DeepJson_ConfigJson",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(m / "config.json", R"({"architectures": )" + deep + "}");
         return HostileRun{info(m), error("limit of 256"), {m}};
       }},
      {"DeepJson_TokenizerJsonNormalizerSequence",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         std::string seq;
         for (int i = 0; i < kDeep; ++i) seq += R"({"type": "Sequence", "normalizers": [)";
         seq += R"({"type": "NFC"})";
         for (int i = 0; i < kDeep; ++i) seq += "]}";
         const std::string tok = read_bytes(m / "tokenizer.json");
         ojson j = ojson::parse(tok);
         j["normalizer"] = "@@";
         std::string text = j.dump();
         text.replace(text.find("\"@@\""), 4, seq);
         write_bytes(m / "tokenizer.json", text);
         return HostileRun{tokenize(m, text_file(d)), error("limit of 256"), {m, d / "text.txt"}};
       }},
      {"DeepJson_TokenizerConfig",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(m / "tokenizer_config.json", R"({"chat_template": "x", "y": )" + deep + "}");
         return HostileRun{
             chat_template(m, messages_file(d)), error("limit of 256"), {m, d / "messages.json"}};
       }},
      {"DeepJson_MessagesFile",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "messages.json", deep);
         return HostileRun{chat_template(m, d / "messages.json"),
                           error("limit of 256"),
                           {m, d / "messages.json"}};
       }},
      {"DeepJson_SftRow",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kSftRow + "\n" + R"({"text": )" + deep + "}\n");
         return HostileRun{
             sft(m, d / "data.jsonl", d / "out"), error(":2:"), {m, d / "data.jsonl"}};
       }},
      {"DeepJson_GrpoRow",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n" + R"({"answer": )" + deep + "}\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         return HostileRun{grpo(cfg), error(":2:"), {m, d / "data.jsonl", cfg}};
       }},
      {"DeepJson_DpoRow",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kDpoRow + "\n" + R"({"chosen": )" + deep + "}\n");
         return HostileRun{
             dpo(m, d / "data.jsonl", d / "out"), error(":2:"), {m, d / "data.jsonl"}};
       }},
      {"DeepJson_GeneratePromptsLine",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": )" + deep + "}\n");
         return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                           error("line 1"),
                           {m, d / "prompts.jsonl"}};
       }},
      {"DeepJson_RunConfigAsJson",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         // A JSON config (YAML's flow style): the rewards nested 100k deep.
         write_bytes(d / "run.json", R"({"model": ")" + m.string() + R"(", "data": ")" +
                                         (d / "data.jsonl").string() + R"(", "rewards": )" + deep +
                                         "}");
         return HostileRun{
             grpo(d / "run.json"),
             error("run.json:1: not valid YAML: nested deeper than the parser's limit"),
             {m, d / "data.jsonl", d / "run.json"}};
       }},
  };
}

// ---- sizes: overflowing products, negative and zero sizes, absurd counts ----

HostileRun config_case(const fs::path& d, const std::function<void(ojson&)>& edit,
                       const std::string& fragment, std::vector<std::string> args = {}) {
  const fs::path m = copy_demo_model(d / "model");
  edit_config(m, edit);
  if (args.empty()) args = {"logits", m, "--ids", "1,2,3", "--out", d / "x.npy"};
  return HostileRun{args, error(fragment), {m}};
}

std::vector<Case> size_cases() {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  return {
      {"Sizes_HeadsTimesHeadDimOverflows",
       [](const fs::path& d) {
         return config_case(
             d,
             [](ojson& c) {
               c["num_attention_heads"] = int64_t{1} << 32;
               c["num_key_value_heads"] = int64_t{1} << 32;
               c["head_dim"] = int64_t{1} << 32;
             },
             "num_attention_heads");
       }},
      {"Sizes_HiddenTimesVocabOverflows",
       [](const fs::path& d) {
         return config_case(
             d,
             [](ojson& c) {
               c["hidden_size"] = int64_t{1} << 40;
               c["vocab_size"] = int64_t{1} << 40;
             },
             "vocab_size = 1099511627776 is outside [1, ");
       }},
      {"Sizes_HiddenSizeInt64Min",
       [kMin](const fs::path& d) {
         return config_case(
             d, [kMin](ojson& c) { c["hidden_size"] = kMin; },
             "hidden_size = -9223372036854775808 is outside [1, 65536]");
       }},
      {"Sizes_VocabSizeZero",
       [](const fs::path& d) {
         return config_case(
             d, [](ojson& c) { c["vocab_size"] = 0; }, "vocab_size");
       }},
      {"Sizes_NegativeIntermediateSize",
       [](const fs::path& d) {
         return config_case(
             d, [](ojson& c) { c["intermediate_size"] = -384; }, "intermediate_size");
       }},
      {"Sizes_BillionLayers",
       [](const fs::path& d) {
         HostileRun r = config_case(
             d, [](ojson& c) { c["num_hidden_layers"] = 1000000000; }, "num_hidden_layers");
         r.expect.max_rss_mb = 256;
         return r;
       }},
      {"Sizes_MaxPositionEmbeddingsZero",
       [](const fs::path& d) {
         return config_case(
             d, [](ojson& c) { c["max_position_embeddings"] = 0; }, "max_position_embeddings");
       }},
      {"Sizes_MaxPositionEmbeddingsNegative",
       [](const fs::path& d) {
         return config_case(
             d, [](ojson& c) { c["max_position_embeddings"] = -5; }, "max_position_embeddings");
       }},
      {"Sizes_PromptLongerThanContext",
       [](const fs::path& d) {
         std::string ids = "1";
         for (int i = 0; i < 300; ++i) ids += ",1";
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{{"logits", m, "--ids", ids, "--out", d / "x.npy"},
                           error("more than the model's max_position_embeddings 256"),
                           {m}};
       }},
      {"Sizes_GeneratePromptLongerThanContext",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", ojson{{"prompt", std::string(2000, 'a')}}.dump() + "\n");
         return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                           error("exceeds the model's context of 256"),
                           {m, d / "prompts.jsonl"}};
       }},
      {"Sizes_TokenizerVocabId4e8",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         edit_json(m / "tokenizer.json", [](ojson& t) { t["model"]["vocab"]["zz"] = 400000000; });
         HostileRun r{tokenize(m, text_file(d)), error("400000000"), {m, d / "text.txt"}};
         r.expect.max_rss_mb = 256;
         return r;
       }},
  };
}

// ---- special files in place of every file the CLI reads ----

struct SpecialTarget {
  const char* name;
  // Makes the case with `victim` (the path to replace) chosen by the target.
  std::function<HostileRun(const fs::path& d, fs::path& victim)> make;
};

std::vector<SpecialTarget> special_targets() {
  return {
      {"ConfigJson",
       [](const fs::path& d, fs::path& victim) {
         const fs::path m = copy_demo_model(d / "model");
         victim = m / "config.json";
         return HostileRun{info(m), error("config.json"), {m}};
       }},
      {"ModelSafetensors",
       [](const fs::path& d, fs::path& victim) {
         const fs::path m = copy_demo_model(d / "model");
         victim = m / "model.safetensors";
         // The file is named as what it is (it was "neither model.safetensors nor
         // model.safetensors.index.json found" for a directory or a symlink loop there).
         return HostileRun{info(m), error("safetensors file '" + victim.string() + "'"), {m}};
       }},
      {"TokenizerJson",
       [](const fs::path& d, fs::path& victim) {
         const fs::path m = copy_demo_model(d / "model");
         victim = m / "tokenizer.json";
         return HostileRun{tokenize(m, text_file(d)), error("tokenizer.json"), {m, d / "text.txt"}};
       }},
      {"SftDataset",
       [](const fs::path& d, fs::path& victim) {
         const fs::path m = copy_demo_model(d / "model");
         victim = d / "data.jsonl";
         return HostileRun{sft(m, victim, d / "out"), error("data.jsonl"), {m, victim}};
       }},
      {"GeneratePrompts",
       [](const fs::path& d, fs::path& victim) {
         const fs::path m = copy_demo_model(d / "model");
         victim = d / "prompts.jsonl";
         return HostileRun{
             generate(m, victim, d / "out.jsonl"), error("prompts.jsonl"), {m, victim}};
       }},
      {"TextFile",
       [](const fs::path& d, fs::path& victim) {
         const fs::path m = copy_demo_model(d / "model");
         victim = d / "text.txt";
         return HostileRun{tokenize(m, victim), error("text.txt"), {m, victim}};
       }},
      {"MessagesFile",
       [](const fs::path& d, fs::path& victim) {
         const fs::path m = copy_demo_model(d / "model");
         victim = d / "messages.json";
         return HostileRun{chat_template(m, victim), error("messages.json"), {m, victim}};
       }},
      {"RunConfig",
       [](const fs::path& d, fs::path& victim) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         victim = d / "run.yaml";
         return HostileRun{grpo(victim), error("run.yaml"), {m, d / "data.jsonl", victim}};
       }},
  };
}

std::vector<Case> special_file_cases() {
  std::vector<Case> cases;
  for (const SpecialTarget& t : special_targets()) {
    for (Special s :
         {Special::fifo, Special::directory, Special::dev_zero, Special::symlink_loop}) {
      cases.push_back(
          {std::string("Special_") + t.name + "_" + special_name(s), [t, s](const fs::path& d) {
             fs::path victim;
             HostileRun r = t.make(d, victim);
             make_special(victim, s);
             if (s == Special::symlink_loop) r.unchanged.push_back(victim.string() + ".loop");
             return r;
           }});
    }
  }
  return cases;
}

// ---- endless inputs ----

// A child of this test writing JSONL rows into the FIFO for as long as anyone reads it.
std::function<void()> start_endless_writer(const fs::path& fifo, const std::string& row) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    std::string block;
    while (block.size() < 65536) block += row + "\n";
    while (fd >= 0 && ::write(fd, block.data(), block.size()) > 0) {
    }
    ::_exit(0);
  }
  return [pid] {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  };
}

std::vector<Case> endless_cases() {
  constexpr uint64_t kHuge = uint64_t{8} << 30;  // sparse: no disk
  return {
      {"Endless_FifoFedForeverAsSftDataset",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         make_fifo(d / "data.jsonl");
         HostileRun r{
             sft(m, d / "data.jsonl", d / "out"), error("data.jsonl"), {m, d / "data.jsonl"}};
         r.cleanup = start_endless_writer(d / "data.jsonl", kSftRow);
         return r;
       }},
      {"Endless_SparseLineAsSftDataset",
       [kHuge](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         make_sparse(d / "data.jsonl", kSftRow + "\n", kHuge);
         return HostileRun{
             sft(m, d / "data.jsonl", d / "out"), error("data.jsonl"), {m, d / "data.jsonl"}};
       }},
      {"Endless_SparseLineAsGrpoDataset",
       [kHuge](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         make_sparse(d / "data.jsonl", kGrpoRow + "\n", kHuge);
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         return HostileRun{grpo(cfg), error("data.jsonl"), {m, d / "data.jsonl", cfg}};
       }},
      {"Endless_SparseLineAsDpoDataset",
       [kHuge](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         make_sparse(d / "data.jsonl", kDpoRow + "\n", kHuge);
         return HostileRun{
             dpo(m, d / "data.jsonl", d / "out"), error("data.jsonl"), {m, d / "data.jsonl"}};
       }},
      {"Endless_SparseLineAsGeneratePrompts",
       [kHuge](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         make_sparse(d / "prompts.jsonl",
                     R"({"prompt_ids": [1]})"
                     "\n",
                     kHuge);
         return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                           error("prompts.jsonl"),
                           {m, d / "prompts.jsonl"}};
       }},
      {"Endless_SparseTextFile",
       [kHuge](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         make_sparse(d / "text.txt", "hello", kHuge);
         return HostileRun{tokenize(m, d / "text.txt"), error("text.txt"), {m, d / "text.txt"}};
       }},
      {"Endless_SparseConfigJson",
       [kHuge](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         make_sparse(m / "config.json", "{", kHuge);
         return HostileRun{info(m), error("config.json"), {m}};
       }},
  };
}

// ---- safetensors: 200k tensors (linear parsing), and a header claiming absurd sizes ----

std::vector<Case> safetensors_cases() {
  return {
      {"Safetensors_200kTensorsParseInLinearTime",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         // The header as text (an ordered_json object inserts in linear time: 200k keys would
         // take the generator a minute): the demo's entries, then 200k of 4 bytes each.
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         std::string body;
         for (const auto& [name, entry] : raw.header.items())
           if (name != "__metadata__") body += raw.data[name];
         std::string header = raw.header.dump();
         header.pop_back();  // the closing brace
         for (int i = 0; i < 200000; ++i) {
           header += ",\"extra." + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1]," +
                     "\"data_offsets\":[" + std::to_string(body.size()) + "," +
                     std::to_string(body.size() + 4) + "]}";
           body += std::string(4, '\0');
         }
         RawSafetensors::write_with_header(m / "model.safetensors", header + "}", body);
         HostileRun r{info(m), error("unexpected tensors"), {m}};
         r.expect.max_seconds = 15;  // quadratic parsing took minutes
         return r;
       }},
      {"Safetensors_HeaderLengthBeyondFile",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         std::string bytes = read_bytes(m / "model.safetensors");
         const uint64_t n = uint64_t{1} << 62;
         std::memcpy(bytes.data(), &n, 8);
         write_bytes(m / "model.safetensors", bytes);
         return HostileRun{info(m), error("model.safetensors"), {m}};
       }},
      {"Safetensors_ShapeProductOverflows",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         // [288, 128] -> [2^32, 2^32]: 2^64 elements.
         raw.header["model.embed_tokens.weight"]["shape"] = {int64_t{1} << 32, int64_t{1} << 32};
         raw.write(m / "model.safetensors");
         return HostileRun{info(m), error("model.embed_tokens.weight"), {m}};
       }},
  };
}

// ---- chat templates: the execution budget, through the CLI ----

HostileRun template_case(const fs::path& d, const std::string& tpl, Expect expect) {
  const fs::path m = copy_demo_model(d / "model");
  edit_json(m / "tokenizer_config.json", [&](ojson& c) { c["chat_template"] = tpl; });
  return HostileRun{
      chat_template(m, messages_file(d)), std::move(expect), {m, d / "messages.json"}};
}

std::vector<Case> template_cases() {
  const std::string budget = "chat template exceeded its budget of ";
  std::vector<std::pair<std::string, std::string>> over = {
      {"NestedLoops",
       "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}."
       "{% endfor %}{% endfor %}{% endfor %}"},
      {"ExponentialMacros",
       "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% else %}x{% endif %}"
       "{% endmacro %}{{ f(60) }}"},
      {"UnboundedRecursion", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"},
      {"StringRepeatOverflow", "{{ 'x' * 10**18 }}"},
      {"StringRepeatOverflow64", "{{ 'abcd' * 2**62 }}"},
      {"CenterWidth", "{{ 'ab'|center(10**12) }}"},
      {"FormatWidth", "{{ '{:>99999999999999999999999}'.format('a') }}"},
      {"PercentWidth", "{{ '%10000000000d' % 1 }}"},
      {"TojsonIndent", "{{ {'a': [1]}|tojson(indent=10**9) }}"},
      {"Batch", "{{ [1, 2, 3]|batch(10**9) }}"},
      {"DoublingString",
       "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
       "{% endfor %}"},
      {"ManyStringsKept",
       "{% set ns = namespace(l=[]) %}{% for i in range(3000) %}{% set ns.l = ns.l + ['x' * "
       "1000000] %}{% endfor %}"},
      {"OutputFlood", "{% for i in range(100000) %}{{ 'x' * 10000 }}{% endfor %}"},
  };
  std::vector<Case> cases;
  for (const auto& [name, tpl] : over) {
    cases.push_back({"Template_" + name, [tpl, budget](const fs::path& d) {
                       HostileRun r = template_case(d, tpl, error(budget));
                       // The budget is 256 MB per string and 1 GiB in total: no case needs more.
                       r.expect.max_rss_mb = 1536;
                       return r;
                     }});
  }
  // 100k macro definitions: linear, so it renders (quadratic lookups took minutes).
  cases.push_back({"Template_100kMacrosRender", [](const fs::path& d) {
                     std::string tpl;
                     for (int i = 0; i < 100000; ++i)
                       tpl += "{% macro m" + std::to_string(i) + "() %}" + std::to_string(i) +
                              "{% endmacro %}";
                     tpl += "{{ m0() }},{{ m99999() }}";
                     HostileRun r = template_case(d, tpl, success(stdout_has("0,99999")));
                     r.expect.max_seconds = 15;
                     return r;
                   }});
  return cases;
}

// ---- outputs that would destroy inputs or replace special files ----

// A model directory, a second copy to compare against, and the case's command.
std::vector<Case> destroyed_data_cases() {
  std::vector<Case> cases;
  const std::vector<std::pair<std::string, std::function<std::string(const fs::path&)>>> outs = {
      {"Itself", [](const fs::path& m) { return m.string(); }},
      {"TrailingSlash", [](const fs::path& m) { return m.string() + "/"; }},
      {"Dot", [](const fs::path& m) { return m.string() + "/."; }},
      {"DotDot", [](const fs::path& m) { return (m / ".." / m.filename()).string(); }},
      {"Symlink",
       [](const fs::path& m) {
         fs::create_directory_symlink(m, m.parent_path() / "link");
         return (m.parent_path() / "link").string();
       }},
      {"ParentDirectory", [](const fs::path& m) { return m.parent_path().string(); }},
  };
  for (const auto& [name, out] : outs) {
    cases.push_back({"Destroy_QuantizeOnto" + name, [out](const fs::path& d) {
                       const fs::path m = copy_demo_model(d / "model");
                       const std::string target = out(m);
                       HostileRun r{{"quantize", m, target, "--scheme", "row"},
                                    error("refusing to write"),
                                    {d}};
                       r.must_load = {m};
                       return r;
                     }});
  }
  cases.push_back({"Destroy_LogitsOutOntoFifo", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     make_fifo(d / "out.npy");
                     return HostileRun{{"logits", m, "--ids", "1", "--out", d / "out.npy"},
                                       error("is a FIFO"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_LogitsOutOntoSymlink", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "owned.txt", "keep");
                     fs::create_symlink(d / "owned.txt", d / "out.npy");
                     return HostileRun{{"logits", m, "--ids", "1", "--out", d / "out.npy"},
                                       error("is a symbolic link"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_LogitsOutOntoModelFile", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     HostileRun r{{"logits", m, "--ids", "1", "--out", m / "model.safetensors"},
                                  error("inside the input"),
                                  {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_GenerateOutOntoPrompts", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1, 2]})"
                                                      "\n");
                     return HostileRun{generate(m, d / "prompts.jsonl", d / "prompts.jsonl"),
                                       error("prompts.jsonl"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_SftOutOntoModel", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "data.jsonl", kSftRow + "\n");
                     HostileRun r{sft(m, d / "data.jsonl", m), error("refusing to write"), {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_GenerateOutOntoFifo", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1, 2]})"
                                                      "\n");
                     make_fifo(d / "out.jsonl");
                     return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                                       error("is a FIFO"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_GenerateOutOntoSymlink", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1, 2]})"
                                                      "\n");
                     write_bytes(d / "owned.txt", "keep");
                     fs::create_symlink(d / "owned.txt", d / "out.jsonl");
                     return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                                       error("is a symbolic link"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_SftOutOntoDataset", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "data.jsonl", kSftRow + "\n");
                     return HostileRun{sft(m, d / "data.jsonl", d / "data.jsonl"),
                                       error("refusing to write"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_GrpoOutputDirHoldsTheModel", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "data.jsonl", kGrpoRow + "\n");
                     const fs::path cfg = grpo_config(d, m, d / "data.jsonl", "");
                     std::vector<std::string> args = grpo(cfg);
                     args.insert(args.end(), {"--output-dir", d.string()});
                     HostileRun r{args, error("refusing to write"), {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_InitOverModelWithoutForce", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     HostileRun r{{"init", "--arch", "qwen3", "--preset", "tiny", "--out", m},
                                  error("already holds a model: give --force"),
                                  {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_InitOverModelWithForce", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     HostileRun r{
                         {"init", "--arch", "qwen3", "--preset", "tiny", "--out", m, "--force"},
                         success([m](const ProcessResult&) {
                           // The tiny preset replaced the demo model (another hidden size).
                           const ojson c = ojson::parse(read_bytes(m / "config.json"));
                           return c["hidden_size"] != 128 ? "" : "config.json not replaced";
                         }),
                         {}};
                     r.must_load = {m};
                     return r;
                   }});
  return cases;
}

// ---- messages: one line, naming the value and the range ----

std::vector<Case> message_cases() {
  return {
      {"Message_MaxStepsMinusTwo",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kSftRow + "\n");
         std::vector<std::string> args = sft(m, d / "data.jsonl", d / "out");
         args[7] = "-2";
         return HostileRun{args, error("max_steps"), {m, d / "data.jsonl"}};
       }},
      {"Message_TemperatureNan",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         std::vector<std::string> args = generate(m, d / "prompts.jsonl", d / "out.jsonl");
         args.insert(args.end(), {"--temperature", "nan"});
         return HostileRun{args, error("temperature"), {m, d / "prompts.jsonl"}};
       }},
      {"Message_UnknownFlag",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{{"info", m, "--frobnicate"}, error("--frobnicate"), {m}};
       }},
      {"Message_IdsInt64Min",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{{"logits", m, "--ids", "-9223372036854775808", "--out", d / "x.npy"},
                           error("-9223372036854775808"),
                           {m}};
       }},
  };
}

// ---- checkpoints that must not be accepted silently ----

std::vector<Case> silent_cases() {
  return {
      {"Silent_Qwen3LabelledLlama",
       [](const fs::path& d) {
         return config_case(
             d,
             [](ojson& c) {
               c["architectures"] = {"LlamaForCausalLM"};
               c["model_type"] = "llama";
             },
             "unexpected tensors");
       }},
      {"Silent_Gemma3LabelledLlama",
       [](const fs::path& d) {
         const fs::path m = d / "gemma";
         const ProcessResult init =
             fp8rl({"init", "--arch", "gemma3", "--preset", "tiny", "--out", m});
         if (init.exit_code != 0) throw std::runtime_error("init gemma3: " + init.err);
         edit_json(m / "config.json", [](ojson& c) {
           c["architectures"] = {"LlamaForCausalLM"};
           c["model_type"] = "llama";
         });
         return HostileRun{
             {"logits", m, "--ids", "1,2", "--out", d / "x.npy"}, error("tensors"), {m}};
       }},
      {"Silent_TieBesideLmHead",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         raw.header["lm_head.weight"] = raw.header["model.embed_tokens.weight"];
         raw.data["lm_head.weight"] = raw.data["model.embed_tokens.weight"];
         raw.write(m / "model.safetensors");
         return HostileRun{{"logits", m, "--ids", "1,2", "--out", d / "x.npy"},
                           error("tie_word_embeddings"),
                           {m}};
       }},
      {"Silent_NanWeight",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         const float nan = std::nanf("");
         std::memcpy(raw.data["model.layers.1.mlp.up_proj.weight"].data() + 40, &nan, 4);
         raw.write(m / "model.safetensors");
         return HostileRun{{"logits", m, "--ids", "1,2", "--out", d / "x.npy"},
                           error("model.layers.1.mlp.up_proj.weight"),
                           {m}};
       }},
      {"Silent_InfWeight",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         const float inf = INFINITY;
         std::memcpy(raw.data["model.norm.weight"].data(), &inf, 4);
         raw.write(m / "model.safetensors");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                           error("model.norm.weight"),
                           {m, d / "prompts.jsonl"}};
       }},
      {"Silent_UnknownDtype",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         raw.header["model.norm.weight"]["dtype"] = "F12";
         raw.write(m / "model.safetensors");
         return HostileRun{info(m), error("F12"), {m}};
       }},
      {"Silent_InfoWithTensorsMissing",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         raw.header.erase("model.layers.0.mlp.down_proj.weight");
         raw.data.erase("model.layers.0.mlp.down_proj.weight");
         raw.write(m / "model.safetensors");
         return HostileRun{
             info(m), error("missing tensors (1): model.layers.0.mlp.down_proj.weight"), {m}};
       }},
  };
}

// ---- the fuzzers' kept findings, fed to the commands that read their format ----

std::vector<Case> fuzz_finding_cases() {
  std::vector<Case> cases;
  const fs::path root = fs::path(FP8RL_SOURCE_DIR) / "fuzz/regressions";
  if (!fs::exists(root)) return cases;
  for (const auto& format : fs::directory_iterator(root)) {
    for (const auto& file : fs::directory_iterator(format.path())) {
      const std::string kind = format.path().filename().string();
      std::string name = "Fuzz_" + kind + "_" + file.path().stem().string();
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      const fs::path input = file.path();
      cases.push_back({name, [kind, input](const fs::path& d) {
                         const fs::path m = copy_demo_model(d / "model");
                         if (kind == "quant_config") {
                           // A quantization_config in config.json: info reads it.
                           const std::string q = read_bytes(input);
                           write_bytes(m / "config.json",
                                       read_bytes(m / "config.json").substr(0, 1) +
                                           "\"quantization_config\": " + q + ", " +
                                           read_bytes(m / "config.json").substr(1));
                           return HostileRun{info(m), error("quantization_config"), {m}};
                         }
                         throw std::runtime_error("no command for fuzz findings of " + kind);
                       }});
    }
  }
  return cases;
}

// ---- controls: each command of the cases on clean inputs succeeds, so that the cases' errors
// come from what they spoil, not from a command line that could never work ----

std::function<std::string(const ProcessResult&)> file_exists(const fs::path& path) {
  return [path](const ProcessResult&) {
    return fs::exists(path) ? "" : path.string() + " was not written";
  };
}

std::vector<Case> control_cases() {
  return {
      {"Control_Info",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{info(m), success(stdout_has("Qwen3ForCausalLM")), {m}};
       }},
      {"Control_Logits",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{{"logits", m, "--ids", "1,2,3", "--out", d / "x.npy"},
                           success(file_exists(d / "x.npy")),
                           {m}};
       }},
      {"Control_Tokenize",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{
             tokenize(m, text_file(d)), success(stdout_has("[")), {m, d / "text.txt"}};
       }},
      {"Control_ChatTemplate",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{chat_template(m, messages_file(d)),
                           success(stdout_has("hi")),
                           {m, d / "messages.json"}};
       }},
      {"Control_Generate",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1, 2]})"
                                          "\n");
         return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                           success(file_exists(d / "out.jsonl")),
                           {m, d / "prompts.jsonl"}};
       }},
      {"Control_Quantize",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         HostileRun r{{"quantize", m, d / "q", "--scheme", "row"},
                      success(file_exists(d / "q/model.safetensors")),
                      {m}};
         r.must_load = {m, d / "q"};
         return r;
       }},
      {"Control_Sft",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kSftRow + "\n");
         return HostileRun{sft(m, d / "data.jsonl", d / "out"),
                           success(file_exists(d / "out/adapter_model.safetensors")),
                           {m, d / "data.jsonl"}};
       }},
      {"Control_Grpo",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         return HostileRun{grpo(cfg),
                           success(file_exists(d / "run/adapter_model.safetensors")),
                           {m, d / "data.jsonl", cfg}};
       }},
      {"Control_Dpo",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kDpoRow + "\n");
         return HostileRun{dpo(m, d / "data.jsonl", d / "out"),
                           success(file_exists(d / "out/adapter_model.safetensors")),
                           {m, d / "data.jsonl"}};
       }},
  };
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto group : {deep_json_cases(), size_cases(), special_file_cases(), endless_cases(),
                     safetensors_cases(), template_cases(), destroyed_data_cases(), message_cases(),
                     silent_cases(), fuzz_finding_cases(), control_cases()})
    all.insert(all.end(), group.begin(), group.end());
  return all;
}

class Hostile : public ::testing::TestWithParam<Case> {};

TEST_P(Hostile, CleanErrorOrCorrectSuccess) {
  const Case& c = GetParam();
  const fs::path dir =
      fs::temp_directory_path() / ("fp8rl_hostile_" + std::to_string(::getpid())) / c.name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  HostileRun run = c.make(dir);
  const Snapshot before = snapshot(run.unchanged);
  const ProcessResult r = fp8rl(run.args);
  if (run.cleanup) run.cleanup();
  const Snapshot after = snapshot(run.unchanged);
  std::string command = "fp8rl";
  for (const std::string& a : run.args)
    command += " " + (a.size() > 120 ? a.substr(0, 120) + "..." : a);
  EXPECT_EQ(verdict(r, run.expect, before, after), "")
      << command << "\nstderr: " << r.err.substr(0, 2000);
  for (const fs::path& m : run.must_load) {
    const ProcessResult load = fp8rl({"info", m});
    EXPECT_EQ(load.exit_code, 0) << m << " no longer loads: " << load.err;
  }
  RecordProperty("seconds", std::to_string(r.wall_seconds));
  RecordProperty("max_rss_kb", std::to_string(r.max_rss_kb));
  RecordProperty("last_line", last_line(r.err));  // --gtest_output=xml: what each case said
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Cases, Hostile, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fp8rl::test::hostile
