// The fp8rl binary end to end: the happy paths, and bad input of every kind giving a clear
// message and a non-zero exit (never a crash).
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "formats/npy.h"
#include "formats/safetensors.h"
#include "formats/tensorboard_event.pb.h"
#include "formats/tensorboard_events.h"
#include "process_run.h"
#include "test_util.h"
#include "tolerances.h"

namespace fs = std::filesystem;
using namespace fp8rl;

namespace {

struct Result {
  int exit_code;  // -1: killed by a signal
  std::string output;
};

// `redirects` replaces the default "2>&1" (e.g. "< in.txt 2>/dev/null" for stdout alone). The
// shell execs fp8rl, so that a death by a signal (a crash, a sanitizer's abort) is exit_code -1,
// not the shell's exit status 128 + signal, which expect_error would take for an error exit.
// `dir`: the working directory (empty: the test's).
Result run(const std::string& args, const std::string& redirects = "2>&1",
           const std::string& dir = "") {
  const std::string cmd = (dir.empty() ? "" : "cd '" + dir + "' && ") + "exec " +
                          std::string(FP8RL_BIN) + " " + args + " " + redirects;
  FILE* p = popen(cmd.c_str(), "r");
  Result r{0, ""};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void expect_error(const std::string& args, const std::string& fragment) {
  const Result r = run(args);
  EXPECT_GT(r.exit_code, 0) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
}

std::string temp(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("fp8rl_cli_" + name + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

const std::string kQwen3 = fp8rl::test::golden_dir("qwen3");

TEST(Cli, HelpForEverySubcommand) {
  for (const char* sub : {"info", "logits", "quantize", "init", "schemes", "generate", "chat",
                          "merge", "report", "sft", "grpo", "rloo", "ppo", "online-dpo",
                          "online_dpo", "dpo", "kto", "reward", "serve"}) {
    const Result r = run(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << sub;
  }
}

TEST(Cli, LogitsWritesTheNpy) {
  const std::string out = temp("logits") + ".npy";
  const Result r = run("logits " + kQwen3 + " --ids 5,6,7 --fp8 row --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tensor t = read_npy(out);
  EXPECT_EQ(t.shape(), (Shape{3, 256}));
  fs::remove(out);
}

// --activations bf16 emulates CUDA's bf16 activations on the CPU: other logits, close ones.
TEST(Cli, LogitsWithBf16Activations) {
  const std::string f32 = temp("logits_f32") + ".npy", bf16 = temp("logits_bf16") + ".npy";
  const std::string args = "logits " + kQwen3 + " --ids 5,6,7,8 --fp8 block --device cpu";
  ASSERT_EQ(run(args + " --out " + f32).exit_code, 0);
  const Result r = run(args + " --activations bf16 --out " + bf16);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Tensor a = read_npy(f32), b = read_npy(bf16);
  ASSERT_EQ(b.shape(), a.shape());
  const double d = fp8rl::test::rel_max_diff(b, a);
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 0.5);
  EXPECT_NE(run("logits --help").output.find("--activations"), std::string::npos);
  fs::remove(f32);
  fs::remove(bf16);
}

TEST(Cli, InitQuantizeInfo) {
  const std::string dir = temp("init"), q = temp("q");
  ASSERT_EQ(run("init --arch gemma3 --preset tiny --out " + dir + " --seed 3").exit_code, 0);
  const Result qr = run("quantize " + dir + " " + q + " --scheme block --format fp8");
  ASSERT_EQ(qr.exit_code, 0) << qr.output;
  const Result info = run("info " + q);
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("Gemma3ForCausalLM"), std::string::npos);
  EXPECT_NE(info.output.find("fp8: weights block scaling (weight_scale_inv)"), std::string::npos)
      << info.output;
  EXPECT_NE(info.output.find("F8_E4M3"), std::string::npos);
  const Result s = run("schemes " + dir + " --tokens 8 --repeat 1");
  ASSERT_EQ(s.exit_code, 0) << s.output;
  EXPECT_NE(s.output.find("block"), std::string::npos);
  expect_error("schemes " + q, "already FP8");
  fs::remove_all(dir);
  fs::remove_all(q);
}

TEST(Cli, BadArgumentsAreClearErrors) {
  expect_error("", "A subcommand is required");
  expect_error("bogus", "unknown command 'bogus'");
  expect_error("info /nonexistent/model", "cannot open '/nonexistent/model/config.json'");
  expect_error("logits " + kQwen3 + " --ids 1,x,3 --out /tmp/x.npy", "'x' is not a token id");
  expect_error("logits " + kQwen3 + " --ids 1,,3 --out /tmp/x.npy", "'' is not a token id");
  expect_error("logits " + kQwen3 + " --ids 1,-2 --out /tmp/x.npy", "'-2' is not a token id");
  expect_error("logits " + kQwen3 + " --ids 1,300 --out /tmp/x.npy",
               "token id 300 is outside the vocabulary");
  expect_error("logits " + kQwen3 + " --ids 1 --fp8 int4 --out /tmp/x.npy",
               "unknown FP8 scheme 'int4'");
  expect_error("logits " + kQwen3 + " --ids 1 --device tpu --out /tmp/x.npy",
               "'tpu' is not a device");
  expect_error("logits " + kQwen3 + " --ids 1 --activations fp16 --out /tmp/x.npy",
               "'fp16' is not f32 or bf16");
  expect_error("logits " + kQwen3 + " --ids 1 --device cuda --activations bf16 --out /tmp/x.npy",
               "--activations bf16 applies to --device cpu only; CUDA activations are always bf16");
  expect_error("logits " + kQwen3 + " --ids 1 --out /nonexistent/dir/x.npy", "x.npy");
  expect_error("logits " + kQwen3 + " --ids 1", "--out is required");
  expect_error("quantize " + kQwen3 + " /tmp/q --scheme off", "choose row, block or tensor");
  expect_error("quantize " + kQwen3 + " /tmp/q --scheme row --format fp8", "block scales only");
  expect_error("quantize " + kQwen3 + " /tmp/q --scheme row --format gguf",
               "unknown checkpoint format 'gguf'");
  expect_error("init --arch bert --preset tiny --out /tmp/b", "'bert' is not one of");
  expect_error("init --arch qwen3 --preset 9000b --out /tmp/b", "unknown preset 'qwen3-9000b'");
  expect_error("schemes " + kQwen3 + " --tokens 0", "--tokens must be positive");
}

TEST(Cli, CorruptModelsAreClearErrors) {
  const std::string dir = temp("corrupt");
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << "{ not json";
  expect_error("info " + dir, "is not valid JSON");
  fs::copy_file(kQwen3 + "/config.json", dir + "/config.json",
                fs::copy_options::overwrite_existing);
  expect_error("info " + dir, "model.safetensors");  // no weights at all
  {
    std::ifstream in(kQwen3 + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir + "/model.safetensors", std::ios::binary)
        << bytes.substr(0, bytes.size() / 2);
  }
  expect_error("logits " + dir + " --ids 1 --out /tmp/x.npy", "model.safetensors");
  {
    std::ifstream f(kQwen3 + "/config.json");
    std::string c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    c.replace(c.find("\"hidden_size\": 192"), 18, "\"hidden_size\": 128");
    std::ofstream(dir + "/config.json") << c;
  }
  fs::copy_file(kQwen3 + "/model.safetensors", dir + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  expect_error(
      "logits " + dir + " --ids 1 --out /tmp/x.npy",
      "tensor 'model.embed_tokens.weight' has shape [256, 192], the config implies [256, 128]");
  fs::remove_all(dir);
}

// ---- generate and chat ----

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(f, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The golden's prompts as a prompts file.
std::string golden_prompts(const nlohmann::json& prompts, const std::string& name) {
  std::string text;
  for (const auto& p : prompts)
    text += nlohmann::json{{"prompt_ids", p["prompt_ids"]}}.dump() + "\n";
  const std::string path = temp(name) + ".jsonl";
  write_file(path, text);
  return path;
}

struct GoldenMatch {
  bool tokens_equal = true;
  double max_logprob_diff = 0;
};

GoldenMatch compare(const nlohmann::json& prompts, const std::vector<nlohmann::json>& out) {
  GoldenMatch m;
  EXPECT_EQ(out.size(), prompts.size());
  for (size_t i = 0; i < std::min(out.size(), prompts.size()); ++i) {
    const nlohmann::json& c = out[i]["completions"].at(0);
    m.tokens_equal = m.tokens_equal && c["completion_ids"] == prompts[i]["generated_ids"];
    const auto lps = c["logprobs"].get<std::vector<double>>();
    const auto ref = prompts[i]["logprobs"].get<std::vector<double>>();
    for (size_t t = 0; t < std::min(lps.size(), ref.size()); ++t)
      m.max_logprob_diff = std::max(m.max_logprob_diff, std::abs(lps[t] - ref[t]));
  }
  return m;
}

// Greedy fp32 generation through the CLI equals HF generate's tokens (tests/engine checks the
// engine itself on all goldens; this checks the command's plumbing: input, flags, output).
TEST(CliGenerate, GreedyEqualsHfGenerate) {
  const nlohmann::json g = read_json(kQwen3 + "/generate.json");
  const std::string prompts = golden_prompts(g["prompts"], "gen_in"), out = temp("gen_out");
  const std::string args = "generate " + kQwen3 + " --prompts " + prompts + " --out " + out +
                           " --max-tokens 12 --ignore-eos --fp8 off";
  const Result r = run(args + " --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const GoldenMatch m = compare(g["prompts"], read_jsonl(out));
  EXPECT_TRUE(m.tokens_equal);
  EXPECT_LE(m.max_logprob_diff, fp8rl::test::kGenerateLogprob);
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  for (const auto& line : read_jsonl(out)) {
    EXPECT_EQ(line["completions"][0]["finish_reason"], "length");
    EXPECT_EQ(line["completions"][0]["text"], "");  // the goldens have no tokenizer
  }
  // Negative control: sampling at temperature 1 is not the greedy sequence.
  ASSERT_EQ(run(args + " --temperature 1 --seed 3").exit_code, 0);
  EXPECT_FALSE(compare(g["prompts"], read_jsonl(out)).tokens_equal);
  // --n: n completions per line.
  ASSERT_EQ(run(args + " --temperature 1 --seed 3 --n 3").exit_code, 0);
  for (const auto& line : read_jsonl(out)) EXPECT_EQ(line["completions"].size(), 3u);
  fs::remove(prompts);
  fs::remove(out);
}

// --adapter: PEFT's generate with the adapter (and not the base model's).
TEST(CliGenerate, AdapterEqualsPeftGenerate) {
  const nlohmann::json g = read_json(kQwen3 + "/generate.json");
  const nlohmann::json& ap = g["adapter"]["prompts"];
  const std::string prompts = golden_prompts(ap, "gen_ad_in"), out = temp("gen_ad_out");
  const std::string args = "generate " + kQwen3 + " --prompts " + prompts + " --out " + out +
                           " --max-tokens 12 --ignore-eos --fp8 off --temperature 0";
  ASSERT_EQ(run(args + " --adapter " + kQwen3 + "/adapter").exit_code, 0);
  const GoldenMatch m = compare(ap, read_jsonl(out));
  EXPECT_TRUE(m.tokens_equal);
  EXPECT_LE(m.max_logprob_diff, fp8rl::test::kGenerateLogprob);
  ASSERT_EQ(run(args).exit_code, 0);
  EXPECT_GT(compare(ap, read_jsonl(out)).max_logprob_diff, 10 * fp8rl::test::kGenerateLogprob)
      << "the adapter changes nothing";
  fs::remove(prompts);
  fs::remove(out);
}

// --adapter on logits: PEFT's logits; bench forward runs with it.
TEST(CliAdapter, LogitsAndBench) {
  const std::string ids = read_json(kQwen3 + "/ids.json").dump();
  const std::string csv = ids.substr(1, ids.size() - 2);
  const Tensor ref = read_npy(kQwen3 + "/adapter_logits.npy");
  const std::string with = temp("lg_ad") + ".npy", without = temp("lg_base") + ".npy";
  const std::string args = "logits " + kQwen3 + " --ids " + csv + " --fp8 off";
  ASSERT_EQ(run(args + " --adapter " + kQwen3 + "/adapter --out " + with).exit_code, 0);
  ASSERT_EQ(run(args + " --out " + without).exit_code, 0);
  EXPECT_LE(fp8rl::test::rel_max_diff(read_npy(with), ref), fp8rl::test::kHfFp32Logits);
  EXPECT_GT(fp8rl::test::rel_max_diff(read_npy(without), ref), 100 * fp8rl::test::kHfFp32Logits);
  const Result b = run("bench forward --model " + kQwen3 + " --adapter " + kQwen3 +
                       "/adapter --device cpu --tokens 16 --iters 1 --warmup 0");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("\"adapter\""), std::string::npos) << b.output;
  const std::string llama = fp8rl::test::golden_dir("llama");
  expect_error("logits " + llama + " --ids 1,2 --adapter " + kQwen3 + "/adapter --out " + with,
               "q_proj");
  expect_error("bench forward --model " + llama + " --adapter " + kQwen3 +
                   "/adapter --device cpu --tokens 16 --iters 1",
               "q_proj");
  fs::remove(with);
  fs::remove(without);
}

// A bench command's JSON (stdout; its progress on stderr is dropped).
nlohmann::json bench_json(const std::string& args) {
  const Result r = run(args, "2>/dev/null");
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  if (r.exit_code != 0) return nlohmann::json::object();
  return nlohmann::json::parse(r.output);
}

// bench grpo on the CPU: the CUDA device options are accepted, the JSON claims none of the CUDA
// paths (none ran) and names the options that changed nothing. Bad keys and values are errors
// that list the valid keys; the old flags are gone.
TEST(CliBench, DeviceOptionsOnTheCpu) {
  const std::string base = "bench grpo --model " + kQwen3 +
                           " --device cpu --fp8 off --prompts 1 --generations 2 --prompt-tokens 4 "
                           "--completion-tokens 2 --steps 1 --lora-r 2";
  const std::string off =
      " --device-option decode_mma=false --device-option concurrent_linears=false "
      "--device-option persistent_decode=false --device-option streaming_linears=0";
  const nlohmann::json plain = bench_json(base), given = bench_json(base + off);
  for (const nlohmann::json& j : {plain, given}) {
    EXPECT_EQ(j.value("decode_attention", ""), "CPU reference") << j.dump();
    EXPECT_EQ(j.value("concurrent_linears", true), false) << j.dump();
    EXPECT_EQ(j.value("persistent_decode", true), false) << j.dump();
    EXPECT_EQ(j.value("streaming_linears", true), false) << j.dump();
    EXPECT_EQ(j.value("streaming_lora_down", true), false) << j.dump();
    EXPECT_EQ(j.dump().find("tensor cores"), std::string::npos) << j.dump();
  }
  EXPECT_EQ(given["device_options_not_applied"],
            nlohmann::json(
                {"decode_mma", "concurrent_linears", "persistent_decode", "streaming_linears"}));
  EXPECT_EQ(given["device_options"].size(), 4u);
  EXPECT_FALSE(plain.contains("device_options_not_applied"));
  // Errors name the key or value and list the valid keys; they come before the model loads.
  expect_error(base + " --device-option bogus=1", "unknown key 'bogus' (valid keys: ");
  expect_error(base + " --device-option bogus=1", "stacked_qkv");
  expect_error(base + " --device-option decode_mma=maybe",
               "decode_mma=maybe: 'maybe' is not a bool");
  expect_error(base + " --device-option decode_mma=maybe", "valid keys: concurrent_linears");
  expect_error(base + " --device-option persistent_decode_sms=-2", "is not an integer >= -1");
  expect_error(base + " --device-option decode_mma", "'decode_mma' is not KEY=VALUE");
  expect_error(base + " --kv-dtype fp4", "--kv-dtype fp4: expected bf16 or fp8");
  expect_error(base + " --gradient-accumulation-steps 4",
               "--gradient-accumulation-steps 4 must divide the 2 completions");
  expect_error(base + " --device-option shared_prefix=false",
               "sets the generation engine, which bench grpo does not run");
  for (const char* old : {"--no-decode-mma", "--no-concurrent-linears", "--no-persistent-decode",
                          "--no-pending-linears"})
    expect_error(base + " " + old, old);
  // The table: every key with its default.
  const Result list = run("bench --list-device-options");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  for (const char* key :
       {"concurrent_linears", "decode_mma", "persistent_decode", "persistent_decode_sms",
        "streaming_linears", "streaming_lora_down", "wgmma_attention", "tiled_attention_backward",
        "shared_prefix_mma", "fp8_input_gradient", "device_region", "stacked_qkv", "shared_prefix",
        "shared_prefix_min_tokens", "async_scheduling"})
    EXPECT_NE(list.output.find(std::string("\n") + key + " "), std::string::npos) << key;
  EXPECT_NE(list.output.find("shared_prefix_min_tokens   int   256"), std::string::npos)
      << list.output;
  expect_error("bench", "subcommand");
}

// bench generate's engine options act on the CPU engine: the shared-prefix path runs exactly
// when its threshold is under the prompt and the path is on; async_scheduling=true plans steps
// ahead on the CPU too (its default there is off). Old flags are gone.
TEST(CliBench, GenerateEngineOptions) {
  const std::string base = "bench generate --model " + kQwen3 +
                           " --device cpu --fp8 off --prompts 1 --n 2 --prompt-tokens 32 "
                           "--max-tokens 3";
  const nlohmann::json d = bench_json(base);
  EXPECT_EQ(d["shared_prefix"]["steps"], 0);  // 32 tokens, under the default 256
  EXPECT_EQ(d["time_split"]["steps_planned_ahead"], 0);
  EXPECT_EQ(d["async_scheduling"], false);
  const nlohmann::json on = bench_json(
      base + " --device-option shared_prefix_min_tokens=16 --device-option async_scheduling=true");
  EXPECT_GT(on["shared_prefix"]["steps"].get<int>(), 0);
  EXPECT_EQ(on["shared_prefix"]["min_tokens"], 16);
  EXPECT_GT(on["time_split"]["steps_planned_ahead"].get<int>(), 0);
  EXPECT_EQ(on["async_scheduling"], true);
  EXPECT_FALSE(on.contains("device_options_not_applied"));  // engine options apply on the CPU
  // Control: the path off, whatever the threshold.
  const nlohmann::json off = bench_json(
      base + " --device-option shared_prefix_min_tokens=16 --device-option shared_prefix=false");
  EXPECT_EQ(off["shared_prefix"]["steps"], 0);
  EXPECT_EQ(off["shared_prefix_attention"], false);
  expect_error(base + " --device-option shared_prefix_min_tokens=-1",
               "shared_prefix_min_tokens=-1: '-1' is not an integer >= 0");
  for (const char* old : {"--no-shared-prefix", "--shared-prefix-min-tokens 16",
                          "--no-async-scheduling", "--no-stacked-qkv"})
    expect_error(base + " " + old, std::string(old).substr(0, std::string(old).find(' ')));
}

// bench generate --lora-r: a random adapter (B nonzero) applies in generation; the same seed
// without it generates other tokens with other logprobs, and repeats itself exactly.
TEST(CliBench, GenerateWithARandomAdapter) {
  const std::string base = "bench generate --model " + kQwen3 +
                           " --device cpu --fp8 off --prompts 2 --n 2 --prompt-tokens 8 "
                           "--max-tokens 8 --seed 3";
  const nlohmann::json none = bench_json(base);
  const nlohmann::json again = bench_json(base + " --lora-r 0");
  const nlohmann::json lora = bench_json(base + " --lora-r 4");
  EXPECT_EQ(none["lora_r"], 0);
  EXPECT_EQ(lora["lora_r"], 4);
  EXPECT_EQ(lora["lora_alpha"], 8.0);
  // Control: without an adapter the run repeats itself, so a difference is the adapter's.
  EXPECT_EQ(again["first_completion_ids"], none["first_completion_ids"]);
  EXPECT_EQ(again["mean_logprob"], none["mean_logprob"]);
  EXPECT_NE(lora["first_completion_ids"], none["first_completion_ids"]) << lora.dump();
  EXPECT_GT(std::abs(lora["mean_logprob"].get<double>() - none["mean_logprob"].get<double>()),
            1e-3);
  expect_error(base + " --lora-r -1", "--lora-r and --lora-alpha must be >= 0");
}

// bench grpo --model DIR of a config.json alone: random weights, as bench generate makes them.
TEST(CliBench, GrpoOnAConfigOnlyDirectory) {
  const std::string dir = temp("config_only");
  fs::create_directories(dir);
  fs::copy_file(kQwen3 + "/config.json", dir + "/config.json");
  const std::string args =
      " --device cpu --fp8 off --prompts 1 --generations 2 --prompt-tokens 4 "
      "--completion-tokens 2 --steps 1 --lora-r 2";
  const nlohmann::json j = bench_json("bench grpo --model " + dir + args);
  EXPECT_EQ(j.value("weights", ""), "random (Model::random on the device)");
  EXPECT_EQ(j.value("last_step/completions/mean_length", 0.0), 2.0);
  EXPECT_GE(j.value("last_step/sampling/token_prob_error/mean", 0.0), 1.0);
  // Control: the checkpoint's directory runs its weights.
  EXPECT_EQ(bench_json("bench grpo --model " + kQwen3 + args).value("weights", ""), "checkpoint");
  fs::remove(dir + "/config.json");
  expect_error("bench grpo --model " + dir + args, "config.json");
  fs::remove_all(dir);
}

// bench grpo --turns: T-turn episodes against single-turn rollouts of the same tokens. The
// episodes take T engine calls, sample C tokens and get (T - 1) x M environment tokens, and
// their later turns find the earlier ones in the prefix cache; the single-turn rollout (the
// control: one call, nothing cached) samples C + (T - 1) x M tokens per completion.
TEST(CliBench, GrpoTurnsComparesEpisodesWithSingleTurnRollouts) {
  const std::string base = "bench grpo --model " + kQwen3 +
                           " --device cpu --fp8 off --prompts 2 --generations 2 --prompt-tokens 16 "
                           "--completion-tokens 12 --steps 1 --lora-r 2 --env-tokens 5";
  const nlohmann::json j = bench_json(base + " --turns 3");
  EXPECT_EQ(j.value("multi_turn/engine_calls", 0), 3) << j.dump();
  EXPECT_EQ(j.value("multi_turn/model_tokens", 0), 4 * 12);
  EXPECT_EQ(j.value("multi_turn/env_tokens", 0), 4 * 2 * 5);
  EXPECT_EQ(j.value("single_turn/engine_calls", 0), 1);
  EXPECT_EQ(j.value("single_turn/model_tokens", 0), 4 * (12 + 2 * 5));
  EXPECT_GT(j.value("multi_turn/prefix_hit_tokens", 0), 0);
  EXPECT_EQ(j.value("single_turn/prefix_hit_tokens", -1), 0);
  EXPECT_GT(j.value("multi_turn/rollout_seconds", 0.0), 0.0);
  EXPECT_GT(j.value("single_turn/rollout_seconds", 0.0), 0.0);
  EXPECT_NEAR(
      j.value("multi_turn_over_single_turn", 0.0),
      j.value("multi_turn/rollout_seconds", 0.0) / j.value("single_turn/rollout_seconds", 1.0),
      1e-9);
  expect_error(base + " --turns 0", "--turns must be positive");
  expect_error(base + " --turns 13", "cannot give each of 13 turns a token");
}

// bench ppo on the CPU: two updates of real PPO (policy and value adapters over one base);
// every phase's time and peak memory is reported, positive, and the phases fit in the step.
// Bad sizes are errors naming the flag.
TEST(CliBench, PpoReportsEveryPhase) {
  const std::string model = "bench ppo --model " + kQwen3 +
                            " --device cpu --fp8 off --prompts 2 --prompt-tokens 4 --lora-r 2";
  const auto with = [&](const std::string& generations, const std::string& completion,
                        const std::string& accumulation) {
    return model + " --generations " + generations + " --completion-tokens " + completion +
           " --gradient-accumulation-steps " + accumulation;
  };
  const std::string base = with("2", "3", "2");
  const nlohmann::json j = bench_json(base + " --steps 2");
  EXPECT_EQ(j.value("command", ""), "bench ppo") << j.dump();
  EXPECT_EQ(j.value("responses", 0), 4);
  EXPECT_EQ(j.value("last_step/completions/mean_length", 0.0), 3.0) << j.dump();
  const char* phases[] = {"timing/rollout_seconds",         "timing/reward_seconds",
                          "timing/rollout_logprob_seconds", "timing/rollout_value_seconds",
                          "timing/policy_train_seconds",    "timing/value_train_seconds",
                          "timing/optimizer_seconds"};
  double sum = 0;
  for (const char* k : phases) {
    const std::string key = std::string("last_step/") + k;
    ASSERT_TRUE(j.contains(key)) << key << "\n" << j.dump();
    EXPECT_GT(j[key].get<double>(), 0.0) << key;
    sum += j[key].get<double>();
  }
  // The phases are disjoint intervals of the step (its packing and bookkeeping are the rest).
  const double step = j.value("last_step/timing/step_seconds", 0.0);
  EXPECT_LE(sum, step) << j.dump();
  EXPECT_LE(j.value("last_step/timing/policy_train_seconds", 0.0) +
                j.value("last_step/timing/value_train_seconds", 0.0) +
                j.value("last_step/timing/optimizer_seconds", 0.0),
            j.value("last_step/timing/train_seconds", 0.0));
  for (const char* k :
       {"rollout_tokens_per_second", "train_tokens_per_second", "step_tokens_per_second",
        "peak_memory_bytes/rollout", "peak_memory_bytes/reward",
        "peak_memory_bytes/rollout_logprob", "peak_memory_bytes/rollout_value",
        "peak_memory_bytes/train", "peak_memory_bytes/step", "memory/standby_region_bytes",
        "timing/train_seconds", "timing/step_seconds"}) {
    const std::string key = std::string("last_step/") + k;
    ASSERT_TRUE(j.contains(key)) << key << "\n" << j.dump();
    EXPECT_GT(j[key].get<double>(), 0.0) << key;
  }
  // The step's peak is its largest phase's.
  double largest = 0;
  for (const char* k : {"rollout", "reward", "rollout_logprob", "rollout_value", "train"})
    largest = std::max(largest, j["last_step/peak_memory_bytes/" + std::string(k)].get<double>());
  EXPECT_EQ(j["last_step/peak_memory_bytes/step"].get<double>(), largest);
  // Errors name the flag and come before the model loads.
  expect_error(with("0", "3", "2"), "--generations must be positive, got 0");
  expect_error(with("2", "0", "2"), "--completion-tokens must be positive, got 0");
  expect_error(with("2", "3", "3"), "--gradient-accumulation-steps 3 must divide the 4 responses");
  expect_error(base + " --kv-dtype fp4", "--kv-dtype fp4: expected bf16 or fp8");
  // Registered among bench's subcommands.
  EXPECT_NE(run("bench --help").output.find("ppo"), std::string::npos);
}

// merge: the f32 merged checkpoint's logits are PEFT's unmerged adapter logits; --fp8 row
// writes a compressed-tensors checkpoint that runs as FP8; every bad input leaves no output.
TEST(CliMerge, MergedLogitsArePeftsAndBadInputIsRefused) {
  const std::string ids = read_json(kQwen3 + "/ids.json").dump();
  const std::string csv = ids.substr(1, ids.size() - 2);
  const Tensor ref = read_npy(kQwen3 + "/adapter_logits.npy");
  const std::string out = temp("merged"), fp8 = temp("merged_fp8"), npy = temp("merged") + ".npy";
  const Result m = run("merge " + kQwen3 + " " + kQwen3 + "/adapter " + out + " --dtype f32");
  ASSERT_EQ(m.exit_code, 0) << m.output;
  ASSERT_EQ(run("logits " + out + " --ids " + csv + " --fp8 off --out " + npy).exit_code, 0);
  EXPECT_LE(fp8rl::test::rel_max_diff(read_npy(npy), ref),
            fp8rl::test::kHfFp32Logits + fp8rl::test::kMergeF32Logits);
  ASSERT_EQ(run("logits " + kQwen3 + " --ids " + csv + " --fp8 off --out " + npy).exit_code, 0);
  EXPECT_GT(fp8rl::test::rel_max_diff(read_npy(npy), ref), 100 * fp8rl::test::kHfFp32Logits);

  const Result q = run("merge " + kQwen3 + " " + kQwen3 + "/adapter " + fp8 + " --fp8 row");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  const Result info = run("info " + fp8);
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("row"), std::string::npos) << info.output;

  const std::string llama = fp8rl::test::golden_dir("llama"), fresh = temp("merge_fresh");
  expect_error("merge " + llama + " " + kQwen3 + "/adapter " + fresh, "q_proj");
  expect_error("merge " + kQwen3 + " " + kQwen3 + "/adapter " + kQwen3, "inside it");
  expect_error("merge " + kQwen3 + " " + kQwen3 + "/adapter " + kQwen3 + "/merged", "inside it");
  expect_error("merge " + kQwen3 + " " + kQwen3 + "/adapter " + out, "not an empty directory");
  expect_error("merge " + kQwen3 + " " + kQwen3 + "/adapter " + fresh + " --fp8 off", "--fp8");
  expect_error("merge " + kQwen3 + " " + kQwen3 + "/adapter " + fresh + " --fp8 bogus", "bogus");
  expect_error("merge " + kQwen3 + " " + kQwen3 + "/adapter " + fresh + " --dtype f16", "--dtype");
  expect_error("merge " + kQwen3 + " " + fresh + " " + fresh, "adapter_config.json");
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_FALSE(fs::exists(kQwen3 + "/merged"));
  fs::remove_all(out);
  fs::remove_all(fp8);
  fs::remove(npy);
}

// Every bad input: `fp8rl: error:` naming it, a non-zero exit, and no output file.
TEST(CliGenerate, BadInputIsAClearErrorAndLeavesNoOutput) {
  const std::string in = temp("bad_in") + ".jsonl", out = temp("bad_out") + ".jsonl";
  const std::string base = "generate " + kQwen3 + " --prompts " + in + " --out " + out;
  auto expect_failure = [&](const std::string& lines, const std::string& flags,
                            const std::string& fragment, const std::string& model = "") {
    write_file(in, lines);
    const std::string args =
        model.empty() ? base + " " + flags
                      : "generate " + model + " --prompts " + in + " --out " + out + " " + flags;
    const Result r = run(args);
    EXPECT_GT(r.exit_code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("fp8rl: error:"), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << args;
    EXPECT_FALSE(fs::exists(out + ".tmp")) << args;
  };
  const std::string ok = R"({"prompt_ids": [1, 2, 3]})"
                         "\n";
  // The control: the same command succeeds on a good file.
  write_file(in, ok);
  ASSERT_EQ(run(base + " --max-tokens 2").exit_code, 0);
  ASSERT_TRUE(fs::exists(out));
  fs::remove(out);

  expect_failure(ok + "{not json\n", "", "line 2: not a JSON object");
  expect_failure(ok + "\n[1, 2]\n", "", "line 3: not a JSON object");
  expect_failure(R"({"n": 1})"
                 "\n",
                 "", "line 1: needs exactly one of prompt_ids, prompt, messages");
  expect_failure(ok + R"({"prompt_ids": [1], "prompt": "hi"})"
                      "\n",
                 "", "line 2: needs exactly one of");
  expect_failure(R"({"prompt_ids": [1, 256]})"
                 "\n",
                 "", "line 1: prompt id 256 is outside the vocabulary");
  expect_failure(R"({"prompt_ids": [-1]})"
                 "\n",
                 "", "prompt id -1 is outside the vocabulary");
  expect_failure(R"({"prompt_ids": []})"
                 "\n",
                 "", "prompt_ids must be a non-empty list");
  expect_failure(R"({"prompt_ids": ["a"]})"
                 "\n",
                 "", "prompt id \"a\" is not a token id");
  expect_failure(R"({"prompt": "hello"})"
                 "\n",
                 "", "needs the model's tokenizer");
  // Longer than the context (max_position_embeddings = 256), with and without max_tokens.
  const std::string long_ids =
      nlohmann::json{{"prompt_ids", std::vector<int>(250, 5)}}.dump() + "\n";
  expect_failure(long_ids, "--max-tokens 12", "exceeds the model's context of 256");
  expect_failure(
      nlohmann::json{{"prompt_ids", std::vector<int>(257, 5)}}.dump() + "\n", "--max-tokens 1",
      "a prompt of 257 tokens plus max_tokens 1 (258 tokens) exceeds the model's context");
  // A KV budget that holds no block, and one too small for the prompt ever.
  expect_failure(ok, "--kv-memory 0.000001", "holds no block");
  expect_failure(nlohmann::json{{"prompt_ids", std::vector<int>(29, 5)}}.dump() + "\n",
                 "--kv-memory 0.00004 --max-tokens 12", "can never fit the KV pool");
  expect_failure(ok, "--kv-memory -1", "--kv-memory must be >= 0");
  // Invalid sampling values, as flags and as per-line overrides.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--temperature -0.5", "temperature must be >= 0"}, {"--top-p 0", "top_p must be in (0, 1]"},
      {"--top-p 1.5", "top_p must be in (0, 1]"},         {"--top-k -2", "top_k must be >= -1"},
      {"--min-p 2", "min_p must be in [0, 1]"},           {"--n 0", "n must be >= 1"},
      {"--max-tokens 0", "max_tokens must be >= 1"}};
  for (const auto& [flag, message] : bad) {
    expect_failure(ok, flag, message);
    std::string key = flag.substr(2, flag.find(' ') - 2);
    std::replace(key.begin(), key.end(), '-', '_');
    nlohmann::json line = {{"prompt_ids", {1, 2, 3}}};
    line[key] = nlohmann::json::parse(flag.substr(flag.find(' ') + 1));
    expect_failure(ok + line.dump() + "\n", "", "line 2: sampling: " + message);
  }
  expect_failure(ok + R"({"prompt_ids": [1], "temperature": "hot"})"
                      "\n",
                 "", "line 2: sampling: 'temperature'");
  // chat_template_kwargs: a mapping, and for chat lines only.
  expect_failure(ok, "--chat-template-kwargs '[1]'", "--chat-template-kwargs [1] is not a mapping");
  expect_failure(ok, "--chat-template-kwargs '{oops'", "--chat-template-kwargs: not JSON");
  expect_failure(R"({"prompt_ids": [1], "chat_template_kwargs": {"enable_thinking": false}})"
                 "\n",
                 "", "line 1: chat_template_kwargs applies to a messages line only");
  // An adapter made for another architecture's shapes (qwen3: 4 heads of 64; llama: 6 of 32).
  expect_failure(ok, "--adapter " + kQwen3 + "/adapter", "q_proj",
                 fp8rl::test::golden_dir("llama"));
  expect_failure(ok, "--adapter /nonexistent/adapter", "/nonexistent/adapter");
  // Missing files.
  fs::remove(in);
  const Result r = run(base);
  EXPECT_GT(r.exit_code, 0);
  EXPECT_NE(r.output.find("fp8rl: error: --prompts file '" + in + "': cannot open"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
  write_file(in, ok);
  expect_failure(ok, "", "config.json", "/nonexistent/model");
  fs::remove(in);
}

// A copy of the qwen3 golden (vocab 256) with a byte-level tokenizer whose vocabulary is the
// 256 byte symbols of tests/data/tokenizer/tiny_byte_level (its merges and added tokens, ids
// past 256, dropped) and a chat template in plain text.
std::string chat_model(bool with_template) {
  const std::string dir = temp(with_template ? "chat_model" : "chat_model_nt");
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
    fs::copy_file(kQwen3 + "/" + f, dir + "/" + f);
  nlohmann::json tok =
      read_json(std::string(FP8RL_TEST_DATA) + "/tokenizer/tiny_byte_level/tokenizer.json");
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [k, v] : tok["model"]["vocab"].items())
    if (v.get<int>() < 256) vocab[k] = v;
  EXPECT_EQ(vocab.size(), 256u);
  tok["model"]["vocab"] = vocab;
  tok["model"]["merges"] = nlohmann::json::array();
  tok["added_tokens"] = nlohmann::json::array();
  write_file(dir + "/tokenizer.json", tok.dump());
  nlohmann::json cfg = nlohmann::json::object();
  if (with_template)
    cfg["chat_template"] =
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}";
  write_file(dir + "/tokenizer_config.json", cfg.dump());
  return dir;
}

// `fp8rl generate` on one messages line: the completion's text.
std::string generate_text(const std::string& model, const nlohmann::json& messages,
                          const std::string& flags) {
  const std::string in = temp("chat_gen_in") + ".jsonl", out = temp("chat_gen_out") + ".jsonl";
  write_file(in, nlohmann::json{{"messages", messages}}.dump() + "\n");
  const Result r = run("generate " + model + " --prompts " + in + " --out " + out + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto lines = read_jsonl(out);
  fs::remove(in);
  fs::remove(out);
  return lines.empty() ? "" : lines[0]["completions"][0]["text"].get<std::string>();
}

// A scripted chat: two turns then /exit. stdout is the two replies, one line each, and each
// reply is what `generate` writes for the same history and seed.
TEST(CliChat, ScriptedSessionEqualsGenerate) {
  const std::string model = chat_model(true);
  const std::string script = temp("chat_script") + ".txt";
  write_file(script, "hello there\nand now?\n/exit\nnever read\n");
  const std::string sampling = "--seed 11 --temperature 0.9 --top-k 50 --max-tokens 10";
  const Result chat = run("chat " + model + " " + sampling, "< " + script + " 2>/dev/null");
  ASSERT_EQ(chat.exit_code, 0) << chat.output;

  nlohmann::json messages = nlohmann::json::array();
  messages.push_back({{"role", "user"}, {"content", "hello there"}});
  const std::string first = generate_text(model, messages, sampling);
  messages.push_back({{"role", "assistant"}, {"content", first}});
  messages.push_back({{"role", "user"}, {"content", "and now?"}});
  const std::string second = generate_text(model, messages, sampling);
  EXPECT_FALSE(first.empty());
  EXPECT_FALSE(second.empty());
  EXPECT_EQ(chat.output, first + "\n" + second + "\n");

  // Negative control: another seed, other replies.
  const Result other =
      run("chat " + model + " --seed 12 --temperature 0.9 --top-k 50 --max-tokens 10",
          "< " + script + " 2>/dev/null");
  ASSERT_EQ(other.exit_code, 0);
  EXPECT_NE(other.output, chat.output);

  // /reset: the second "hello there" starts from an empty history again, so the same reply.
  write_file(script, "hello there\n/reset\nhello there\n");
  const Result reset = run("chat " + model + " " + sampling, "< " + script + " 2>/dev/null");
  ASSERT_EQ(reset.exit_code, 0);
  EXPECT_EQ(reset.output, first + "\n" + first + "\n");
  // Without /reset the second turn sees the first: another reply.
  write_file(script, "hello there\nhello there\n");
  const Result twice = run("chat " + model + " " + sampling, "< " + script + " 2>/dev/null");
  EXPECT_NE(twice.output, reset.output);

  // --system is the template's first message.
  const std::string sys =
      generate_text(model,
                    nlohmann::json::array({{{"role", "system"}, {"content", "be brief"}},
                                           {{"role", "user"}, {"content", "hello there"}}}),
                    sampling);
  write_file(script, "hello there\n");
  const Result with_system =
      run("chat " + model + " --system 'be brief' " + sampling, "< " + script + " 2>/dev/null");
  EXPECT_EQ(with_system.output, sys + "\n");
  fs::remove(script);
  fs::remove_all(model);
}

TEST(CliChat, BadInputIsAClearError) {
  const std::string script = temp("chat_bad") + ".txt";
  write_file(script, "hi\n");
  expect_error("chat " + kQwen3 + " < " + script, "has no tokenizer.json");
  const std::string no_template = chat_model(false);
  expect_error("chat " + no_template + " < " + script, "has no chat template");
  const std::string model = chat_model(true);
  expect_error("chat " + model + " --temperature -1 < " + script, "temperature must be >= 0");
  expect_error("chat " + model + " --adapter " + kQwen3 + "/nope < " + script, "nope");
  // A conversation that outgrows the context (256 tokens): a script stops with the error.
  write_file(script, std::string(300, 'a') + "\n");
  expect_error("chat " + model + " --seed 1 < " + script,
               "plus a reply's first token (319 tokens) exceeds the model's context of 256 "
               "positions (max_position_embeddings); /reset starts a new one");
  fs::remove(script);
  fs::remove_all(no_template);
  fs::remove_all(model);
}

}  // namespace

namespace {

// Every argument error: exit code 1 and exactly one line, "fp8rl: error: ...".
void expect_one_line_error(const std::string& args, const std::string& fragment) {
  const Result r = run(args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
  EXPECT_EQ(r.output.rfind("fp8rl: error: ", 0), 0u) << args << "\n" << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << args << "\n" << r.output;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A snapshot of every file under dir (name -> bytes), to show that a refused command left the
// input untouched.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[e.path().string()] = file_bytes(e.path().string());
  return files;
}

}  // namespace

TEST(Cli, ArgumentErrorsAreOneLineWithExitCodeOne) {
  expect_one_line_error("info", "is required");
  expect_one_line_error("", "subcommand");
  expect_one_line_error("nosuchcommand", "unknown command 'nosuchcommand'");
  expect_one_line_error("info " + kQwen3 + " --bogus", "--bogus");
  expect_one_line_error("logits " + kQwen3 + " --ids", "--ids");
  expect_one_line_error("init --arch qwen3 --preset tiny --out /tmp/x --seed notanumber", "seed");
  expect_one_line_error("schemes " + kQwen3 + " --tokens 0", "--tokens must be positive");
  // --help and --version still succeed.
  EXPECT_EQ(run("--help").exit_code, 0);
  EXPECT_EQ(run("info --help").exit_code, 0);
  const Result v = run("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.output.find("fp8rl"), std::string::npos);
}

// An error shows its message; the source location only with FP8RL_DEBUG=1, which --help names.
TEST(Cli, ErrorsShowTheLocationOnlyWhenDebugging) {
  const std::string args = "schemes " + kQwen3 + " --tokens 0";
  const Result r = run(args);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--tokens must be positive"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("(at "), std::string::npos) << r.output;
  ::setenv("FP8RL_DEBUG", "1", 1);
  const Result d = run(args);
  ::unsetenv("FP8RL_DEBUG");
  EXPECT_NE(d.output.find("--tokens must be positive (at src/cli/cmd_schemes.cpp:"),
            std::string::npos)
      << d.output;
  EXPECT_NE(run("--help").output.find("FP8RL_DEBUG=1"), std::string::npos);
  EXPECT_NE(run("bench generate --help").output.find("FP8RL_DEBUG=1"), std::string::npos);
}

// fp8rl's OpenMP threads wait passively unless the user chose how (main.cpp executes the
// program once more with OMP_WAIT_POLICY=passive). libgomp's OMP_DISPLAY_ENV=verbose prints
// the spin count each time it starts: the default 300000, then 0 after the one re-execution;
// a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept and nothing runs twice. ctest itself runs
// with OMP_WAIT_POLICY set, hence env -u.
TEST(Cli, OpenMpWaitsPassivelyUnlessTheUserChose) {
  const auto spin_counts = [](const std::string& env) {
    const std::string cmd = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose " +
                            env + " " + std::string(FP8RL_BIN) + " --version 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    EXPECT_EQ(pclose(p), 0) << cmd;
    std::vector<std::string> counts;
    const std::string key = "GOMP_SPINCOUNT = '";
    for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + 1))
      counts.push_back(
          out.substr(at + key.size(), out.find('\'', at + key.size()) - at - key.size()));
    return counts;
  };
  const std::vector<std::string> fresh = spin_counts("");
  if (fresh.empty()) GTEST_SKIP() << "the OpenMP runtime is not libgomp";
  EXPECT_EQ(fresh, (std::vector<std::string>{"300000", "0"}));
  EXPECT_EQ(spin_counts("OMP_WAIT_POLICY=active").size(), 1u);
  EXPECT_EQ(spin_counts("GOMP_SPINCOUNT=1000"), (std::vector<std::string>{"1000"}));
}

TEST(Cli, OutputsNeverOverwriteInputsOrSpecialFiles) {
  const std::string base = temp("outputs");
  const std::string model = base + "/model", link = base + "/link";
  fs::create_directories(base);
  ASSERT_EQ(run("init --arch qwen3 --preset tiny --out " + model).exit_code, 0);
  fs::create_directory_symlink(model, link);
  const auto before = snapshot(model);
  for (const std::string& out :
       {model, model + "/", model + "/.", model + "/../model", link, base, base + "/."}) {
    expect_one_line_error("quantize " + model + " " + out + " --scheme row", "refusing to write");
  }
  EXPECT_EQ(snapshot(model), before);
  // init over an existing model directory: refused, unless --force.
  expect_one_line_error("init --arch qwen3 --preset tiny --out " + model + " --seed 9",
                        "already holds a model: give --force");
  EXPECT_EQ(snapshot(model), before);
  ASSERT_EQ(run("init --arch qwen3 --preset tiny --out " + model + " --seed 9 --force").exit_code,
            0);
  EXPECT_NE(snapshot(model), before);

  // logits --out: never a FIFO, a symlink, a device or an input file.
  const std::string fifo = base + "/fifo", target = base + "/target.npy", sym = base + "/sym.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(target) << "keep";
  fs::create_symlink(target, sym);
  expect_one_line_error("logits " + model + " --ids 1 --out " + fifo, "is a FIFO");
  expect_one_line_error("logits " + model + " --ids 1 --out " + sym, "is a symbolic link");
  EXPECT_EQ(file_bytes(target), "keep");
  expect_one_line_error("logits " + model + " --ids 1 --out " + model + "/config.json",
                        "inside the input");
  expect_one_line_error("logits " + model + " --ids 1 --out " + model, "is a directory");
  struct stat null_before, null_after;
  ASSERT_EQ(::stat("/dev/null", &null_before), 0);
  expect_one_line_error("logits " + model + " --ids 1 --out /dev/null", "is a device");
  ASSERT_EQ(::stat("/dev/null", &null_after), 0);
  EXPECT_TRUE(S_ISCHR(null_after.st_mode));
  EXPECT_EQ(null_before.st_ino, null_after.st_ino);
  EXPECT_TRUE(fs::is_fifo(fifo));
  // A regular file is replaced (write-then-rename).
  ASSERT_EQ(run("logits " + model + " --ids 1,2 --out " + target).exit_code, 0);
  EXPECT_EQ(read_npy(target).shape().dims[0], 2);
  fs::remove_all(base);
}

TEST(Cli, InputsAreRegularFilesAndBoundedJson) {
  const std::string base = temp("inputs");
  const std::string model = base + "/model";
  fs::create_directories(base);
  ASSERT_EQ(run("init --arch qwen3 --preset tiny --out " + model).exit_code, 0);
  // A FIFO in place of config.json fails at once instead of blocking in open().
  fs::rename(model + "/config.json", base + "/config.json");
  ASSERT_EQ(::mkfifo((model + "/config.json").c_str(), 0600), 0);
  expect_one_line_error("info " + model, "is not a regular file");
  fs::remove(model + "/config.json");
  // 100k-deep nesting: a clean error from every file kind the CLI reads.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::ofstream(model + "/config.json") << R"({"architectures":)" << deep << "}";
  expect_one_line_error("info " + model, "limit of 256");
  fs::copy_file(base + "/config.json", model + "/config.json",
                fs::copy_options::overwrite_existing);
  std::ofstream(base + "/messages.json") << deep;
  std::ofstream(model + "/tokenizer_config.json") << R"({"chat_template":"x"})";
  expect_one_line_error("chat-template " + model + " --messages-file " + base + "/messages.json",
                        "limit of 256");
  std::ofstream(model + "/tokenizer_config.json") << R"({"chat_template":"x","y":)" << deep << "}";
  expect_one_line_error("chat-template " + model + " --messages-file " + base + "/messages.json",
                        "limit of 256");
  // More tokens than the model has positions (the golden Qwen3: max_position_embeddings 256).
  std::string ids = "1";
  for (int i = 0; i < 256; ++i) ids += ",1";
  expect_one_line_error("logits " + kQwen3 + " --ids " + ids + " --out " + base + "/x.npy",
                        "--ids (257 tokens) exceeds the model's context of 256 positions "
                        "(max_position_embeddings)");
  fs::remove_all(base);
}

// info checks the checkpoint against its architecture as loading does.
TEST(Cli, InfoRejectsACheckpointWithTensorsMissing) {
  const std::string base = temp("info_missing");
  const std::string model = base + "/model";
  fs::create_directories(base);
  ASSERT_EQ(run("init --arch qwen3 --preset tiny --out " + model).exit_code, 0);
  ASSERT_EQ(run("info " + model).exit_code, 0);
  {
    const Checkpoint ck = Checkpoint::open(model);
    std::vector<std::pair<std::string, TensorView>> kept;
    std::map<std::string, std::string> copies;  // the views must outlive the mapping
    for (const std::string& n : ck.names()) {
      if (n == "model.layers.0.mlp.down_proj.weight") continue;
      const TensorView v = ck.view(n);
      copies[n].assign(static_cast<const char*>(v.data), v.nbytes());
    }
    for (auto& [n, bytes] : copies)
      kept.emplace_back(n, TensorView(bytes.data(), ck.info(n).dtype, ck.info(n).shape));
    write_checkpoint(base + "/rewritten", kept);
  }
  fs::rename(base + "/rewritten/model.safetensors", model + "/model.safetensors");
  expect_one_line_error("info " + model,
                        "missing tensors (1): model.layers.0.mlp.down_proj.weight");
  fs::remove_all(base);
}

namespace {

const std::string kDemoModel = FP8RL_SOURCE_DIR "/examples/demo/model";

// chat_template_kwargs reach the chat template of generate (the flag, a line's own over it) and
// of grpo's prompts: a copy of the demo model whose template raises when enable_thinking is
// false renders without them (the control) and raises with them.
TEST(CliChatTemplateKwargs, ReachTheTemplate) {
  const std::string model = temp("thinking_model");
  fs::create_directories(model);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                        "special_tokens_map.json", "tokenizer.json"})
    fs::copy_file(kDemoModel + "/" + f, model + "/" + f);
  nlohmann::json tc = read_json(kDemoModel + "/tokenizer_config.json");
  tc["chat_template"] =
      "{% if enable_thinking is defined and not enable_thinking %}{{ raise_exception('thinking "
      "is off') }}{% endif %}" +
      tc["chat_template"].get<std::string>();
  write_file(model + "/tokenizer_config.json", tc.dump());
  const std::string in = temp("thinking_in") + ".jsonl", out = temp("thinking_out") + ".jsonl";
  const std::string chat = R"({"messages": [{"role": "user", "content": "What is 1+2?"}])";
  const std::string base = "generate " + model + " --prompts " + in + " --out " + out +
                           " --max-tokens 2 --temperature 0";
  write_file(in, chat + "}\n");
  const Result plain = run(base);
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  const Result flag = run(base + R"( --chat-template-kwargs '{"enable_thinking": false}')");
  EXPECT_NE(flag.output.find("thinking is off"), std::string::npos) << flag.output;
  write_file(in, chat + R"(, "chat_template_kwargs": {"enable_thinking": false}})" + "\n");
  const Result line = run(base);
  EXPECT_NE(line.output.find("line 1:"), std::string::npos) << line.output;
  EXPECT_NE(line.output.find("thinking is off"), std::string::npos) << line.output;
  // The line's own value wins over the flag's.
  write_file(in, chat + R"(, "chat_template_kwargs": {"enable_thinking": true}})" + "\n");
  const Result over = run(base + R"( --chat-template-kwargs '{"enable_thinking": false}')");
  EXPECT_EQ(over.exit_code, 0) << over.output;
  // grpo renders its chat prompts with the config's chat_template_kwargs.
  const std::string data = temp("thinking_prompts") + ".jsonl";
  write_file(data, chat + R"(, "answer": "3"})" + "\n");
  const std::string grpo =
      "grpo " + model + " --data " + data + " --output-dir " + temp("thinking_grpo") +
      " --dry-run --num-generations 2 --max-completion-length 8 " +
      "--per-device-train-batch-size 2 --rewards '[{\"type\": \"answer_match\"}]'";
  EXPECT_EQ(run(grpo).exit_code, 0);
  const Result off = run(grpo + R"( --chat-template-kwargs '{"enable_thinking": false}')");
  EXPECT_NE(off.output.find("thinking is off"), std::string::npos) << off.output;
  fs::remove_all(model);
}

// A Qwen3-MoE model end to end: info shows the MoE fields, the CPU forward runs (also with
// --fp8), SFT with attention LoRA trains, and what MoE models cannot do yet fails in one line
// at the start.
TEST(CliMoe, InfoLogitsTrainingAndWhatIsNotSupportedYet) {
  const std::string model = temp("moe_model");
  ASSERT_EQ(run("init --arch qwen3-moe --preset tiny --out " + model).exit_code, 0);
  const Result info = run("info " + model);
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("Qwen3MoeForCausalLM"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("moe              top-2 of 4 experts (weights renormalized), expert "
                             "intermediate 96, on 1 of 2 layers"),
            std::string::npos)
      << info.output;
  EXPECT_NE(info.output.find("moe experts"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("moe routers"), std::string::npos) << info.output;
  for (const char* fp8 : {"", " --fp8 row"}) {
    const std::string npy = temp("moe_logits") + ".npy";
    const Result r = run("logits " + model + " --ids 5,17,200" + fp8 + " --out " + npy);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(npy));
    fs::remove(npy);
  }
  const std::string data = temp("moe_sft") + ".jsonl";
  write_file(data, "{\"input_ids\": [1, 5, 9, 12, 7]}\n");
  // PEFT has no default target modules for qwen3_moe: attention ones train on the CPU (the
  // router and experts frozen), and the --dry-run with the weights plans it; expert targets
  // are refused, and so is a plan from config.json alone (no random MoE model to plan on).
  const std::string run_dir = temp("moe_sft_run");
  const Result sft = run("sft " + model + " --data " + data + " --out " + run_dir +
                         " --steps 1 --lora-target-modules q_proj,v_proj");
  EXPECT_EQ(sft.exit_code, 0) << sft.output;
  EXPECT_TRUE(fs::exists(run_dir + "/adapter_model.safetensors"));
  fs::remove_all(run_dir);
  const Result dry = run("sft " + model + " --data " + data + " --out " + run_dir +
                         " --steps 1 --lora-target-modules q_proj,v_proj --dry-run");
  EXPECT_EQ(dry.exit_code, 0) << dry.output;
  // The experts' adapters too, saved as PEFT names the Hub layout's expert modules.
  const Result experts = run("sft " + model + " --data " + data + " --out " + run_dir +
                             " --steps 1 --lora-target-modules q_proj,gate_proj,down_proj");
  EXPECT_EQ(experts.exit_code, 0) << experts.output;
  EXPECT_NE(file_bytes(run_dir + "/adapter_model.safetensors")
                .find("base_model.model.model.layers.0.mlp.experts.3.down_proj.lora_B.weight"),
            std::string::npos);
  fs::remove_all(run_dir);
  const std::string config_only = temp("moe_config_only");
  fs::create_directories(config_only);
  fs::copy_file(model + "/config.json", config_only + "/config.json");
  expect_one_line_error("sft " + config_only + " --data " + data + " --out " + run_dir +
                            " --steps 1 --lora-target-modules q_proj,v_proj --dry-run",
                        "has MoE layers, which it cannot make yet");
  expect_one_line_error("grpo " + config_only + " --data " + data + " --output-dir " +
                            temp("moe_grpo_run") +
                            " --rewards '[{\"type\": \"answer_match\"}]' --max-prompt-length "
                            "16 --lora-target-modules q_proj,v_proj --dry-run --device cuda",
                        "has MoE layers, which it cannot make yet");
  fs::remove_all(config_only);
  fs::remove_all(run_dir);
  // GRPO with routing replay: the engine records the experts, the round keeps them through a
  // checkpoint, the resumed run replays them; on a dense model the key is an error.
  const std::string tok_from = chat_model(false);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tok_from + "/" + f, model + "/" + f);
  const std::string prompts = temp("moe_prompts") + ".jsonl";
  write_file(prompts,
             "{\"prompt\": \"hi\", \"answer\": \"x\"}\n{\"prompt\": \"yo\", "
             "\"answer\": \"y\"}\n");
  const std::string grpo_dir = temp("moe_grpo_replay");
  const auto grpo = [&](const std::string& m, const std::string& more) {
    return run("grpo " + m + " --data " + prompts + " --output-dir " + grpo_dir +
               " --rewards '[{\"type\": \"answer_match\"}]' --max-prompt-length 16 "
               "--lora-target-modules q_proj,v_proj --routing-replay true "
               "--max-completion-length 8 --num-generations 2 --per-device-train-batch-size 2 "
               "--steps-per-generation 2 --save-steps 1 --seed 1 " +
               more);
  };
  const Result first = grpo(model, "--max-steps 1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(file_bytes(grpo_dir + "/metrics.jsonl").find("\"routing/replay_fraction_changed\""),
            std::string::npos);
  // The round in the run state, a JSON string in the safetensors metadata (quotes escaped).
  const std::string state = file_bytes(grpo_dir + "/checkpoint-1/trainer_state.safetensors");
  EXPECT_NE(state.find("routing\\\":[["), std::string::npos);
  const Result resumed = grpo(model, "--max-steps 2 --resume-from-checkpoint true");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  fs::remove_all(grpo_dir);
  const Result dense = grpo(tok_from, "--max-steps 1");
  EXPECT_EQ(dense.exit_code, 1);
  EXPECT_NE(dense.output.find("routing_replay: the model has no MoE layers"), std::string::npos)
      << dense.output;
  fs::remove_all(grpo_dir);
  fs::remove_all(tok_from);
  fs::remove(prompts);
  expect_one_line_error("quantize " + model + " " + temp("moe_q") + " --scheme row",
                        "FP8 checkpoints of MoE models");
  expect_one_line_error("logits " + model + " --ids 1 --device cuda --out " + temp("x") + ".npy",
                        "cuda");
  fs::remove(data);
  fs::remove_all(model);
}

// The training commands: a short SFT run writes PEFT's files, metrics and a config record;
// bad configs, datasets and values are one-line errors naming the problem.
// A model directory without tokenizer.json (the goldens) trains on rows of token ids; a text
// row is then an error naming what is missing.
TEST(CliTrain, SftOnTokenIdsNeedsNoTokenizer) {
  const std::string model = fp8rl::test::golden_dir("llama");
  ASSERT_FALSE(fs::exists(model + "/tokenizer.json"));
  const std::string ids = temp("sft_ids") + ".jsonl", text = temp("sft_text") + ".jsonl";
  write_file(ids, "{\"input_ids\": [1, 5, 9, 12, 7]}\n{\"input_ids\": [3, 4, 5]}\n");
  write_file(text, "{\"input_ids\": [1, 5, 9]}\n{\"text\": \"hello\"}\n");
  const std::string out = temp("sft_ids_run");
  const Result r =
      run("sft " + model + " --data " + ids + " --out " + out + " --steps 1 --batch-size 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(fs::path(out) / "adapter_model.safetensors"));
  expect_one_line_error("sft " + model + " --data " + text + " --out " + temp("sft_text_run"),
                        ":2: a text row needs the model's tokenizer.json");
}

// fp8rl ppo from a run config: TRL's PPO metric names, the policy and value adapters in every
// checkpoint and the run directory, --resume continuing to more updates; bad values and a value
// adapter without a head are one-line errors.
TEST(CliTrain, PpoRunResumeAndBadInput) {
  const std::string out = temp("ppo_run"), cfg = temp("ppo_cfg") + ".yaml";
  write_file(
      cfg, "model: " + kDemoModel + "\ndata: " + std::string(FP8RL_SOURCE_DIR) +
               "/examples/demo/train.jsonl\nper_device_train_batch_size: 4\nlearning_rate: 1.0e-3\n"
               "lora_r: 4\nresponse_length: 4\nstop_token: eos\nnum_ppo_epochs: 1\n"
               "max_steps: 2\nsave_steps: 1\n"
               "rewards: [{type: answer_match, column: answer, mode: numeric}]\n");
  const Result r = run("ppo --config " + cfg + " --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f :
       {"adapter_model.safetensors", "value/adapter_model.safetensors", "value/adapter_config.json",
        "metrics.jsonl", "config.yaml", "checkpoint-1/value/adapter_model.safetensors",
        "checkpoint-2/trainer_state.safetensors"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  EXPECT_NE(file_bytes(out + "/value/adapter_config.json").find("SEQ_CLS"), std::string::npos);
  std::vector<nlohmann::json> m = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 2u);
  for (const char* key : {"objective/kl", "objective/scores", "objective/rlhf_reward",
                          "loss/policy_avg", "loss/value_avg", "val/clipfrac_avg", "lr", "episode"})
    EXPECT_TRUE(m[1].contains(key)) << key;
  const Result again =
      run("ppo --config " + cfg + " --output-dir " + out + " --max-steps 3 --resume");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  m = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2]["step"].get<int64_t>(), 3);
  const std::string dry = temp("ppo_dry");
  const Result d = run("ppo --config " + cfg + " --output-dir " + dry + " --dry-run");
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("value adapter"), std::string::npos) << d.output;
  // One plan with GRPO's: the engine's KV pool and the passes take turns in the standby region.
  EXPECT_NE(d.output.find("standby region"), std::string::npos) << d.output;
  EXPECT_NE(d.output.find("of the engine's KV pool"), std::string::npos) << d.output;
  EXPECT_FALSE(fs::exists(fs::path(dry) / "metrics.jsonl"));
  expect_one_line_error("ppo --config " + cfg + " --lam 2 --output-dir " + temp("ppo_b1"),
                        "lam = 2 is out of range (must be in [0, 1])");
  expect_one_line_error(
      "ppo --config " + cfg + " --num-ppo-epochs 0 --output-dir " + temp("ppo_b2"),
      "num_ppo_epochs = 0 is out of range");
  expect_one_line_error("ppo --config " + cfg + " --value-adapter " + out +
                            "/checkpoint-1 --output-dir " + temp("ppo_b3"),
                        "has no score head");
  fs::remove_all(out);
}

// fp8rl kto from a run config: TRL's metric names in metrics.jsonl, the adapter and the
// checkpoint; a dry run plans without run files; bad rows and values are one-line errors.
TEST(CliTrain, KtoRunAndBadInput) {
  const std::string out = temp("kto_run"), data = temp("kto_data") + ".jsonl",
                    cfg = temp("kto_cfg") + ".yaml";
  write_file(data,
             "{\"prompt\": \"What is 2+2? \", \"completion\": \"4\", \"label\": true}\n"
             "{\"prompt\": \"What is 2+3? \", \"completion\": \"7\", \"label\": false}\n"
             "{\"prompt\": [{\"role\": \"user\", \"content\": \"What is 1+2?\"}], \"completion\": "
             "[{\"role\": \"assistant\", \"content\": \"3\"}], \"label\": true}\n"
             "{\"prompt\": \"What is 3+3? \", \"completion\": \"5\", \"label\": false}\n");
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data +
                      "\nper_device_train_batch_size: 2\nlearning_rate: 1.0e-3\nlora_r: 4\n"
                      "desirable_weight: 1.33\nmax_steps: 2\n");
  const Result r = run("kto --config " + cfg + " --output-dir " + out + " --eval-dataset " + data +
                       " --eval-strategy steps --eval-steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "metrics.jsonl",
                        "config.yaml", "checkpoint-2/trainer_state.safetensors"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  const std::vector<nlohmann::json> m = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 2u);
  for (const char* key : {"loss", "kl", "entropy", "num_tokens", "rewards/chosen",
                          "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected"})
    EXPECT_TRUE(m[1].contains(key)) << key;
  // The evaluation on step 2 only, with TRL's eval_ names.
  for (const char* key : {"eval_loss", "eval_kl", "eval_entropy", "eval_rewards/chosen",
                          "eval_rewards/margins", "eval_num_tokens", "eval_runtime"}) {
    EXPECT_FALSE(m[0].contains(key)) << key;
    EXPECT_TRUE(m[1].contains(key)) << key;
  }
  // At the start the policy is the reference: (1.33 / 2 + 1 / 2) / 2.
  EXPECT_NEAR(m[0]["loss"].get<double>(), (1.33 + 1.0) / 4, 1e-6);
  EXPECT_NE(file_bytes(out + "/config.yaml").find("desirable_weight: 1.33"), std::string::npos);
  const std::string dry = temp("kto_dry");
  const Result d = run("kto --config " + cfg + " --output-dir " + dry + " --dry-run");
  ASSERT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("saved activations"), std::string::npos) << d.output;
  EXPECT_FALSE(fs::exists(fs::path(dry) / "metrics.jsonl"));

  const std::string bad = temp("kto_bad") + ".jsonl";
  const auto expect_bad_row = [&](const std::string& row, const std::string& fragment) {
    write_file(bad, "{\"prompt\": \"a \", \"completion\": \"1\", \"label\": true}\n" + row + "\n");
    expect_one_line_error(
        "kto --config " + cfg + " --data " + bad + " --output-dir " + temp("kto_bad_out"),
        fragment);
  };
  expect_bad_row("{\"prompt\": \"b \", \"completion\": \"2\"}", ":2: the row needs \"label\"");
  expect_bad_row("{\"prompt\": \"b \", \"completion\": \"2\", \"label\": 0}",
                 ":2: \"label\" must be true (desirable) or false (undesirable), got 0");
  expect_bad_row("{\"prompt\": \"b \", \"chosen\": \"2\", \"rejected\": \"3\"}",
                 ":2: the row has \"chosen\"/\"rejected\"");
  expect_bad_row("{\"prompt\": \"b \", \"completion\": \"2\", \"label\": true",
                 ":2:");  // not JSON
  expect_one_line_error("kto --config " + cfg + " --batch-size 1 --output-dir " + temp("kto_b1"),
                        "per_device_train_batch_size = 1 is out of range for loss_type kto");
  expect_one_line_error("kto --config " + cfg + " --beta -1 --output-dir " + temp("kto_b2"),
                        "beta = -1 is out of range");
  expect_one_line_error(
      "kto --config " + cfg + " --loss-type sigmoid --output-dir " + temp("kto_b3"),
      "--loss-type: expected one of kto, apo_zero_unpaired, got 'sigmoid'");
  fs::remove_all(out);
}

TEST(CliTrain, SftRunAndBadInput) {
  const std::string out = temp("sft_run");
  const std::string data = temp("sft_data") + ".jsonl";
  write_file(data,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 1+2?\"}, "
             "{\"role\": \"assistant\", \"content\": \"3\"}]}\n"
             "{\"prompt\": \"What is 2+2? \", \"completion\": \"4\"}\n"
             "{\"text\": \"7+1=8\"}\n");
  const Result r = run("sft " + kDemoModel + " --data " + data + " --out " + out +
                       " --steps 2 --batch-size 2 --lr 1e-3 --lora-r 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"adapter_config.json", "adapter_model.safetensors", "metrics.jsonl",
                        "config.yaml", "checkpoint-2/trainer_state.safetensors"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  const std::vector<nlohmann::json> m = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 2u);
  for (const char* key :
       {"step", "loss", "grad_norm", "lr", "tokens_per_second", "peak_memory_bytes"})
    EXPECT_TRUE(m[1].contains(key)) << key;
  const nlohmann::json cfg = read_json(out + "/adapter_config.json");
  EXPECT_EQ(cfg["peft_type"], "LORA");
  // Bad input.
  const std::string bad = temp("sft_bad") + ".jsonl";
  write_file(bad, "{\"text\": \"ok\"}\n{\"text\": \n");
  expect_one_line_error("sft " + kDemoModel + " --data " + bad + " --out " + temp("o1"), ":2:");
  write_file(bad, "{\"text\": \"ok\"}\n{\"label\": 1}\n");
  expect_one_line_error("sft " + kDemoModel + " --data " + bad + " --out " + temp("o2"), ":2:");
  expect_one_line_error("sft " + kDemoModel + " --data " + data + " --lr -1", "learning_rate");
  expect_one_line_error("sft " + kDemoModel + " --data " + data + " --max-stepz 3", "--max-steps");
  expect_one_line_error("sft " + kDemoModel + " --data " + data + " --adapter " +
                            fp8rl::test::golden_dir("qwen3") + "/adapter --out " + temp("o3"),
                        "adapter");
  // Continuing the run's adapter: its adapter_config.json rules (config.yaml records its r 4,
  // not a fresh adapter's default 16; lora_alpha given equal to it is fine), and a LoRA flag that
  // contradicts it is an error naming both values.
  const std::string next = temp("sft_next");
  const Result c = run("sft " + kDemoModel + " --data " + data + " --adapter " + out + " --out " +
                       next + " --steps 1 --batch-size 2 --lr 1e-3 --lora-alpha 32");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  std::ifstream yaml_file(next + "/config.yaml");
  const std::string yaml((std::istreambuf_iterator<char>(yaml_file)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(yaml.find("lora_r: 4\n"), std::string::npos) << yaml;
  expect_one_line_error("sft " + kDemoModel + " --data " + data + " --adapter " + out + " --out " +
                            temp("o4") + " --lora-r 8",
                        "lora_r = 8 contradicts the adapter's r = 4");
}

// A config as TRL and Unsloth write them: the plumbing keys print one note line each on stderr
// and the run goes on; config.yaml records the resolved fp8rl keys (lora_target_modules from
// PEFT's default for the demo's qwen3) and none of the ignored ones.
TEST(CliTrain, CopiedTrlConfigRuns) {
  const std::string out = temp("trl_cfg_run"), cfg = temp("trl_cfg") + ".yaml";
  write_file(
      cfg, "model_name_or_path: " + kDemoModel +
               "\ndataset_name: " FP8RL_SOURCE_DIR "/examples/demo/sft.jsonl\noutput_dir: " + out +
               "\nmax_steps: 1\nper_device_train_batch_size: 2\nuse_peft: true\n"
               "bf16: true\nreport_to: none\npush_to_hub: false\n"
               "gradient_checkpointing_kwargs: {use_reentrant: false}\n"
               "use_gradient_checkpointing: unsloth\nload_in_fp8: true\n");
  const Result r = run("sft --config " + cfg, "2>&1 >/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* key : {"use_peft", "bf16", "push_to_hub", "gradient_checkpointing_kwargs"}) {
    const std::string line = std::string("note: ") + key + " = ";
    int count = 0;
    for (size_t at = r.output.find(line); at != std::string::npos; at = r.output.find(line, at + 1))
      ++count;
    EXPECT_EQ(count, 1) << key << "\n" << r.output;
  }
  const std::string yaml = file_bytes(out + "/config.yaml");
  EXPECT_NE(yaml.find("\nlora_target_modules: [\"q_proj\", \"v_proj\"]\n"), std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("\nactivation_offloading: true\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\nfp8: row\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\nassistant_only_loss: false\n"), std::string::npos) << yaml;
  for (const char* ignored :
       {"bf16", "use_peft", "model_name_or_path", "use_gradient_checkpointing"})
    EXPECT_EQ(yaml.find(std::string("\n") + ignored + ":"), std::string::npos) << ignored;
  const nlohmann::json adapter = read_json(out + "/adapter_config.json");
  EXPECT_EQ(adapter["target_modules"].size(), 2u) << adapter.dump();
  // A value that would change the run fails before anything runs.
  write_file(cfg, "model: " + kDemoModel + "\nload_in_4bit: true\n");
  expect_one_line_error("sft --config " + cfg + " --out " + temp("trl_4bit"),
                        "key 'load_in_4bit' in " + cfg + ":2: true is not supported");
}

TEST(CliTrain, GrpoConfigErrors) {
  const std::string cfg = temp("grpo_cfg") + ".yaml";
  write_file(cfg, "model: " + kDemoModel + "\nmax_step: 3\n");
  expect_one_line_error("grpo --config " + cfg, "did you mean 'max_steps'");
  write_file(cfg, "model: " + kDemoModel + "\nloss_type: ppo\n");
  expect_one_line_error("grpo --config " + cfg, "loss_type");
  const std::string data = temp("grpo_data") + ".jsonl";
  write_file(data, "{\"prompt\": \"What is 1+1?\", \"answer\": \"2\"}\n{\"answer\": \"3\"}\n");
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data +
                      "\nrewards:\n  - {type: answer_match, mode: numeric}\n");
  expect_one_line_error("grpo --config " + cfg + " --output-dir " + temp("g1"), ":2:");
  write_file(cfg,
             "model: " + kDemoModel + "\ndata: " + data + "\nrewards:\n  - {type: answer_mach}\n");
  expect_one_line_error("grpo --config " + cfg + " --output-dir " + temp("g2"), "answer_mach");
  // A prompt over max_prompt_length names its row unless truncation is asked for.
  write_file(data, "{\"prompt\": \"What is 1+1?\", \"answer\": \"2\"}\n");
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data +
                      "\nmax_prompt_length: 4\nrewards:\n  - {type: answer_match}\n");
  expect_one_line_error("grpo --config " + cfg + " --output-dir " + temp("g3"), ":1:");
  expect_one_line_error("grpo --config " + cfg + " --output-dir " + temp("g4"),
                        "max_prompt_length");
  const Result r = run("grpo --config " + cfg + " --output-dir " + temp("g5") +
                       " --truncation --max-steps 1 --num-generations 2 "
                       "--per-device-train-batch-size 2 --max-completion-length 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // The eval dataset is read and checked before the first step: a missing file or a bad row
  // names the file (and the line); eval keys without one, or eval_steps <= 0, name the key.
  const std::string eval = temp("grpo_eval") + ".jsonl";
  write_file(eval, "{\"prompt\": \"What is 1+1?\", \"answer\": \"2\"}\n{\"prompt\": 7}\n");
  const std::string trains = " --truncation --num-generations 2 --per-device-train-batch-size 2 ";
  expect_one_line_error("grpo --config " + cfg + " --output-dir " + temp("g6") + trains +
                            "--eval-strategy steps --eval-dataset " + eval,
                        eval + ":2:");
  expect_one_line_error("grpo --config " + cfg + " --output-dir " + temp("g7") + trains +
                            "--eval-on-start --eval-dataset " + eval + ".missing",
                        eval + ".missing");
  expect_one_line_error(
      "grpo --config " + cfg + " --output-dir " + temp("g8") + trains + "--eval-strategy epoch",
      "eval_strategy = epoch needs an eval_dataset");
  expect_one_line_error("grpo --config " + cfg + " --output-dir " + temp("g9") + trains +
                            "--eval-strategy steps --eval-steps -1 --eval-dataset " + eval,
                        "eval_steps = -1 is out of range");
}

// --dry-run (sft, grpo, dpo) prints the memory plan and trains nothing: the parts (GRPO's
// standby region, the larger of the engine's KV pool and the pass) and a total that is their
// sum; no run files.
TEST(CliTrain, DryRunPrintsThePlanAndTrainsNothing) {
  const std::string data = temp("dry_sft") + ".jsonl";
  write_file(data,
             "{\"text\": \"7+1=8\"}\n{\"prompt\": \"What is 2+2? \", \"completion\": \"4\"}\n");
  const std::string grpo_data = temp("dry_grpo") + ".jsonl";
  write_file(grpo_data, "{\"prompt\": \"What is 1+1?\", \"answer\": \"2\"}\n");
  const std::string cfg = temp("dry_grpo_cfg") + ".yaml";
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + grpo_data +
                      "\nrewards:\n  - {type: answer_match}\n");
  const std::string dpo_data = temp("dry_dpo") + ".jsonl";
  write_file(dpo_data, "{\"prompt\": \"What is 2+2? \", \"chosen\": \"4\", \"rejected\": \"5\"}\n");
  const std::string sft_out = temp("dry_sft_out"), grpo_out = temp("dry_grpo_out"),
                    dpo_out = temp("dry_dpo_out");
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"sft " + kDemoModel + " --data " + data + " --out " + sft_out + " --dry-run", sft_out},
      // The prompt and its completions within the demo model's context of 256 (the default
      // max_completion_length, 512, is an error at once).
      {"grpo --config " + cfg + " --output-dir " + grpo_out +
           " --num-generations 2 --per-device-train-batch-size 2 --max-completion-length 8"
           " --dry-run",
       grpo_out},
      {"dpo " + kDemoModel + " --data " + dpo_data + " --output-dir " + dpo_out + " --dry-run",
       dpo_out}};
  for (const auto& [args, out] : runs) {
    const Result r = run(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::istringstream lines(r.output);
    double sum = 0, total = -1;
    std::set<std::string> names;
    for (std::string line; std::getline(lines, line);) {
      const size_t mib = line.find(" MiB");
      if (line.rfind("  ", 0) != 0 || mib == std::string::npos) continue;
      const size_t num = line.find_last_of(' ', mib - 1) + 1;
      const double v = std::stod(line.substr(num, mib - num));
      std::string name = line.substr(2, num - 2);
      name.erase(name.find_last_not_of(' ') + 1);
      names.insert(name);
      if (name == "total")
        total = v;
      else if (name.rfind("host", 0) != 0)
        sum += v;
    }
    for (const char* n : {"weights", "adapter", "optimizer state", "workspace", "total"})
      EXPECT_TRUE(names.count(n)) << n << "\n" << r.output;
    EXPECT_TRUE(names.count(args.rfind("grpo", 0) == 0 ? "standby region" : "saved activations"))
        << r.output;
    EXPECT_NEAR(total, sum, 0.05 * double(names.size())) << r.output;  // each rounded to 0.1
    EXPECT_GT(total, 0.0);
    EXPECT_FALSE(fs::exists(fs::path(out) / "config.yaml")) << out;
    EXPECT_FALSE(fs::exists(fs::path(out) / "metrics.jsonl")) << out;
  }
}

// The parts of a printed memory plan ("  name   12.3 MiB  (note)"), name -> MiB.
std::map<std::string, double> plan_parts(const std::string& output) {
  std::map<std::string, double> parts;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    const size_t mib = line.find(" MiB");
    if (line.rfind("  ", 0) != 0 || mib == std::string::npos) continue;
    const size_t num = line.find_last_of(' ', mib - 1) + 1;
    std::string name = line.substr(2, num - 2);
    name.erase(name.find_last_not_of(' ') + 1);
    parts[name] = std::stod(line.substr(num, mib - num));
  }
  return parts;
}

// A copy of the demo model without its weights (config.json, the tokenizer and its configs),
// and a directory of config.json alone.
struct ConfigOnlyDirs {
  std::string with_tokenizer, bare;
};
ConfigOnlyDirs config_only_dirs(const std::string& base) {
  ConfigOnlyDirs d{base + "/no_weights", base + "/bare"};
  fs::create_directories(d.with_tokenizer);
  fs::create_directories(d.bare);
  for (const auto& e : fs::directory_iterator(kDemoModel))
    if (e.path().extension() != ".safetensors")
      fs::copy_file(e.path(), fs::path(d.with_tokenizer) / e.path().filename());
  fs::copy_file(kDemoModel + "/config.json", d.bare + "/config.json");
  return d;
}

// --dry-run over a model directory without weights plans from config.json: with the tokenizer
// the dataset is read and the plan equals the one of the directory with its weights, part for
// part; without it the plan takes the configured lengths and says the data was not tokenized;
// with --device cuda on a machine (or build) without a GPU it is the CUDA plan (the cuBLASLt
// workspace, bf16 weights), said to be an estimate made without a device. Controls: the same
// runs without --dry-run fail, the estimate is marked as one and the real plan is not.
TEST(CliTrain, DryRunOfAConfigOnlyDirectoryEstimates) {
  const std::string base = temp("config_only");
  const ConfigOnlyDirs dirs = config_only_dirs(base);
  const std::string sft_data = base + "/sft.jsonl", grpo_data = base + "/grpo.jsonl",
                    dpo_data = base + "/dpo.jsonl";
  write_file(sft_data,
             "{\"text\": \"7+1=8\"}\n{\"prompt\": \"What is 2+2? \", \"completion\": \"4\"}\n");
  write_file(grpo_data, "{\"prompt\": \"What is 1+1?\", \"answer\": \"2\"}\n");
  write_file(dpo_data, "{\"prompt\": \"What is 2+2? \", \"chosen\": \"4\", \"rejected\": \"5\"}\n");
  const auto args = [&](const std::string& cmd, const std::string& model) {
    const std::string out = base + "/out_" + cmd;
    if (cmd == "sft") return "sft " + model + " --data " + sft_data + " --out " + out;
    if (cmd == "grpo")
      return "grpo " + model + " --data " + grpo_data + " --output-dir " + out +
             " --rewards '[{\"type\": \"answer_match\"}]' --num-generations 2"
             " --per-device-train-batch-size 2 --max-prompt-length 64 --max-completion-length 32";
    return "dpo " + model + " --data " + dpo_data + " --output-dir " + out;
  };
  const bool gpu = run("info " + kQwen3 + " --device cuda").exit_code == 0;
  for (const std::string cmd : {"sft", "grpo", "dpo"}) {
    SCOPED_TRACE(cmd);
    const Result real = run(args(cmd, kDemoModel) + " --dry-run");
    ASSERT_EQ(real.exit_code, 0) << real.output;
    EXPECT_EQ(real.output.find("estimate"), std::string::npos) << real.output;
    const Result est = run(args(cmd, dirs.with_tokenizer) + " --dry-run");
    ASSERT_EQ(est.exit_code, 0) << est.output;
    EXPECT_NE(est.output.find("this plan is an estimate for --device cpu: " + dirs.with_tokenizer +
                              " holds no weights"),
              std::string::npos)
        << est.output;
    EXPECT_EQ(est.output.find("not tokenized"), std::string::npos) << est.output;
    const auto real_parts = plan_parts(real.output), est_parts = plan_parts(est.output);
    EXPECT_EQ(real_parts, est_parts) << real.output << "\n" << est.output;
    EXPECT_GT(est_parts.at("weights"), 0.5);  // 0.8M fp32 parameters

    const Result bare = run(args(cmd, dirs.bare) + " --dry-run");
    ASSERT_EQ(bare.exit_code, 0) << bare.output;
    EXPECT_NE(bare.output.find("not tokenized, " + dirs.bare + " has no tokenizer.json"),
              std::string::npos)
        << bare.output;
    const auto bare_parts = plan_parts(bare.output);
    EXPECT_EQ(bare_parts.at("weights"), est_parts.at("weights"));
    double sum = 0;
    for (const auto& [name, v] : bare_parts)
      if (name != "total" && name.rfind("host", 0) != 0) sum += v;
    EXPECT_NEAR(bare_parts.at("total"), sum, 0.05 * double(bare_parts.size())) << bare.output;
    // The configured lengths (sft, dpo: max_length 1024) are longer than the demo's rows.
    if (cmd != "grpo") {
      EXPECT_GT(bare_parts.at("saved activations"), est_parts.at("saved activations"));
    }

    const Result cuda = run(args(cmd, dirs.with_tokenizer) + " --dry-run --device cuda");
    ASSERT_EQ(cuda.exit_code, 0) << cuda.output;
    EXPECT_NE(cuda.output.find("this plan is an estimate for --device cuda"), std::string::npos)
        << cuda.output;
    if (!gpu) {
      EXPECT_NE(cuda.output.find("made without a device"), std::string::npos) << cuda.output;
    }
    EXPECT_NE(cuda.output.find("GEMM workspace 32.0"), std::string::npos) << cuda.output;
    // bf16 on the device: half the demo's fp32 weights.
    EXPECT_NEAR(plan_parts(cuda.output).at("weights"), est_parts.at("weights") / 2, 0.1);
    const Result bare_cuda = run(args(cmd, dirs.bare) + " --dry-run --device cuda");
    EXPECT_EQ(bare_cuda.exit_code, 0) << bare_cuda.output;

    // Without --dry-run neither directory runs.
    EXPECT_EQ(run(args(cmd, dirs.with_tokenizer)).exit_code, 1);
    EXPECT_EQ(run(args(cmd, dirs.bare)).exit_code, 1);
    for (const char* out : {"/out_sft", "/out_grpo", "/out_dpo"})
      EXPECT_FALSE(fs::exists(base + out + "/config.yaml"));
  }
  // GRPO without a tokenizer needs max_prompt_length to plan.
  expect_one_line_error("grpo " + dirs.bare + " --data " + grpo_data + " --output-dir " + base +
                            "/g --rewards '[{\"type\": \"answer_match\"}]' --max-prompt-length null"
                            " --dry-run",
                        "give max_prompt_length for the plan");
  fs::remove_all(base);
}

// --gpu-memory GIB (gpu_memory): what a run may hold on the device. Without a GPU here the CUDA
// plan is an estimate (--dry-run --device cuda over Qwen3-8B's config.json in FP8-row): under a
// budget the plan shows it and what it leaves, and the engine's KV pool (in the standby region)
// is what the budget leaves, not what 256 full-length sequences could use; a plan over the
// budget prints itself, then fails naming each part and the excess; a budget below the weights
// fails before anything is planned, naming both. Controls: the same plan without a budget, and
// one within it. Bad values and a budget on the CPU are one-line errors.
TEST(CliTrain, GpuMemoryBudget) {
  const std::string base = temp("gpu_memory");
  fs::create_directories(base);
  const std::string data = base + "/prompts.jsonl", prompts = base + "/p.jsonl";
  write_file(data, "{\"prompt\": \"What is 1+1?\", \"answer\": \"2\"}\n");
  write_file(prompts, "{\"prompt_ids\": [1, 2, 3]}\n");
  const std::string grpo = "grpo " FP8RL_SOURCE_DIR "/tools/bench/configs/qwen3-8b --data " + data +
                           " --output-dir " + base +
                           "/out --rewards '[{\"type\": \"answer_match\"}]' --num-generations 8"
                           " --per-device-train-batch-size 8 --max-prompt-length 128"
                           " --max-completion-length 512 --lora-r 32 --lora-target-modules "
                           "all-linear --gradient-checkpointing --fp8 row --device cuda --dry-run";
  const Result unbounded = run(grpo);
  ASSERT_EQ(unbounded.exit_code, 0) << unbounded.output;
  EXPECT_EQ(unbounded.output.find("gpu_memory"), std::string::npos) << unbounded.output;

  const Result fits = run(grpo + " --gpu-memory 16");
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  const auto parts = plan_parts(fits.output);
  EXPECT_DOUBLE_EQ(parts.at("budget"), 16384.0) << fits.output;
  EXPECT_LE(parts.at("total"), 16384.0) << fits.output;
  // The KV pool takes what is left, less the budget's margin (256 MiB at 16 GiB) and the
  // scratch arena it may leave as a hole when it grows.
  EXPECT_GE(parts.at("total"), 16384.0 - 1024) << fits.output;
  EXPECT_LT(parts.at("standby region"), plan_parts(unbounded.output).at("standby region"));
  EXPECT_GT(parts.at("weights"), 8000.0);
  EXPECT_NE(fits.output.find("(gpu_memory; "), std::string::npos) << fits.output;
  EXPECT_NE(fits.output.find(" left)"), std::string::npos) << fits.output;
  EXPECT_NE(fits.output.find("this plan is an estimate for --device cuda"), std::string::npos)
      << fits.output;

  // A KV size that the budget cannot hold beside the rest is refused as the engine is planned.
  expect_one_line_error(grpo + " --gpu-memory 12 --kv-memory 8",
                        "engine: gpu_memory 12.00 GiB: a KV pool of 8.00 GiB (kv_memory)");
  // A plan over the budget is printed, then refused naming every part and the excess (SFT's
  // configured lengths, the rows not tokenized: no tokenizer.json beside the config).
  const Result over = run("sft " FP8RL_SOURCE_DIR "/tools/bench/configs/qwen3-8b --data " + data +
                          " --out " + base +
                          "/sft8b --max-length 8192 --per-device-train-batch-size 4 --fp8 row "
                          "--device cuda --gpu-memory 16 --dry-run");
  EXPECT_EQ(over.exit_code, 1) << over.output;
  EXPECT_NE(over.output.find("memory plan of the largest micro-batch"), std::string::npos)
      << over.output;
  EXPECT_LT(over.output.find("memory plan of the largest micro-batch"),
            over.output.find("fp8rl: error: gpu_memory 16.00 GiB: weights "))
      << over.output;
  EXPECT_NE(over.output.find(" + saved activations "), std::string::npos) << over.output;
  // SFT checkpoints by default (TRL's gradient_checkpointing: true): the hint names what is
  // still off.
  EXPECT_NE(over.output.find(" GiB over; lower per_device_train_batch_size or max_length, turn "
                             "on activation_offloading, or give a larger gpu_memory"),
            std::string::npos)
      << over.output;
  // A budget the pass cannot fit beside the rest is refused as it is planned, naming it. (The
  // step plan of a CUDA build is larger than a CPU build's estimate of it: 13 GiB holds either
  // one's engine and neither one's pass, 11 GiB neither one's engine.)
  expect_one_line_error(grpo + " --gpu-memory 13",
                        "grpo: gpu_memory 13.00 GiB: the training pass over the longest "
                        "micro-batch needs ");
  expect_one_line_error(grpo + " --gpu-memory 11", "engine: gpu_memory 11.00 GiB leaves ");
  expect_one_line_error(grpo + " --gpu-memory 11", "leave no room for one KV block");

  expect_one_line_error(grpo + " --gpu-memory 4", "gpu_memory 4.00 GiB: weights ");
  expect_one_line_error(grpo + " --gpu-memory 4", "the weights alone do not fit");
  for (const std::string bad : {"-1", "0", "5000"})
    expect_one_line_error(grpo + " --gpu-memory " + bad,
                          "gpu_memory = " + bad + " is out of range (must be in (0, 4096] GiB");
  expect_one_line_error(grpo + " --gpu-memory lots", "--gpu-memory");
  expect_one_line_error(
      "sft " + kDemoModel + " --data " + data + " --out " + base + "/sft --gpu-memory 1 --dry-run",
      "gpu_memory = 1 applies to device cuda only");
  // The commands without a config take it as a flag, and check it the same way.
  expect_one_line_error("generate " + kDemoModel + " --prompts " + prompts + " --out " + base +
                            "/o.jsonl --gpu-memory 1",
                        "gpu_memory = 1 applies to --device cuda only");
  expect_one_line_error("generate " + kDemoModel + " --prompts " + prompts + " --out " + base +
                            "/o.jsonl --gpu-memory 0 --device cuda",
                        "gpu_memory = 0 is out of range");
  expect_one_line_error(
      "bench generate --preset qwen3-tiny --device cpu --gpu-memory 2 "
      "--prompts 1 --n 1 --prompt-tokens 4 --max-tokens 2",
      "gpu_memory = 2 applies to --device cuda only");
  fs::remove_all(base);
}

// A sequence longer than the model's context is an error naming both numbers before the
// weights load: the directories here have no weights, so any later check would fail on those
// first. YaRN's rope scaling extends the context to factor x original_max_position_embeddings.
TEST(CliTrain, ContextIsCheckedBeforeTheWeightsLoad) {
  const std::string base = temp("context");
  const ConfigOnlyDirs dirs = config_only_dirs(base);
  const std::string model = dirs.with_tokenizer;  // max_position_embeddings 256
  const std::string ids = base + "/ids.jsonl";
  write_file(ids, nlohmann::json{{"prompt_ids", std::vector<int>(250, 5)}}.dump() + "\n");
  expect_one_line_error(
      "generate " + model + " --prompts " + ids + " --out " + base + "/o.jsonl --max-tokens 12",
      "line 1: a prompt of 250 tokens plus max_tokens 12 (262 tokens) exceeds "
      "the model's context of 256 positions (max_position_embeddings)");
  const std::string long_ids = base + "/sft.jsonl";
  write_file(long_ids, nlohmann::json{{"input_ids", std::vector<int>(300, 5)}}.dump() + "\n");
  expect_one_line_error("sft " + model + " --data " + long_ids + " --out " + base + "/s",
                        "the longest example, " + long_ids +
                            " line 1 (300 tokens) exceeds the model's context of 256 positions");
  const std::string prompts = base + "/grpo.jsonl";
  write_file(prompts, "{\"prompt\": \"What is 1+1?\", \"answer\": \"2\"}\n");
  expect_one_line_error(
      "grpo " + model + " --data " + prompts + " --output-dir " + base +
          "/g --rewards '[{\"type\": \"answer_match\"}]' --max-completion-length 256",
      "plus max_completion_length 256 (");
  expect_one_line_error(
      "grpo " + model + " --data " + prompts + " --output-dir " + base +
          "/g --rewards '[{\"type\": \"answer_match\"}]' --max-completion-length 256",
      "exceeds the model's context of 256 positions");
  std::string answer;
  for (int i = 0; i < 300; ++i) answer += "1+1=2, ";
  const std::string pairs = base + "/dpo.jsonl";
  write_file(
      pairs,
      nlohmann::json{{"prompt", "Sum: "}, {"chosen", answer}, {"rejected", "no"}}.dump() + "\n");
  expect_one_line_error(
      "dpo " + model + " --data " + pairs + " --output-dir " + base + "/d --max-length 4096",
      "exceeds the model's context of 256 positions (max_position_embeddings)");

  // YaRN, factor 4 over the 256 positions: 1024. The same request now fits the context and
  // fails at the missing weights; a longer one names the yarn context.
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(model + "/config.json"));
  cfg["rope_parameters"] = {{"rope_type", "yarn"},
                            {"rope_theta", 10000.0},
                            {"factor", 4.0},
                            {"original_max_position_embeddings", 256}};
  write_file(model + "/config.json", cfg.dump());
  const Result fits = run("generate " + model + " --prompts " + ids + " --out " + base +
                          "/o.jsonl --max-tokens 12");
  EXPECT_EQ(fits.exit_code, 1) << fits.output;
  EXPECT_EQ(fits.output.find("exceeds the model's context"), std::string::npos) << fits.output;
  EXPECT_NE(fits.output.find("model.safetensors"), std::string::npos) << fits.output;
  expect_one_line_error(
      "generate " + model + " --prompts " + ids + " --out " + base + "/o.jsonl --max-tokens 775",
      "(1025 tokens) exceeds the model's context of 1024 positions (yarn factor "
      "4 x original_max_position_embeddings 256)");
  fs::remove_all(base);
}

// info names the rope type and the context YaRN gives; rope types fp8rl does not run are an
// error naming them.
TEST(Cli, InfoShowsTheRopeScaling) {
  const std::string base = temp("info_yarn");
  fs::create_directories(base);
  fs::copy_file(kQwen3 + "/model.safetensors", base + "/model.safetensors");
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(kQwen3 + "/config.json"));
  cfg["rope_parameters"] = {{"rope_type", "yarn"},
                            {"rope_theta", 1000000.0},
                            {"factor", 4.0},
                            {"original_max_position_embeddings", 128}};
  write_file(base + "/config.json", cfg.dump());
  const Result r = run("info " + base);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(
      r.output.find("yarn theta 1000000 factor 4 over 128 positions (attention factor 1.13863)"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("context          512 positions (max_position_embeddings 256)"),
            std::string::npos)
      << r.output;
  const Result plain = run("info " + kQwen3);
  EXPECT_NE(plain.output.find("rope             default theta"), std::string::npos) << plain.output;
  cfg["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 1000000.0}, {"factor", 4.0}};
  write_file(base + "/config.json", cfg.dump());
  expect_one_line_error("info " + base,
                        "rope type 'dynamic' is not supported (supported: default, linear, "
                        "llama3, yarn)");
  fs::remove_all(base);
}

// ---- write failures: an unwritable RUN_DIR, a full disk at checkpoint time ----

// Runs fp8rl with `args` (split at spaces; no quoting) and stdout + stderr captured, like run(),
// but as a child under limits (process_run.h): `file_size_limit` bytes of RLIMIT_FSIZE (0: none),
// which makes a write past it fail with EFBIG as a full disk fails with ENOSPC; and, with
// `as_nobody` when the test runs as root (root ignores file modes), as the user nobody. SIGXFSZ
// is reset to its default in the child, so only fp8rl's own handling of it keeps it alive. Exit
// code 125: the child could not drop to nobody.
Result run_limited(const std::string& args, rlim_t file_size_limit, bool as_nobody = false) {
  std::vector<std::string> words{FP8RL_BIN};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  fp8rl::test::ProcessLimits limits;
  limits.file_size = file_size_limit;
  limits.as_nobody = as_nobody;
  limits.merge_output = true;
  const fp8rl::test::ProcessResult p = fp8rl::test::run_process(words, limits);
  Result r{p.exit_code, p.out};
  if (p.signal != 0) r.output += "[killed by signal " + std::to_string(p.signal) + "]";
  return r;
}

// The command line of a short sft or grpo run of the demo model into `out` (steps and
// checkpoints appended by the caller). A constant learning rate: the schedule then does not
// depend on max_steps, so a 2-step run resumed to 4 steps is the 4-step run.
std::string train_args(const std::string& command, const std::string& out) {
  const std::string data = temp(command + "_disk_data") + ".jsonl";
  if (command == "sft") {
    write_file(data,
               "{\"prompt\": \"What is 2+2? \", \"completion\": \"4\"}\n"
               "{\"text\": \"7+1=8\"}\n"
               "{\"prompt\": \"What is 3+5? \", \"completion\": \"8\"}\n"
               "{\"text\": \"9+9=18\"}\n");
    return "sft " + kDemoModel + " --data " + data + " --out " + out +
           " --batch-size 2 --lr 1e-2 --lr-scheduler-type constant --device cpu";
  }
  // The demo's own rows (chat prompts it half solves), so that rewards vary within a group.
  std::ifstream demo(FP8RL_SOURCE_DIR "/examples/demo/train.jsonl");
  std::string rows, line;
  for (int i = 0; i < 16 && std::getline(demo, line); ++i) rows += line + "\n";
  write_file(data, rows);
  const std::string cfg = temp("grpo_disk_cfg") + ".yaml";
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data +
                      "\nrewards:\n  - {type: answer_match, mode: numeric}\n");
  return "grpo --config " + cfg + " --output-dir " + out +
         " --num-generations 4 --per-device-train-batch-size 8 --max-completion-length 4"
         " --lora-r 4 --lora-target-modules all-linear --learning-rate 1e-3"
         " --lr-scheduler-type constant --device cpu";
}

// The other advantage estimators run through the one GRPO trainer; samples.jsonl shows each
// completion's (for rloo with beta, KL-shaped) reward and its advantage.
TEST(CliTrain, GrpoAdvantageEstimators) {
  const std::string out = temp("rloo_run");
  const Result r =
      run(train_args("grpo", out) + " --max-steps 2 --advantage-estimator rloo --beta 0.05");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> samples = read_jsonl(out + "/samples.jsonl");
  ASSERT_EQ(samples.size(), 16u);
  bool differs_from_grpo = false, penalized = false;
  for (size_t g = 0; g < 16; g += 4) {
    double sum = 0;
    for (size_t j = g; j < g + 4; ++j) sum += samples[j]["reward"].get<double>();
    for (size_t j = g; j < g + 4; ++j) {
      const double reward = samples[j]["reward"].get<double>();
      // Leave-one-out: r_i - (sum - r_i) / 3. Control: GRPO's r_i - sum / 4 is 3/4 of it.
      const double loo = reward - (sum - reward) / 3;
      EXPECT_NEAR(samples[j]["advantage"].get<double>(), loo, 1e-9) << j;
      differs_from_grpo |= std::fabs(loo - (reward - sum / 4)) > 1e-6;
      // The answer reward is 0 or 1; round 1 samples at the reference (a fresh adapter), so
      // only round 2's rewards carry the KL penalty.
      const bool integral = reward == std::round(reward);
      if (g < 8) {
        EXPECT_TRUE(integral) << j << ": " << reward;
      }
      penalized |= !integral;
    }
  }
  EXPECT_TRUE(differs_from_grpo) << "rewards constant within every group";
  EXPECT_TRUE(penalized) << "no KL penalty in round 2's rewards";
  const nlohmann::json m = read_jsonl(out + "/metrics.jsonl").back();
  EXPECT_TRUE(std::isfinite(m["loss"].get<double>())) << m.dump();

  const std::string pp = temp("rpp_run");
  const Result b = run(train_args("grpo", pp) +
                       " --max-steps 1 --advantage-estimator reinforce_plus_plus_baseline");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(read_jsonl(pp + "/samples.jsonl").size(), 8u);
  expect_one_line_error(
      train_args("grpo", temp("rloo_bad")) + " --advantage-estimator rloo --scale-rewards batch",
      "scale_rewards batch applies to advantage_estimator grpo only");
}

// fp8rl rloo: RLOOConfig's defaults (beta 0.05, num_generations 2, TRL's RLOO loss) on the
// GRPO loop. With G = 2 the leave-one-out advantage is r_i - r_j of the shaped rewards (clipped
// by reward_clip_range, then KL-penalized); the logged `reward` is TRL's, the rewards as scored:
// in round 1 (policy = reference, no penalty) twice samples.jsonl's rewards clipped at 0.5.
TEST(CliTrain, RlooRunsTrlsRlooWithItsDefaults) {
  const std::string out = temp("rloo_cmd"), data = temp("rloo_cmd_data") + ".jsonl",
                    cfg = temp("rloo_cmd_cfg") + ".yaml";
  std::ifstream demo(FP8RL_SOURCE_DIR "/examples/demo/train.jsonl");
  std::string rows, line;
  for (int i = 0; i < 16 && std::getline(demo, line); ++i) rows += line + "\n";
  write_file(data, rows);
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data +
                      "\nrewards:\n  - {type: answer_match, mode: numeric}\n"
                      "reward_clip_range: [0, 0.5]\n");
  const std::string args = "rloo --config " + cfg +
                           " --per-device-train-batch-size 8 --max-completion-length 4"
                           " --lora-r 4 --lora-target-modules all-linear --learning-rate 1e-3"
                           " --lr-scheduler-type constant --device cpu --max-steps 2";
  const Result r = run(args + " --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string yaml = file_bytes(out + "/config.yaml");
  for (const char* key :
       {"beta: 0.05", "num_generations: 2", "loss_type: rloo", "advantage_estimator: rloo",
        "vllm_importance_sampling_correction: false"})
    EXPECT_NE(yaml.find(key), std::string::npos) << key << "\n" << yaml;
  const std::vector<nlohmann::json> samples = read_jsonl(out + "/samples.jsonl");
  ASSERT_EQ(samples.size(), 16u);
  double round1 = 0;
  for (size_t g = 0; g < 16; g += 2) {
    const double a = samples[g]["reward"].get<double>(), b = samples[g + 1]["reward"].get<double>();
    EXPECT_NEAR(samples[g]["advantage"].get<double>(), a - b, 1e-12) << g;
    EXPECT_NEAR(samples[g + 1]["advantage"].get<double>(), b - a, 1e-12) << g;
    if (g < 8) {  // round 1: the raw 0 / 1 clipped to 0 / 0.5, no penalty
      for (double x : {a, b}) EXPECT_TRUE(x == 0.0 || x == 0.5) << g << ": " << x;
      round1 += a + b;
    }
  }
  const std::vector<nlohmann::json> m = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_GT(m[0]["reward"].get<double>(), 0.0) << "no completion scored: the check is vacuous";
  EXPECT_NEAR(m[0]["reward"].get<double>(), 2 * round1 / 8, 1e-12);
  // TRL's RLOO kl: the rollout policy against the reference, 0 in round 1 (a fresh adapter).
  EXPECT_EQ(m[0]["kl"].get<double>(), 0.0);
  EXPECT_NE(m[1]["kl"].get<double>(), 0.0);
  EXPECT_TRUE(std::isfinite(m[1]["loss"].get<double>()));
  expect_one_line_error(args + " --loss-type dapo --output-dir " + temp("rloo_cmd_bad"),
                        "fp8rl rloo runs TRL's RLOO (advantage_estimator rloo, loss_type rloo), "
                        "got rloo and dapo");
  fs::remove_all(out);
}

// fp8rl online-dpo (and its alias online_dpo): TRL's OnlineDPOConfig keys and defaults in the
// run's config.yaml, TRL's online DPO metrics per step; bad keys and values are one-line errors
// naming them.
TEST(CliTrain, OnlineDpoRunsWithTrlsKeysAndBadKeysAreOneLineErrors) {
  const std::string out = temp("odpo_cmd"), data = temp("odpo_cmd_data") + ".jsonl",
                    cfg = temp("odpo_cmd_cfg") + ".yaml";
  std::ifstream demo(FP8RL_SOURCE_DIR "/examples/demo/train.jsonl");
  std::string rows, line;
  for (int i = 0; i < 16 && std::getline(demo, line); ++i) rows += line + "\n";
  write_file(data, rows);
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data +
                      "\nrewards:\n  - {type: answer_match, mode: numeric}\n"
                      "missing_eos_penalty: 1.0\nbeta: [0.2, 0.1]\n");
  const std::string args = "online_dpo --config " + cfg +
                           " --per-device-train-batch-size 4 --max-new-tokens 4"
                           " --lora-r 4 --lora-target-modules all-linear --learning-rate 1e-3"
                           " --device cpu --max-steps 2";
  const Result r = run(args + " --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("online-dpo step 2/2"), std::string::npos) << r.output;
  const std::string yaml = file_bytes(out + "/config.yaml");
  for (const char* key : {"loss_type: sigmoid", "max_new_tokens: 4", "max_length: 512",
                          "temperature: 0.9", "missing_eos_penalty: 1", "reference_model: start"})
    EXPECT_NE(yaml.find(key), std::string::npos) << key << "\n" << yaml;
  const std::vector<nlohmann::json> m = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["beta"].get<double>(), 0.2);  // epoch 0's
  for (const char* key : {"rewards/accuracies", "objective/scores_margin", "val/contain_eos_token"})
    EXPECT_TRUE(m[1].contains(key)) << key;
  EXPECT_EQ(read_jsonl(out + "/samples.jsonl").size(), 16u);  // 2 steps x 4 prompts x 2
  const std::string bad = " --output-dir " + temp("odpo_cmd_bad");
  expect_one_line_error(args + " --loss-type hinge" + bad,
                        "--loss-type: expected one of sigmoid, ipo");
  expect_one_line_error(args + " --beta 0.1,-1" + bad, "beta holds -1");
  expect_one_line_error(args + " --missing-eos-penalty nan" + bad,
                        "--missing-eos-penalty: expected a number");
  expect_one_line_error(args + " --max-length 4" + bad, "max_length (4) must exceed");
  expect_one_line_error(args + " --judge pairrm" + bad, "pairwise judges are not supported");
  expect_one_line_error(args + " --epsilon 0.3" + bad, "--epsilon");
  fs::remove_all(out);
}

// One line, "fp8rl: error: ..." with `fragment`, a non-zero exit.
void expect_one_line_error(const Result& r, const std::string& what, const std::string& fragment) {
  EXPECT_EQ(r.exit_code, 1) << what << "\n" << r.output;
  EXPECT_EQ(r.output.rfind("fp8rl: error: ", 0), 0u) << what << "\n" << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << what << "\n" << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << what << "\n" << r.output;
}

TEST(CliTrain, UnwritableRunDirIsAClearError) {
  const std::string base = temp("unwritable");
  fs::create_directories(base);
  // A path through a regular file.
  const std::string file = base + "/file";
  write_file(file, "x");
  for (const char* command : {"sft", "grpo"}) {
    const std::string out = file + "/run";
    expect_one_line_error(run_limited(train_args(command, out) + " --max-steps 1", 0), command,
                          "'" + out + "'");
    expect_one_line_error(run_limited(train_args(command, out) + " --max-steps 1", 0), command,
                          "not a directory");
  }
  // A directory without write permission, itself or as the parent of the run directory.
  const std::string locked = base + "/locked";
  fs::create_directories(locked);
  fs::permissions(locked, fs::perms(0555));
  for (const char* command : {"sft", "grpo"}) {
    for (const std::string& out : {locked, locked + "/run"}) {
      const Result r = run_limited(train_args(command, out) + " --max-steps 1", 0, true);
      if (r.exit_code == 125) GTEST_SKIP() << "running as root and cannot switch to nobody";
      expect_one_line_error(r, command, "'" + out + "' is not writable");
      EXPECT_NE(r.output.find("Permission denied"), std::string::npos) << r.output;
    }
    EXPECT_TRUE(fs::is_empty(locked));
  }
  // Negative control: the same run (as the same user) into a directory everyone may write
  // succeeds, so the errors above came from the modes, not from the command line.
  fs::permissions(locked, fs::perms(0777));
  for (const char* command : {"sft", "grpo"}) {
    const std::string out = locked + "/" + command;
    const Result r = run_limited(train_args(command, out) + " --max-steps 1", 0, true);
    EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
    EXPECT_TRUE(fs::exists(out + "/adapter_model.safetensors")) << command;
  }
  fs::remove_all(base);
}

// report_to: tensorboard. An sft run (default directory output_dir/runs/<date>_<host>), a grpo
// run (report_to as a YAML list, logging_dir) and a dpo run (report_to: all) each write one
// event file that holds every
// number of every metrics.jsonl line at its step, tagged train/<key> (transformers' tags), read
// back with the generated Event classes after the framing CRCs are checked. Other trackers, and
// an unwritable logging_dir, are one-line errors before any training; report_to: none writes
// no event file.
std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(e.path().string());
  return files;
}

void expect_metrics_in_events(const std::string& metrics, const std::string& events) {
  std::map<std::pair<int64_t, std::string>, float> scalars;
  const std::vector<std::string> records = read_tfrecords(events);
  ASSERT_FALSE(records.empty());
  for (size_t i = 0; i < records.size(); ++i) {
    fp8rl::tensorboard::Event e;
    ASSERT_TRUE(e.ParseFromString(records[i])) << i;
    if (i == 0) {
      EXPECT_EQ(e.file_version(), "brain.Event:2");
      continue;
    }
    ASSERT_TRUE(e.has_summary()) << i;
    for (const auto& v : e.summary().value()) {
      const auto [it, fresh] = scalars.emplace(std::make_pair(e.step(), v.tag()), v.simple_value());
      EXPECT_TRUE(fresh) << "step " << e.step() << " " << v.tag() << " twice";
    }
  }
  size_t numbers = 0;
  for (const nlohmann::json& line : read_jsonl(metrics)) {
    const int64_t step = line.at("step").get<int64_t>();
    for (const auto& [key, value] : line.items()) {
      if (key == "step" || !(value.is_number() || value.is_boolean())) continue;
      ++numbers;
      const auto it = scalars.find({step, "train/" + key});
      ASSERT_NE(it, scalars.end()) << "step " << step << " train/" << key;
      const float want = value.is_boolean() ? float(value.get<bool>()) : float(value.get<double>());
      EXPECT_EQ(it->second, want) << "step " << step << " " << key;
    }
  }
  EXPECT_GT(numbers, 10u);
  EXPECT_EQ(numbers, scalars.size()) << "scalars that metrics.jsonl does not hold";
}

TEST(CliTrain, ReportToTensorBoard) {
  const std::string base = temp("tensorboard");
  fs::create_directories(base);
  const std::string sft_out = base + "/sft";
  Result r = run_limited(train_args("sft", sft_out) + " --max-steps 2 --report-to tensorboard", 0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> files = event_files(sft_out + "/runs");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(fs::path(files[0]).parent_path().parent_path(), fs::path(sft_out) / "runs");
  EXPECT_EQ(read_jsonl(sft_out + "/metrics.jsonl").size(), 2u);
  expect_metrics_in_events(sft_out + "/metrics.jsonl", files[0]);

  // grpo: report_to as a YAML list and logging_dir, added to the run's config file.
  const std::string grpo_out = base + "/grpo", tb = base + "/tb";
  const std::string grpo_args = train_args("grpo", grpo_out);
  const size_t at = grpo_args.find("--config ") + 9;
  const std::string cfg = grpo_args.substr(at, grpo_args.find(' ', at) - at);
  std::ofstream(cfg, std::ios::app) << "report_to: [tensorboard]\nlogging_dir: " << tb << "\n";
  r = run_limited(grpo_args + " --max-steps 2", 0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  files = event_files(tb);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(fs::path(files[0]).parent_path(), fs::path(tb));
  expect_metrics_in_events(grpo_out + "/metrics.jsonl", files[0]);
  EXPECT_TRUE(event_files(grpo_out).empty());

  // dpo: report_to all (tensorboard here).
  const std::string dpo_data = base + "/dpo.jsonl", dpo_out = base + "/dpo", dpo_tb = base + "/tb2";
  write_file(dpo_data,
             "{\"prompt\": \"What is 2+2? \", \"chosen\": \"4\", \"rejected\": \"5\"}\n"
             "{\"prompt\": \"What is 3+3? \", \"chosen\": \"6\", \"rejected\": \"7\"}\n");
  r = run_limited("dpo " + kDemoModel + " --data " + dpo_data + " --output-dir " + dpo_out +
                      " --max-steps 2 --per-device-train-batch-size 1 --device cpu --report-to all"
                      " --logging-dir " +
                      dpo_tb,
                  0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  files = event_files(dpo_tb);
  ASSERT_EQ(files.size(), 1u);
  expect_metrics_in_events(dpo_out + "/metrics.jsonl", files[0]);

  // report_to: none writes no event file.
  const std::string none_out = base + "/none";
  r = run_limited(train_args("sft", none_out) + " --max-steps 1 --report-to none", 0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(none_out + "/metrics.jsonl"));
  EXPECT_TRUE(event_files(none_out).empty());

  // Errors before the model loads: another tracker, and a logging_dir under a regular file.
  expect_one_line_error(run_limited(train_args("sft", base + "/x") + " --report-to wandb", 0),
                        "wandb", "report_to: 'wandb' is a tracker fp8rl does not have");
  expect_one_line_error(run_limited(train_args("sft", base + "/x") +
                                        " --report-to tensorboard --logging-dir " + cfg + "/tb",
                                    0),
                        "logging_dir", "logging_dir '" + cfg + "/tb'");
  EXPECT_FALSE(fs::exists(base + "/x"));
  fs::remove_all(base);
}

// The keys of a metrics line that measure time or memory, not the training.
bool measured(const std::string& key) {
  return key.find("second") != std::string::npos || key.find("memory") != std::string::npos;
}

class CliFullDisk : public ::testing::TestWithParam<std::string> {};

// A file-size limit stands in for a full disk (it fails write() with EFBIG where a full disk
// fails it with ENOSPC; both take the same path). A run resumed from checkpoint-2 under a
// limit that the metrics lines fit but the next checkpoint's adapter (or its optimizer
// state) does not: a one-line error naming the file and the reason, checkpoint-2 untouched,
// no partial checkpoint-4; resumed again without the limit it ends exactly as an
// uninterrupted run.
TEST_P(CliFullDisk, CheckpointFailureKeepsThePreviousCheckpoint) {
  const std::string command = GetParam();
  const std::string full = temp(command + "_disk_full"), run_dir = temp(command + "_disk_run");

  const std::string args = train_args(command, run_dir) + " --max-steps 4 --save-steps 2";
  const Result a = run_limited(train_args(command, full) + " --max-steps 4 --save-steps 2", 0);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // Two limits: one under the adapter (the first file of checkpoint-4), one between it and the
  // optimizer state (AdamW's two moments: twice the adapter), the checkpoint's last file.
  const rlim_t adapter_bytes = fs::file_size(full + "/checkpoint-4/adapter_model.safetensors");
  const rlim_t state_bytes = fs::file_size(full + "/checkpoint-4/trainer_state.safetensors");
  ASSERT_GT(adapter_bytes, rlim_t(64 << 10));  // metrics lines are ~1 KiB
  ASSERT_GT(state_bytes, adapter_bytes + 1024);
  const std::pair<rlim_t, std::string> limits[] = {
      {adapter_bytes / 2, "adapter_model.safetensors"},
      {(adapter_bytes + state_bytes) / 2, "trainer_state.safetensors"}};
  // The run to interrupt: the uninterrupted run's directory as it was after step 2 (its
  // checkpoint-2 and logs; the logs' later lines are dropped by the resume).
  fs::copy(full, run_dir, fs::copy_options::recursive);
  for (const char* f : {"checkpoint-4", "adapter_model.safetensors", "adapter_config.json"})
    fs::remove_all(run_dir + "/" + f);
  const std::map<std::string, std::string> checkpoint2 = snapshot(run_dir + "/checkpoint-2");
  ASSERT_EQ(checkpoint2.size(), 3u);

  const std::string resume = args + " --resume";
  for (const auto& [limit, file] : limits) {
    SCOPED_TRACE("limit " + std::to_string(limit) + " bytes, failing at " + file);
    const Result limited = run_limited(resume, limit);
    EXPECT_EQ(limited.exit_code, 1) << limited.output;
    // The progress lines of steps 3 and 4, then the error as the last line and the only one.
    const size_t at = limited.output.find("fp8rl: error: ");
    ASSERT_NE(at, std::string::npos) << limited.output;
    const std::string error = limited.output.substr(at);
    EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1) << limited.output;
    EXPECT_EQ(limited.output.find("fp8rl: error: ", at + 1), std::string::npos) << limited.output;
    for (const std::string& fragment :
         {std::string("cannot write checkpoint-4"), file, std::string("File too large"),
          std::string("checkpoints in '")})
      EXPECT_NE(error.find(fragment), std::string::npos) << fragment << "\n" << error;
    // Steps 3 and 4 were logged (the limit let the metrics through), checkpoint-2 is as it
    // was, and nothing of checkpoint-4 is left, under its name or a temporary one.
    EXPECT_EQ(read_jsonl(run_dir + "/metrics.jsonl").size(), 4u);
    EXPECT_TRUE(snapshot(run_dir + "/checkpoint-2") == checkpoint2);
    EXPECT_FALSE(fs::exists(run_dir + "/checkpoint-4"));
    for (const auto& e : fs::directory_iterator(run_dir))
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }

  // What a kill during a checkpoint would leave: a temporary checkpoint of a later step with
  // a state file. The resume neither takes it nor keeps it.
  fs::copy(run_dir + "/checkpoint-2", run_dir + "/.tmp-checkpoint-6");
  write_file(run_dir + "/metrics.jsonl.tmp", "{\"step\": 9}\n");
  // The same resume without the limit (the negative control: the limit alone made it fail).
  const Result again = run_limited(resume, 0);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_FALSE(fs::exists(run_dir + "/.tmp-checkpoint-6"));
  EXPECT_FALSE(fs::exists(run_dir + "/metrics.jsonl.tmp"));
  // Bit for bit the uninterrupted run: its metrics (but timings and memory) and adapters.
  const std::vector<nlohmann::json> m_full = read_jsonl(full + "/metrics.jsonl"),
                                    m_run = read_jsonl(run_dir + "/metrics.jsonl");
  ASSERT_EQ(m_full.size(), 4u);
  ASSERT_EQ(m_run.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m_run[i]["step"], int64_t(i + 1));
    for (const auto& [key, value] : m_full[i].items()) {
      if (measured(key)) continue;
      EXPECT_EQ(m_run[i][key], value) << "step " << i + 1 << " " << key;
    }
  }
  // The resumed steps trained on a signal (not only on the optimizer's momentum).
  EXPECT_GT(m_full[2]["grad_norm"].get<double>() + m_full[3]["grad_norm"].get<double>(), 0.0);
  for (const char* f : {"/adapter_model.safetensors", "/checkpoint-4/adapter_model.safetensors"})
    EXPECT_TRUE(file_bytes(run_dir + f) == file_bytes(full + f)) << f;
  // The optimizer state; its metadata also holds timings (GRPO's round metrics).
  const auto state = SafetensorsFile::open(run_dir + "/checkpoint-4/trainer_state.safetensors");
  const auto state_full = SafetensorsFile::open(full + "/checkpoint-4/trainer_state.safetensors");
  for (const char* t : {"exp_avg", "exp_avg_sq"}) {
    const TensorView x = state->view(t), y = state_full->view(t);
    ASSERT_EQ(x.nbytes(), y.nbytes()) << t;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes()), 0) << t;
  }
  EXPECT_FALSE(file_bytes(run_dir + "/adapter_model.safetensors") ==
               file_bytes(run_dir + "/checkpoint-2/adapter_model.safetensors"));
  fs::remove_all(full);
  fs::remove_all(run_dir);
}

INSTANTIATE_TEST_SUITE_P(Commands, CliFullDisk, ::testing::Values("sft", "grpo"));

// ---- paths, flag spellings, prompt lengths, the terminal ----

// run() in another working directory.
Result run_in(const std::string& dir, const std::string& args) {
  return run(args, "2>&1", dir);
}

// Paths in a config file are relative to the working directory, as in TRL, never to the file's
// folder: model, data, eval_dataset, output_dir, logging_dir, adapter, resume_from_checkpoint and
// a reward process's command, all relative, run from the folder above the config's.
TEST(CliTrain, ConfigPathsAreRelativeToTheWorkingDirectory) {
  const std::string work = temp("cwd_paths");
  fs::create_directories(work + "/configs");
  fs::create_directory_symlink(kDemoModel, work + "/model");
  std::ifstream demo(FP8RL_SOURCE_DIR "/examples/demo/sft.jsonl");
  std::string rows, line;
  for (int i = 0; i < 4 && std::getline(demo, line); ++i) rows += line + "\n";
  write_file(work + "/train.jsonl", rows);
  write_file(work + "/eval.jsonl", rows);
  const std::string common =
      "model: model\ndata: train.jsonl\nper_device_train_batch_size: 2\nlora_r: 4\n"
      "save_steps: 1\n";
  write_file(work + "/configs/first.yaml",
             common +
                 "output_dir: out\nmax_steps: 1\neval_dataset: eval.jsonl\neval_on_start: true\n"
                 "eval_strategy: steps\nreport_to: tensorboard\nlogging_dir: tb\n");
  const Result first = run_in(work, "sft --config configs/first.yaml");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(fs::exists(work + "/out/adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(work + "/out/checkpoint-1"));
  EXPECT_EQ(event_files(work + "/tb").size(), 1u);
  EXPECT_FALSE(fs::exists(work + "/configs/out"));
  EXPECT_NE(file_bytes(work + "/out/metrics.jsonl").find("eval_loss"), std::string::npos);
  // The run's record keeps the paths as given: resumed from the same folder, it reads the same.
  const std::string record = "\n" + file_bytes(work + "/out/config.yaml");
  EXPECT_NE(record.find("\ndata: \"train.jsonl\"\n"), std::string::npos) << record;
  EXPECT_NE(record.find("\nmodel: \"model\"\n"), std::string::npos) << record;
  write_file(work + "/configs/resume.yaml",
             common + "output_dir: out\nmax_steps: 2\nresume_from_checkpoint: out/checkpoint-1\n");
  const Result resumed = run_in(work, "sft --config configs/resume.yaml");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(fs::exists(work + "/out/checkpoint-2"));
  write_file(work + "/configs/next.yaml",
             common + "output_dir: next\nmax_steps: 1\nadapter: out\n");
  const Result next = run_in(work, "sft --config configs/next.yaml");
  ASSERT_EQ(next.exit_code, 0) << next.output;
  EXPECT_TRUE(fs::exists(work + "/next/adapter_model.safetensors"));
  // A reward process's command runs in the working directory too.
  write_file(work + "/reward.py",
             "import json, sys\n"
             "for line in sys.stdin:\n"
             "    n = len(json.loads(line)['completions'])\n"
             "    print(json.dumps({'rewards': [0.5] * n}), flush=True)\n");
  std::ifstream prompts(FP8RL_SOURCE_DIR "/examples/demo/train.jsonl");
  rows.clear();
  for (int i = 0; i < 2 && std::getline(prompts, line); ++i) rows += line + "\n";
  write_file(work + "/prompts.jsonl", rows);
  write_file(work + "/configs/grpo.yaml",
             "model: model\ndata: prompts.jsonl\noutput_dir: grpo\nmax_steps: 1\n"
             "num_generations: 2\nper_device_train_batch_size: 4\nmax_completion_length: 2\n"
             "rewards:\n  - reward_process: python3 reward.py\n");
  const Result grpo = run_in(work, "grpo --config configs/grpo.yaml");
  ASSERT_EQ(grpo.exit_code, 0) << grpo.output;
  ASSERT_EQ(read_jsonl(work + "/grpo/metrics.jsonl").size(), 1u);
  EXPECT_EQ(read_jsonl(work + "/grpo/metrics.jsonl")[0]["reward"], 0.5);
  // The control: from the config's own folder the same relative paths name nothing.
  const Result control = run_in(work + "/configs", "sft --config first.yaml");
  EXPECT_EQ(control.exit_code, 1) << control.output;
  EXPECT_NE(control.output.find("'model/config.json'"), std::string::npos) << control.output;
  fs::remove_all(work);
}

// The flags in TRL's underscore spelling are the dashed flags, for every command (the training
// commands' config keys and the other commands' own flags); --help shows the dashes.
TEST(Cli, UnderscoreFlagsAreTheDashedOnes) {
  const std::string in = temp("underscore_in") + ".jsonl", out = temp("underscore_out") + ".jsonl";
  write_file(in, "{\"prompt_ids\": [1, 2, 3]}\n");
  const Result g = run("generate " + kQwen3 + " --prompts " + in + " --out " + out +
                       " --max_tokens=3 --min_tokens 3 --temperature 0");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  ASSERT_EQ(read_jsonl(out).size(), 1u);
  EXPECT_EQ(read_jsonl(out)[0]["completions"][0]["completion_ids"].size(), 3u);
  // "1 prompt", not "1 prompts".
  EXPECT_NE(g.output.find("generate: 1 prompt, 3 output tokens in "), std::string::npos)
      << g.output;
  const std::string ids = temp("underscore_ids") + ".jsonl", run_dir = temp("underscore_run");
  write_file(ids, "{\"input_ids\": [1, 5, 9, 12, 7]}\n{\"input_ids\": [3, 4, 5]}\n");
  const Result sft =
      run("sft " + fp8rl::test::golden_dir("llama") + " --data " + ids + " --output_dir " +
          run_dir + " --max_steps 1 --per_device_train_batch_size=2 --learning_rate 0.01");
  ASSERT_EQ(sft.exit_code, 0) << sft.output;
  const std::string yaml = file_bytes(run_dir + "/config.yaml");
  EXPECT_NE(yaml.find("\nlearning_rate: 0.01\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\nper_device_train_batch_size: 2\n"), std::string::npos) << yaml;
  // One step is "1 step".
  EXPECT_NE(sft.output.find("trained 1 step; "), std::string::npos) << sft.output;
  EXPECT_EQ(sft.output.find("1 steps"), std::string::npos) << sft.output;
  // A typo in either spelling gets the dashed suggestion.
  expect_one_line_error("sft " + kDemoModel + " --data " + ids + " --max_stepz 3",
                        "did you mean '--max-steps'?");
  const Result help = run("sft --help");
  EXPECT_NE(help.output.find("--learning-rate"), std::string::npos);
  EXPECT_EQ(help.output.find("--learning_rate"), std::string::npos);
  fs::remove(in);
  fs::remove(out);
  fs::remove(ids);
  fs::remove_all(run_dir);
}

// A generate line's key that is neither a column nor a sampling key is an error naming the key
// and the line, before the model loads (here there is no model at all).
TEST(CliGenerate, UnknownLineKeysAreErrors) {
  const std::string in = temp("line_keys_in") + ".jsonl", out = temp("line_keys_out") + ".jsonl";
  const std::string args = "generate /nonexistent/model --prompts " + in + " --out " + out;
  write_file(in,
             "{\"prompt_ids\": [1, 2, 3], \"temperature\": 0}\n"
             "{\"prompt_ids\": [1, 2, 3], \"temprature\": 0.5}\n");
  expect_one_line_error(args, "line 2: unknown key 'temprature' (did you mean 'temperature'?)");
  write_file(in, "{\"messages\": [], \"max_new_tokens\": 4}\n");
  expect_one_line_error(args, "line 1: unknown key 'max_new_tokens'");
  // Known keys pass on to the model's checks (here: there is none).
  write_file(in, "{\"prompt_ids\": [1], \"n\": 2, \"stop\": \"x\", \"seed\": 3}\n");
  expect_one_line_error(args, "/nonexistent/model/config.json");
  EXPECT_FALSE(fs::exists(out));
  fs::remove(in);
}

// A prompt that leaves no room for the completion in the model's context (the demo model's
// 256 positions) is an error naming both lengths before the weights load: the weights here are
// not even a safetensors file.
TEST(CliTrain, PromptWithoutRoomForTheCompletionFailsBeforeTheWeightsLoad) {
  const std::string model = temp("no_weights_model");
  fs::create_directories(model);
  for (const char* f : {"config.json", "generation_config.json", "special_tokens_map.json",
                        "tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(kDemoModel + "/" + f, model + "/" + f);
  write_file(model + "/model.safetensors", "not weights");
  const std::string data = temp("room_data") + ".jsonl", eval = temp("room_eval") + ".jsonl";
  const std::string row = R"({"prompt": "What is 1+1?", "answer": "2"})";
  write_file(data, row + "\n");
  write_file(eval,
             row + "\n" + R"({"prompt": ")" + std::string(60, '9') + R"(", "answer": "9"})" + "\n");
  const std::string grpo = "grpo " + model + " --data " + data + " --output-dir " +
                           temp("room_run") + " --rewards '[{\"type\": \"answer_match\"}]'" +
                           " --num-generations 2 --per-device-train-batch-size 2";
  Result r = run(grpo + " --max-completion-length 250");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(data + ":1: a prompt of "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tokens plus max_completion_length 250 ("), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tokens) exceeds the model's context of 256 positions "
                          "(max_position_embeddings); lower max_completion_length"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("max_prompt_length: 6 and truncation: true"), std::string::npos)
      << r.output;
  // The eval prompts too.
  r = run(grpo + " --max-completion-length 200 --eval-strategy steps --eval-dataset " + eval);
  EXPECT_NE(r.output.find(eval + ":2: a prompt of "), std::string::npos) << r.output;
  // A completion that fits: the check passes and the weights fail to load (the control).
  r = run(grpo + " --max-completion-length 200");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.find("a prompt of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  // generate: prompt + max_tokens against the context, also before the weights.
  const std::string in = temp("room_in") + ".jsonl", out = temp("room_out") + ".jsonl";
  write_file(in, nlohmann::json{{"prompt_ids", std::vector<int>(250, 5)}}.dump() + "\n");
  expect_one_line_error(
      "generate " + model + " --prompts " + in + " --out " + out + " --max-tokens 12",
      "line 1: a prompt of 250 tokens plus max_tokens 12 (262 tokens) exceeds the model's "
      "context of 256 positions (max_position_embeddings)");
  write_file(in, nlohmann::json{{"prompt", std::string(300, 'a')}}.dump() + "\n");
  expect_one_line_error("generate " + model + " --prompts " + in + " --out " + out,
                        "exceeds the model's context of 256");
  fs::remove_all(model);
  fs::remove(data);
  fs::remove(eval);
  fs::remove(in);
}

// `fp8rl chat ARGS` at a terminal: stdin and stderr (the prompt, the echo) a pseudo-terminal,
// stdout (the replies) a file, XDG_STATE_HOME `state` (the history file's home). Each of `typed`
// is sent once the session has printed a reply for each earlier one and shown its prompt; a
// session that runs past 120 s is killed (exit_code -1).
Result chat_at_terminal(const std::string& args, const std::vector<std::string>& typed,
                        const std::string& state, const std::vector<size_t>& replies_before) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  EXPECT_GE(master, 0);
  EXPECT_EQ(::grantpt(master), 0);
  EXPECT_EQ(::unlockpt(master), 0);
  const std::string slave = ::ptsname(master);
  const std::string out = temp("tty_out") + ".txt";
  std::vector<std::string> words = {FP8RL_BIN, "chat"};
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();  // the terminal becomes the controlling one, as a shell's is
    const int tty = ::open(slave.c_str(), O_RDWR);
    const int file = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (tty < 0 || file < 0) ::_exit(126);
    ::dup2(tty, 0);
    ::dup2(file, 1);
    ::dup2(tty, 2);
    ::setenv("TERM", "xterm", 1);
    ::setenv("XDG_STATE_HOME", state.c_str(), 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  const auto newlines = [&] {
    const std::string text = fs::exists(out) ? file_bytes(out) : "";
    return size_t(std::count(text.begin(), text.end(), '\n'));
  };
  std::string terminal;
  size_t sent = 0;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (true) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n > 0) terminal.append(buf, size_t(n));
    }
    size_t prompts = 0;
    for (size_t at = terminal.find("> "); at != std::string::npos; at = terminal.find("> ", at + 1))
      ++prompts;
    if (sent < typed.size() && prompts > sent && newlines() >= replies_before[sent]) {
      EXPECT_EQ(::write(master, typed[sent].data(), typed[sent].size()),
                ssize_t(typed[sent].size()));
      ++sent;
    }
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
  }
  ::close(master);
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, file_bytes(out)};
  EXPECT_EQ(sent, typed.size()) << terminal;
  fs::remove(out);
  return r;
}

// At a terminal, chat reads lines through libedit: the up arrow brings back the line entered
// before (the second turn is then what a script typing the line twice gets), and the lines are
// kept in $XDG_STATE_HOME/fp8rl/chat_history for the next session. A pipe gets no history file.
TEST(CliChat, TerminalSessionHasLineEditingAndHistory) {
  const std::string model = chat_model(true);
  const std::string state = temp("chat_state");
  fs::create_directories(state);
  const std::string sampling = "--seed 11 --temperature 0.9 --top-k 50 --max-tokens 6";
  const std::string script = temp("chat_tty_script") + ".txt";
  write_file(script, "hello\nhello\n");
  const Result piped = run("chat " + model + " " + sampling, "< " + script + " 2>/dev/null");
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  const std::string up = "\x1b[A";
  // Enter is a carriage return at a terminal.
  const Result tty =
      chat_at_terminal(model + " " + sampling, {"hello\r", up + "\r", "/exit\r"}, state, {0, 1, 2});
  ASSERT_EQ(tty.exit_code, 0) << tty.output;
  EXPECT_EQ(tty.output, piped.output);
  const std::string history = state + "/fp8rl/chat_history";
  ASSERT_TRUE(fs::exists(history));
  EXPECT_EQ(fs::status(history).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  // A new session: two lines back (past /exit) is "hello" of the last session.
  write_file(script, "hello\n");
  const Result one = run("chat " + model + " " + sampling, "< " + script + " 2>/dev/null");
  const Result recalled =
      chat_at_terminal(model + " " + sampling, {up + up + "\r", "/exit\r"}, state, {0, 1});
  ASSERT_EQ(recalled.exit_code, 0) << recalled.output;
  EXPECT_EQ(recalled.output, one.output);
  // Piped input leaves no history.
  const std::string piped_state = temp("chat_state_piped");
  ::setenv("XDG_STATE_HOME", piped_state.c_str(), 1);
  EXPECT_EQ(run("chat " + model + " " + sampling, "< " + script + " 2>/dev/null").exit_code, 0);
  ::unsetenv("XDG_STATE_HOME");
  EXPECT_FALSE(fs::exists(piped_state));
  fs::remove(script);
  fs::remove_all(state);
  fs::remove_all(model);
}

}  // namespace

// fp8rl serve's settings are checked before it loads or listens (the server itself:
// tests/serve/openai_client.mjs).
TEST(CliServe, BadSettings) {
  expect_error("serve " + kQwen3 + " --port 70000", "--port must be in [0, 65535]");
  expect_error("serve " + kQwen3 + " --lora-modules a=x --lora-modules b=y",
               "one server serves one adapter");
  expect_error("serve " + kQwen3 + " --lora-modules justaname", "expected NAME=DIR");
  expect_error("serve " + kQwen3 + " --lora-modules a=x --adapter y", "give one");
  expect_error("serve /nonexistent/model", "config.json");
}

// fp8rl reward end to end: a YAML run with margins and centering trains, evaluates and saves a
// SEQ_CLS adapter; GRPO takes it as a reward_model over the same base; bad values and rows are
// one-line errors with a non-zero exit.
TEST(CliReward, TrainsAndTheAdapterRewardsGrpo) {
  const std::string data = temp("rm_pairs") + ".jsonl";
  std::string rows;
  for (int i = 0; i < 8; ++i)
    rows += fmt::format(
        "{{\"prompt\": [{{\"role\": \"user\", \"content\": \"What is {}+{}?\"}}], \"chosen\": "
        "[{{\"role\": \"assistant\", \"content\": \"{}\"}}], \"rejected\": [{{\"role\": "
        "\"assistant\", \"content\": \"{}\"}}], \"margin\": 0.5}}\n",
        10 + i, 20 + i, 30 + 2 * i, 31 + 2 * i);
  write_file(data, rows);
  const std::string out = temp("rm_out"), cfg = temp("rm_cfg") + ".yaml";
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data + "\neval_dataset: " + data +
                      "\neval_strategy: steps\neval_steps: 2\nmax_steps: 2\n"
                      "per_device_train_batch_size: 4\ncenter_rewards_coefficient: 0.01\n"
                      "lora_target_modules: [q_proj, v_proj]\nfp8: row\n");
  const Result r = run("reward --config " + cfg + " --output-dir " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("eval_rewards/accuracies"), std::string::npos) << r.output;
  std::ifstream m(out + "/metrics.jsonl");
  std::string last, line;
  while (std::getline(m, line)) last = line;
  const nlohmann::json metrics = nlohmann::json::parse(last);
  EXPECT_TRUE(metrics.contains("eval_rewards/accuracies")) << last;
  EXPECT_TRUE(metrics.contains("accuracy")) << last;
  EXPECT_EQ(read_json(out + "/adapter_config.json")["task_type"], "SEQ_CLS");

  // The adapter as GRPO's reward over the policy's base.
  const std::string prompts = temp("rm_prompts") + ".jsonl";
  write_file(prompts,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 1+2?\"}]}\n"
             "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 3+4?\"}]}\n");
  const std::string grpo_cfg = temp("rm_grpo") + ".yaml", grpo_out = temp("rm_grpo_out");
  write_file(grpo_cfg, "model: " + kDemoModel + "\ndata: " + prompts +
                           "\nrewards:\n  - {type: reward_model, model: " + kDemoModel +
                           ", adapter: " + out +
                           ", weight: 0.5}\nnum_generations: 2\n"
                           "per_device_train_batch_size: 4\nmax_completion_length: 4\n"
                           "max_steps: 1\nfp8: row\n");
  const Result g = run("grpo --config " + grpo_cfg + " --output-dir " + grpo_out);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  const std::vector<nlohmann::json> grpo_metrics = read_jsonl(grpo_out + "/metrics.jsonl");
  ASSERT_EQ(grpo_metrics.size(), 1u);
  EXPECT_TRUE(grpo_metrics[0].contains("rewards/reward_model/mean"));
  // --dry-run plans the reward model's scoring (a phase of the standby region) and lists its
  // adapter; control: the run with a rule reward instead plans neither.
  const Result planned =
      run("grpo --config " + grpo_cfg + " --output-dir " + temp("rm_plan") + " --dry-run");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("the reward models' scoring of a round: KV"), std::string::npos)
      << planned.output;
  EXPECT_EQ(plan_parts(planned.output).count("reward models"), 1u) << planned.output;
  const Result rule =
      run("grpo --config " + grpo_cfg + " --output-dir " + temp("rm_plan") +
          " --dry-run --rewards '[{\"type\": \"length_penalty\", \"mode\": \"linear\", "
          "\"target_length\": 1, \"per_token\": 0.1}]'");
  ASSERT_EQ(rule.exit_code, 0) << rule.output;
  EXPECT_EQ(rule.output.find("reward models"), std::string::npos) << rule.output;
  EXPECT_EQ(plan_parts(rule.output).count("standby region"), 1u) << rule.output;

  // Bad input: one line naming the problem, exit 1.
  expect_error("reward --config " + cfg + " --output-dir " + temp("rm_bad") +
                   " --center-rewards-coefficient -1",
               "center_rewards_coefficient = -1 is out of range");
  const std::string bad = temp("rm_bad_rows") + ".jsonl";
  write_file(bad, "{\"chosen\": \"1\", \"rejected\": \"2\", \"margin\": \"x\"}\n");
  expect_error("reward " + kDemoModel + " --data " + bad + " --output-dir " + temp("rm_bad2"),
               ":1: \"margin\" must be a finite number");
  write_file(grpo_cfg, "model: " + kDemoModel + "\ndata: " + prompts +
                           "\nrewards:\n  - {type: reward_model, model: " + kDemoModel + "}\n");
  expect_error("grpo --config " + grpo_cfg + " --output-dir " + temp("rm_bad3"),
               "is Qwen3ForCausalLM with no score head");
  // Merging would drop the head: refused.
  expect_error("merge " + kDemoModel + " " + out + " " + temp("rm_merged"),
               "the adapter is a SEQ_CLS reward adapter with a score head");
  for (const std::string& d : {out, grpo_out}) fs::remove_all(d);
}

// grpo with an environment (docs/ENVIRONMENTS.md): --environment and --max-turns from the
// command line, no `rewards` needed; the episodes' metrics reach metrics.jsonl. An environment
// that answers garbage, or settings it cannot run with, end in one line.
TEST(CliEnvironment, GrpoRunsEpisodesAndBadEnvironmentsFailInOneLine) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const std::string out = temp("env_grpo");
  const std::string base = "grpo " + kDemoModel +
                           " --data " FP8RL_SOURCE_DIR
                           "/examples/demo/train.jsonl --num-generations 2 "
                           "--per-device-train-batch-size 4 --max-completion-length 32 "
                           "--max-steps 1 --max-turns 2 --output-dir ";
  const Result r =
      run(base + out + " --environment 'python3 " FP8RL_SOURCE_DIR "/examples/agent_demo/env.py'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json m = nlohmann::json::parse(file_bytes(out + "/metrics.jsonl"));
  for (const char* key : {"env/turns/mean", "env/turns/max", "env/truncated_episodes",
                          "timing/environment_seconds", "rewards/environment/mean"})
    EXPECT_TRUE(m.contains(key)) << key;
  expect_one_line_error(base + temp("env_garbage") + " --environment 'echo garbage'",
                        "environment `echo garbage`");
  expect_one_line_error(base + temp("env_none") + " --environment ''", "no reward");
  expect_one_line_error(base + temp("env_eval") +
                            " --environment true --eval-strategy steps --eval-dataset " +
                            FP8RL_SOURCE_DIR "/examples/demo/eval.jsonl",
                        "set eval_strategy: no");
}
