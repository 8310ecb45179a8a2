// Hostile inputs: deep JSON, sizes, special files, endless inputs, safetensors headers, MoE
// checkpoints.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hostile/hostile_case.h"

namespace fp8rl::test::hostile {

// ---- deep JSON (100k levels) in every JSON the CLI reads ----

namespace {

constexpr int kDeep = 100000;

}  // namespace

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
      {"DeepJson_KtoRow",
       [deep](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kKtoRow + "\n" + R"({"label": )" + deep + "}\n");
         return HostileRun{
             kto(m, d / "data.jsonl", d / "out"), error(":2:"), {m, d / "data.jsonl"}};
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
      {"DeepJson_RewardsFlag",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         std::vector<std::string> args = grpo(cfg);
         // 30k levels: a command-line argument holds at most 128 KiB.
         args.insert(args.end(), {"--rewards", deep_array(30000)});
         return HostileRun{args, error("limit of 256"), {m, d / "data.jsonl", cfg}};
       }},
      {"DeepJson_ReportSamplesLine",
       [deep](const fs::path& d) {
         fs::create_directories(d / "run");
         write_bytes(d / "run/metrics.jsonl", R"({"step": 1, "loss": 0.5})"
                                              "\n");
         write_bytes(d / "run/samples.jsonl", R"({"step": 1, "x": )" + deep + "}\n");
         return HostileRun{{"report", d / "run", "--out", d / "report.html"},
                           error("samples.jsonl:1:"),
                           {d / "run"}};
       }},
  };
}

// ---- YAML run configs: aliases that expand, keys JSON has no form for ----

namespace {

// A GRPO run config whose `rewards` is `rewards` (YAML text after "rewards:").
HostileRun yaml_rewards_case(const fs::path& d, const std::string& rewards, Expect expect) {
  const fs::path m = copy_demo_model(d / "model");
  write_bytes(d / "data.jsonl", kGrpoRow + "\n");
  write_bytes(d / "run.yaml", "model: " + m.string() + "\ndata: " + (d / "data.jsonl").string() +
                                  "\noutput_dir: " + (d / "run").string() + "\nrewards:" + rewards);
  return HostileRun{grpo(d / "run.yaml"), std::move(expect), {m, d / "data.jsonl", d / "run.yaml"}};
}

}  // namespace

std::vector<Case> yaml_cases() {
  return {
      {"Yaml_BillionLaughsInRewards",
       [](const fs::path& d) {
         // Nine levels of nine aliases: under 500 bytes naming 9^9 nodes, which the conversion
         // to JSON grew to gigabytes (std::bad_alloc).
         std::string laughs = "\n  - &a0 [x, x, x, x, x, x, x, x, x]\n";
         for (int i = 1; i < 9; ++i) {
           laughs += "  - &a" + std::to_string(i) + " [";
           for (int j = 0; j < 9; ++j) laughs += (j ? ", *a" : "*a") + std::to_string(i - 1);
           laughs += "]\n";
         }
         HostileRun r =
             yaml_rewards_case(d, laughs, error("the value expands past the limit of 100000 YAML"));
         r.expect.max_rss_mb = 256;
         return r;
       }},
      {"Yaml_AliasCycleInRewards",
       [](const fs::path& d) {
         // An alias inside its own anchor: the conversion recursed until the stack overflowed.
         return yaml_rewards_case(d, " &a [1, *a]\n", error("nested deeper than the limit of 256"));
       }},
      {"Yaml_ComplexKeyInRewards",
       [](const fs::path& d) {
         // A list as a mapping key: yaml-cpp's "bad conversion".
         return yaml_rewards_case(d, "\n  - type: pattern\n    ? [a, b]\n    : 1\n",
                                  error("rewards[0]: a mapping key must be a string, not a list"));
       }},
  };
}

// ---- sizes: overflowing products, negative and zero sizes, absurd counts ----

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
                           error("--ids (301 tokens) exceeds the model's context of 256"),
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
      {"Sizes_SftConversationOf4000Turns",
       [](const fs::path& d) {
         // Each assistant turn's mask took a render of the conversation so far: 4,000 turns
         // took 39 s before the length check refused the row.
         const fs::path m = copy_demo_model(d / "model");
         ojson messages = ojson::array();
         for (int i = 0; i < 4000; ++i)
           messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "hi"}});
         write_bytes(d / "data.jsonl", ojson{{"messages", messages}}.dump() + "\n");
         HostileRun r{sft(m, d / "data.jsonl", d / "out"),
                      error("longer than max_length 1024"),
                      {m, d / "data.jsonl"}};
         r.expect.max_seconds = 10;
         return r;
       }},
      {"Sizes_GrpoBatchOf1e12",
       [](const fs::path& d) {
         // "out of memory": the round and the micro-batch are sized up front now. 1e12: more
         // than any machine holds, as the sanitizer build runs without the address-space limit.
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         std::vector<std::string> args = grpo(cfg);
         args.insert(args.end(), {"--per-device-train-batch-size", "1000000000000"});
         HostileRun r{args, error("per_device_train_batch_size"), {m, d / "data.jsonl", cfg}};
         r.expect.max_rss_mb = 256;
         return r;
       }},
      {"Sizes_GrpoCompletionLengthPastTheContext",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         std::vector<std::string> args = grpo(cfg);
         args.insert(args.end(), {"--max-completion-length", "1000000000"});
         HostileRun r{
             args, error("plus max_completion_length 1000000000 ("), {m, d / "data.jsonl", cfg}};
         r.expect.max_rss_mb = 256;
         return r;
       }},
      {"Sizes_SftLoraRankOf1e9",
       [](const fs::path& d) {
         // 7 TB of masters: refused on any machine, with or without the address-space limit.
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kSftRow + "\n");
         std::vector<std::string> args = sft(m, d / "data.jsonl", d / "out");
         args.insert(args.end(), {"--lora-r", "1000000000"});
         HostileRun r{args, error("lora_r = 1000000000"), {m, d / "data.jsonl"}};
         r.expect.max_rss_mb = 256;
         return r;
       }},
      {"Sizes_GenerateKvMemoryOfAPebibyte",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         std::vector<std::string> args = generate(m, d / "prompts.jsonl", d / "out.jsonl");
         args.insert(args.end(), {"--kv-memory", "1048576"});
         HostileRun r{args, error("the KV pool of kv_memory: "), {m, d / "prompts.jsonl"}};
         r.expect.max_rss_mb = 256;
         return r;
       }},
      {"Sizes_GpuMemoryOf1e308GiB",
       [](const fs::path& d) {
         // A budget past any GPU (and past size_t in bytes) is a range error, never a cast.
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kSftRow + "\n");
         std::vector<std::string> args = sft(m, d / "data.jsonl", d / "out");
         args.insert(args.end(), {"--device", "cuda", "--gpu-memory", "1e308", "--dry-run"});
         HostileRun r{args, error("gpu_memory = 1e+308 is out of range"), {m, d / "data.jsonl"}};
         r.expect.max_rss_mb = 256;
         return r;
       }},
      {"Sizes_GenerateGpuMemoryNaN",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         std::vector<std::string> args = generate(m, d / "prompts.jsonl", d / "out.jsonl");
         args.insert(args.end(), {"--device", "cuda", "--gpu-memory", "nan"});
         HostileRun r{args, error("gpu_memory = nan is out of range"), {m, d / "prompts.jsonl"}};
         r.expect.max_rss_mb = 256;
         return r;
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

namespace {

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
      {"AdapterConfig",
       [](const fs::path& d, fs::path& victim) {
         // It hung as a FIFO (read with a plain stream, not the checked input path).
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         fs::create_directories(d / "adapter");
         write_bytes(d / "adapter" / "adapter_model.safetensors", "");
         victim = d / "adapter" / "adapter_config.json";
         std::vector<std::string> args = generate(m, d / "prompts.jsonl", d / "out.jsonl");
         args.insert(args.end(), {"--adapter", (d / "adapter").string()});
         return HostileRun{args, error("adapter_config.json"), {m, d / "prompts.jsonl"}};
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

}  // namespace

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

namespace {

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

}  // namespace

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
      {"Endless_SparseLineAsKtoDataset",
       [kHuge](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         make_sparse(d / "data.jsonl", kKtoRow + "\n", kHuge);
         return HostileRun{
             kto(m, d / "data.jsonl", d / "out"), error("data.jsonl"), {m, d / "data.jsonl"}};
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

// ---- MoE checkpoints (the tiny Qwen3-MoE of `fp8rl init`: layer 0 of 4 experts, top-2) ----

namespace {

fs::path init_moe_model(const fs::path& dir) {
  const ProcessResult r =
      fp8rl({"init", "--arch", "qwen3-moe", "--preset", "tiny", "--out", dir.string()});
  if (r.exit_code != 0) throw std::runtime_error("fp8rl init: " + r.out + r.err);
  return dir;
}

// A copy of tensor `from` under the name `to` (same dtype and shape).
void duplicate_tensor(RawSafetensors& raw, const std::string& from, const std::string& to) {
  raw.header[to] = raw.header[from];
  raw.data[to] = raw.data[from];
}

}  // namespace

std::vector<Case> moe_cases() {
  const std::string e = "model.layers.0.mlp.experts.";
  return {
      {"Moe_TopKAboveExpertCount",
       [](const fs::path& d) {
         const fs::path m = init_moe_model(d / "model");
         edit_config(m, [](ojson& c) { c["num_experts_per_tok"] = 9; });
         return HostileRun{info(m), error("num_experts_per_tok = 9 is outside [1, 4]"), {m}};
       }},
      {"Moe_ExpertShapesDisagreeWithConfig",
       [e](const fs::path& d) {
         const fs::path m = init_moe_model(d / "model");
         edit_config(m, [](ojson& c) { c["moe_intermediate_size"] = 95; });
         return HostileRun{info(m), error("tensor '" + e + "0.gate_proj.weight' has shape"), {m}};
       }},
      {"Moe_ExtraExpertTensor",
       [e](const fs::path& d) {
         const fs::path m = init_moe_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         duplicate_tensor(raw, e + "3.up_proj.weight", e + "4.up_proj.weight");
         raw.write(m / "model.safetensors");
         return HostileRun{
             info(m), error("unexpected tensors (1): " + e + "4.up_proj.weight"), {m}};
       }},
      {"Moe_MissingExpertTensor",
       [e](const fs::path& d) {
         const fs::path m = init_moe_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         raw.header.erase(e + "2.down_proj.weight");
         raw.data.erase(e + "2.down_proj.weight");
         raw.write(m / "model.safetensors");
         return HostileRun{info(m), error("missing tensors (1): " + e + "2.down_proj.weight"), {m}};
       }},
      {"Moe_BothExpertLayouts",
       [e](const fs::path& d) {
         // A fused down_proj [E, H, I] beside the per-expert tensors: bytes of the right size.
         const fs::path m = init_moe_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         const ojson& one = raw.header[e + "0.down_proj.weight"];
         raw.header[e + "down_proj"] = one;
         raw.header[e + "down_proj"]["shape"] = {4, one["shape"][0], one["shape"][1]};
         raw.data[e + "down_proj"] =
             std::string(4 * raw.data[e + "0.down_proj.weight"].size(), '\0');
         raw.write(m / "model.safetensors");
         return HostileRun{info(m), error("in both layouts: '" + e + "down_proj'"), {m}};
       }},
      {"Moe_AdapterExpertShapeDoesNotFit",
       [e](const fs::path& d) {
         // A PEFT adapter on the experts' gate_proj (r 4; the experts are [96, 192]) whose
         // expert 2 has a lora_A of the wrong width.
         const fs::path m = init_moe_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         fs::create_directories(d / "adapter");
         write_bytes(d / "adapter" / "adapter_config.json",
                     R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, )"
                     R"("target_modules": ["gate_proj"]})");
         ojson header = ojson::object();
         std::string body;
         for (int x = 0; x < 4; ++x)
           for (const bool b : {false, true}) {
             const std::string name = "base_model.model." + e + std::to_string(x) +
                                      ".gate_proj.lora_" + (b ? "B" : "A") + ".weight";
             const std::vector<int64_t> shape =
                 b ? std::vector<int64_t>{96, 4} : std::vector<int64_t>{4, x == 2 ? 191 : 192};
             const size_t bytes = size_t(shape[0] * shape[1]) * 4;
             header[name] = {{"dtype", "F32"},
                             {"shape", shape},
                             {"data_offsets", {body.size(), body.size() + bytes}}};
             body += std::string(bytes, '\0');
           }
         RawSafetensors::write_with_header(d / "adapter" / "adapter_model.safetensors",
                                           header.dump(), body);
         std::vector<std::string> args = generate(m, d / "prompts.jsonl", d / "out.jsonl");
         args.insert(args.end(), {"--adapter", (d / "adapter").string()});
         return HostileRun{args,
                           error("tensor 'base_model.model." + e +
                                 "2.gate_proj.lora_A.weight' has shape [4, 191]"),
                           {m, d / "prompts.jsonl", d / "adapter"}};
       }},
  };
}

}  // namespace fp8rl::test::hostile
