// fp8rl bench ppo (--model DIR | --preset NAME) [--prompts P] [--generations G]
//                 [--prompt-tokens L] [--completion-tokens C] [--lora-r R] [--lora-alpha A]
//                 [--steps N] [--fp8 ...] [--[no-]checkpointing] [--kv-memory GIB]
//                 [--kv-dtype bf16|fp8] [--gradient-accumulation-steps K] [--ppo-epochs E]
//                 [--device cuda|cpu] [--device-option KEY=VALUE]... [--out F]
//
// Times PPO updates (rl/ppo_trainer.h) on one model at bench grpo's shape: P random prompts of
// L tokens, each G times in the batch, so that an update samples P x G responses of exactly C
// tokens (no stop ids) as a GRPO step does; LoRA rank R (alpha A, default 2R) on all seven
// projections for the policy, a value adapter of the same rank with its head, one base. The
// batch is trained in K micro-batches (one optimizer step a PPO epoch, E epochs an update;
// default 1, as a GRPO step's one pass) and the rollout's passes run in chunks of a
// micro-batch. bench grpo's length reward, so no reward process is needed. Prints JSON from the
// run's last update: each phase's time (rollout, reward, the policy's and reference's
// logprobs, the value passes, the policy's and the value model's training, the optimizer) and
// peak memory (the engine's KV pool and the passes take turns in one standby region, whose size
// is printed too), the step's peak and time, tokens/s. A --model directory without weights gets
// random ones, as a preset does.
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include "cli/bench_model.h"
#include "cli/bench_profile.h"
#include "core/check.h"
#include "model/kv_cache.h"
#include "rl/ppo_trainer.h"
#include "rl/reward_config.h"
#include "rl/value_model.h"

namespace fp8rl::cli {

void add_bench_ppo_command(CLI::App& bench);

namespace {

struct BenchPpoOptions : BenchModelOptions, BenchRolloutOptions {
  int64_t ppo_epochs = 1;
};

void check_positive(int64_t value, const char* flag) {
  CHECK(value > 0, "bench ppo: {} must be positive, got {}", flag, value);
}

void run_bench_ppo(const BenchPpoOptions& o) {
  check_positive(o.prompts, "--prompts");
  check_positive(o.generations, "--generations");
  check_positive(o.prompt_tokens, "--prompt-tokens");
  check_positive(o.completion_tokens, "--completion-tokens");
  check_positive(o.steps, "--steps");
  check_positive(o.ppo_epochs, "--ppo-epochs");
  CHECK(o.lora_r > 0, "bench ppo: --lora-r must be positive, got {}", o.lora_r);
  parse_kv_dtype(o.kv_dtype);  // a bad value is an error before the model loads
  const int64_t responses = o.prompts * o.generations, accumulation = o.gradient_accumulation_steps;
  CHECK(accumulation > 0 && responses % accumulation == 0,
        "bench ppo: --gradient-accumulation-steps {} must divide the {} responses of an update",
        accumulation, responses);
  BenchModel bench(o, "bench ppo", {ControlScope::cuda, ControlScope::model}, BenchLoraInit::peft);
  Context& ctx = bench.ctx();
  Model& model = bench.model();

  // Each update's P prompts, each G times: the batch of a GRPO step of P x G.
  std::vector<PromptExample> prompts =
      random_prompts(o, model.config().vocab_size, o.seed + 11, o.generations);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("fp8rl_bench_ppo_" + std::to_string(::getpid())))
          .string();
  PpoConfig c;
  c.output_dir = dir;
  c.per_device_train_batch_size = responses / accumulation;
  c.gradient_accumulation_steps = accumulation;
  c.local_rollout_forward_batch_size = responses / accumulation;
  c.num_ppo_epochs = o.ppo_epochs;
  c.num_mini_batches = 1;
  c.response_length = o.completion_tokens;
  c.max_steps = o.steps;
  c.save_steps = 0;
  c.gradient_checkpointing = o.checkpointing;
  c.lora_dropout = 0.0;
  c.kv_memory = o.kv_memory;
  c.kv_dtype = o.kv_dtype;
  c.max_num_seqs = std::max<int64_t>(256, responses);
  c.seed = int64_t(o.seed);
  c.rewards = nlohmann::json::parse(
      R"([{"type": "length_penalty", "mode": "linear", "target_length": 1, "per_token": 0.001}])");
  LoraAdapter& policy = bench.fresh_adapter();
  const std::unique_ptr<LoraAdapter> value = make_value_adapter("", policy, model, ctx, o.seed + 3);
  {
    PpoTrainer trainer(ctx, model, policy, *value, nullptr, {}, std::move(prompts), c,
                       make_reward_set(c.rewards), "bench");
    trainer.run();
  }
  const nlohmann::json last = take_last_metrics(dir);
  nlohmann::json r = rollout_report("bench ppo", bench, o, o, policy.config().lora_alpha);
  r["responses"] = responses;
  r["ppo_epochs"] = o.ppo_epochs;
  for (const char* k : {"timing/rollout_seconds",
                        "timing/reward_seconds",
                        "timing/rollout_logprob_seconds",
                        "timing/rollout_value_seconds",
                        "timing/policy_train_seconds",
                        "timing/value_train_seconds",
                        "timing/optimizer_seconds",
                        "timing/train_seconds",
                        "timing/step_seconds",
                        "rollout_tokens_per_second",
                        "train_tokens_per_second",
                        "peak_memory_bytes/rollout",
                        "peak_memory_bytes/reward",
                        "peak_memory_bytes/rollout_logprob",
                        "peak_memory_bytes/rollout_value",
                        "peak_memory_bytes/train",
                        "peak_memory_bytes/step",
                        "memory/standby_region_bytes",
                        "memory/device_region_bytes",
                        "completions/mean_length",
                        "objective/kl",
                        "loss/policy_avg",
                        "loss/value_avg"})
    if (last.contains(k)) r[std::string("last_step/") + k] = last[k];
  // The update's responses over its whole time.
  const double step_seconds = last.value("timing/step_seconds", 0.0);
  r["last_step/step_tokens_per_second"] =
      double(responses * o.completion_tokens) / std::max(step_seconds, 1e-9);
  r["weights_bytes"] = model.device_bytes();
  r["value_adapter_bytes"] = value->nbytes();
  print_bench_json(r, o.out);
}

}  // namespace

void add_bench_ppo_command(CLI::App& bench) {
  auto o = std::make_shared<BenchPpoOptions>();
  CLI::App* c = bench.add_subcommand(
      "ppo",
      "Time PPO updates on one model (policy and value adapters over one base): each phase's "
      "time and peak memory");
  add_bench_model_options(*c, *o);
  add_bench_lora_options(*c, *o);
  add_bench_rollout_options(*c, *o);
  c->add_option("--ppo-epochs", o->ppo_epochs,
                "num_ppo_epochs: passes over the batch, an optimizer step each")
      ->capture_default_str();
  c->callback([o] { run_bench_ppo(*o); });
}

}  // namespace fp8rl::cli
