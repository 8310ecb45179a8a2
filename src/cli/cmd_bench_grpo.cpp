// fp8rl bench grpo (--model DIR | --preset NAME) [--prompts P] [--generations G]
//                  [--prompt-tokens L] [--completion-tokens C] [--lora-r R] [--steps N]
//                  [--fp8 ...] [--checkpointing] [--kv-memory GIB] [--device cuda|cpu] [--out F]
//
// Times GRPO steps on one model (issue 11 item 9): P random prompts of L tokens, G samples
// each of exactly C tokens (no stop ids), LoRA rank R (alpha 2R) on all seven projections,
// one micro-batch of P x G completions per step. A length reward keeps the run independent of
// a tokenizer. Prints JSON from the run's last step: peak memory after the rollout and after
// the training phase, rollout / training time and tokens/s, step time.
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include "cli/common.h"
#include "cli/model_session.h"
#include "core/check.h"
#include "core/rng.h"
#include "model/adapter.h"
#include "model/presets.h"
#include "rl/grpo_trainer.h"
#include "rl/reward_config.h"

namespace fp8rl::cli {

void add_bench_grpo_command(CLI::App& bench);

namespace {

struct BenchGrpoOptions {
  std::string model, preset, fp8 = "row", device = "cuda", out;
  int64_t prompts = 1, generations = 8, prompt_tokens = 128, completion_tokens = 512;
  int64_t lora_r = 32, steps = 3;
  double kv_memory = 0;
  bool checkpointing = true;
  uint64_t seed = 0;
};

void run_bench_grpo(const BenchGrpoOptions& o) {
  CHECK(o.model.empty() != o.preset.empty(), "bench grpo: give exactly one of --model, --preset");
  CHECK(o.prompts > 0 && o.generations > 1 && o.prompt_tokens > 0 && o.completion_tokens > 0 &&
            o.lora_r > 0 && o.steps > 0,
        "bench grpo: sizes must be positive and --generations at least 2");
  SessionOptions so;
  so.model = o.model;
  so.fp8 = o.fp8;
  so.device = o.device;
  std::unique_ptr<ModelSession> session;
  if (o.preset.empty()) {
    session = std::make_unique<ModelSession>(so);
  } else {
    const ModelConfig config = preset_config(o.preset);
    const std::optional<Fp8Scheme> fp8 = parse_fp8_option(o.fp8);
    session = std::make_unique<ModelSession>(
        so, [&](Context& ctx) { return Model::random(config, fp8, ctx, o.seed); });
  }
  Context& ctx = session->ctx();
  Model& model = session->model();
  LoraConfig lc;
  lc.r = o.lora_r;
  lc.lora_alpha = double(2 * o.lora_r);
  lc.target_modules = {"all-linear"};
  LoraAdapter adapter = LoraAdapter::init(lc, model, o.seed + 1);
  adapter.sync_to_device(ctx);
  adapter.attach(model);

  std::vector<PromptExample> prompts;
  const int64_t vocab = model.config().vocab_size;
  for (int64_t p = 0; p < o.prompts * o.steps; ++p) {
    PromptExample e;
    for (int64_t t = 0; t < o.prompt_tokens; ++t)
      e.ids.push_back(
          int32_t(uniform01(o.seed + 11, uint64_t(p * o.prompt_tokens + t)) * float(vocab)) %
          int32_t(vocab));
    e.columns = nlohmann::json::object();
    prompts.push_back(std::move(e));
  }
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("fp8rl_bench_grpo_" + std::to_string(::getpid())))
          .string();
  GrpoConfig c;
  c.output_dir = dir;
  c.num_generations = o.generations;
  c.per_device_train_batch_size = o.prompts * o.generations;
  c.max_prompt_length = o.prompt_tokens;
  c.max_completion_length = o.completion_tokens;
  c.max_steps = o.steps;
  c.save_steps = 0;
  c.gradient_checkpointing = o.checkpointing;
  c.lora_dropout = 0.0;
  c.kv_memory = o.kv_memory;
  c.max_num_seqs = std::max<int64_t>(256, o.prompts * o.generations);
  c.seed = int64_t(o.seed);
  c.rewards = nlohmann::json::parse(
      R"([{"type": "length_penalty", "mode": "linear", "target_length": 1, "per_token": 0.001}])");
  {
    GrpoTrainer trainer(ctx, model, adapter, nullptr, {}, std::move(prompts), c,
                        make_reward_set(c.rewards), "bench");
    trainer.run();
  }
  std::ifstream f(dir + "/metrics.jsonl");
  nlohmann::json last;
  for (std::string line; std::getline(f, line);) last = nlohmann::json::parse(line);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  nlohmann::json r;
  r["command"] = "bench grpo";
  r["model"] = o.preset.empty() ? o.model : o.preset;
  r["fp8"] = std::string(scheme_name(model.scheme()));
  r["device"] = session->cuda() != nullptr ? session->cuda()->name() : "cpu";
  r["prompts"] = o.prompts;
  r["generations"] = o.generations;
  r["prompt_tokens"] = o.prompt_tokens;
  r["completion_tokens"] = o.completion_tokens;
  r["lora_r"] = o.lora_r;
  r["checkpointing"] = o.checkpointing;
  r["steps"] = o.steps;
  for (const char* k :
       {"peak_memory_bytes/rollout", "peak_memory_bytes/train", "timing/rollout_seconds",
        "timing/rollout_logprob_seconds", "timing/train_seconds", "timing/step_seconds",
        "rollout_tokens_per_second", "train_tokens_per_second", "completions/mean_length"})
    if (last.contains(k)) r[std::string("last_step/") + k] = last[k];
  r["weights_bytes"] = model.device_bytes();
  const std::string text = r.dump(2);
  fmt::print("{}\n", text);
  if (!o.out.empty()) std::ofstream(o.out) << text << "\n";
  LoraAdapter::detach(model);
}

}  // namespace

void add_bench_grpo_command(CLI::App& bench) {
  auto o = std::make_shared<BenchGrpoOptions>();
  CLI::App* c = bench.add_subcommand(
      "grpo", "Time GRPO steps on one model: peak memory per phase, rollout/training split");
  c->add_option("--model", o->model, "Model directory (config.json; weights if present)");
  c->add_option("--preset", o->preset, "Preset config with random weights, e.g. qwen3-8b");
  c->add_option("--prompts", o->prompts, "Prompts per step")->capture_default_str();
  c->add_option("--generations", o->generations, "Samples per prompt")->capture_default_str();
  c->add_option("--prompt-tokens", o->prompt_tokens, "Tokens per prompt")->capture_default_str();
  c->add_option("--completion-tokens", o->completion_tokens, "Tokens per sample")
      ->capture_default_str();
  c->add_option("--lora-r", o->lora_r, "LoRA rank (all seven projections)")->capture_default_str();
  c->add_option("--steps", o->steps, "GRPO steps")->capture_default_str();
  c->add_option("--fp8", o->fp8, kFp8Help)->capture_default_str();
  c->add_option("--kv-memory", o->kv_memory, "KV cache GiB (0: the engine's default)");
  c->add_option("--checkpointing", o->checkpointing, "Per-layer activation checkpointing")
      ->capture_default_str();
  c->add_option("--device", o->device, "cuda or cpu")->capture_default_str();
  c->add_option("--seed", o->seed, "Seed of weights and prompts")->capture_default_str();
  c->add_option("--out", o->out, "Also write the JSON here");
  c->callback([o] { run_bench_grpo(*o); });
}

}  // namespace fp8rl::cli
