// fp8rl bench grpo (--model DIR | --preset NAME) [--prompts P] [--generations G]
//                  [--prompt-tokens L] [--completion-tokens C] [--lora-r R] [--lora-alpha A]
//                  [--steps N] [--fp8 ...] [--[no-]checkpointing] [--kv-memory GIB]
//                  [--kv-dtype bf16|fp8] [--gradient-accumulation-steps K]
//                  [--on-policy-exact] [--device cuda|cpu] [--device-option KEY=VALUE]...
//                  [--turns T [--env-tokens M]] [--out F]
//
// Times GRPO steps on one model: P random prompts of L tokens, G samples each of exactly C
// tokens (no stop ids), LoRA rank R (alpha A, default 2R) on all seven projections, one
// rollout of P x G completions per step, trained in K micro-batches (default one). A length reward
// keeps the run independent of a tokenizer. Prints JSON from the run's last step: the peak memory
// of each phase (rollout, training: the KV pool and the trainer's arenas take turns in one standby
// region, whose size is printed too), rollout / training time and tokens/s, step time, the
// engine-trainer mismatch (mean |logprob difference| and token probability error). A --model
// directory without weights gets random ones, as a preset does. --on-policy-exact runs GRPO's
// on_policy_exact (batch-invariant kernels on CUDA): its cost. --turns T (T >= 2) times rollouts
// instead of steps: T-turn episodes of C / T tokens a turn with M environment tokens between
// turns against single-turn rollouts of the same total (cli/bench_turns.h).
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include "cli/bench_model.h"
#include "cli/bench_profile.h"
#include "cli/bench_turns.h"
#include "core/check.h"
#include "model/kv_cache.h"
#include "rl/grpo_trainer.h"
#include "rl/reward_config.h"

namespace fp8rl::cli {

void add_bench_grpo_command(CLI::App& bench);

namespace {

struct BenchGrpoOptions : BenchModelOptions, BenchRolloutOptions {
  bool on_policy_exact = false;
  int64_t turns = 1, env_tokens = 32;
};

// --turns: the rollouts' comparison (JSON, and one line of text on stderr).
void run_bench_turns(const BenchGrpoOptions& o) {
  BenchModel bench(o, "bench grpo", {ControlScope::cuda, ControlScope::model}, BenchLoraInit::peft);
  TurnsBenchOptions t;
  t.prompts = o.prompts;
  t.generations = o.generations;
  t.prompt_tokens = o.prompt_tokens;
  t.completion_tokens = o.completion_tokens;
  t.turns = o.turns;
  t.env_tokens = o.env_tokens;
  t.steps = o.steps;
  t.kv_memory_gib = o.kv_memory;
  t.kv_dtype = o.kv_dtype;
  t.seed = o.seed;
  nlohmann::json r =
      rollout_report("bench grpo --turns", bench, o, o, bench.fresh_adapter().config().lora_alpha);
  r.update(bench_turns(bench, t));
  fmt::print(
      stderr,
      "bench grpo: {}-turn episodes {:.3f} s, single-turn rollouts of the same {} tokens "
      "{:.3f} s: {:.2f}x\n",
      o.turns, r["multi_turn/rollout_seconds"].get<double>(),
      r["multi_turn/model_tokens"].get<int64_t>() + r["multi_turn/env_tokens"].get<int64_t>(),
      r["single_turn/rollout_seconds"].get<double>(),
      r["multi_turn_over_single_turn"].get<double>());
  print_bench_json(r, o.out);
}

void run_bench_grpo(const BenchGrpoOptions& o) {
  CHECK(o.prompts > 0 && o.generations > 1 && o.prompt_tokens > 0 && o.completion_tokens > 0 &&
            o.steps > 0,
        "bench grpo: sizes must be positive and --generations at least 2");
  CHECK(o.lora_r > 0, "bench grpo: --lora-r must be positive, got {}", o.lora_r);
  parse_kv_dtype(o.kv_dtype);  // a bad value is an error before the model loads
  CHECK(o.turns >= 1, "bench grpo: --turns must be positive, got {}", o.turns);
  if (o.turns > 1) return run_bench_turns(o);
  const int64_t completions = o.prompts * o.generations,
                accumulation = o.gradient_accumulation_steps;
  CHECK(accumulation > 0 && completions % accumulation == 0,
        "bench grpo: --gradient-accumulation-steps {} must divide the {} completions of a step",
        accumulation, completions);
  BenchModel bench(o, "bench grpo", {ControlScope::cuda, ControlScope::model}, BenchLoraInit::peft);
  Context& ctx = bench.ctx();
  Model& model = bench.model();

  std::vector<PromptExample> prompts = random_prompts(o, model.config().vocab_size, o.seed + 11, 1);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("fp8rl_bench_grpo_" + std::to_string(::getpid())))
          .string();
  GrpoConfig c;
  c.output_dir = dir;
  c.num_generations = o.generations;
  // One rollout of every completion a step, trained in `accumulation` micro-batches (TRL's
  // generation batch = per_device_train_batch_size x steps_per_generation).
  c.per_device_train_batch_size = completions / accumulation;
  c.gradient_accumulation_steps = accumulation;
  c.max_prompt_length = o.prompt_tokens;
  c.max_completion_length = o.completion_tokens;
  c.max_steps = o.steps;
  c.save_steps = 0;
  c.gradient_checkpointing = o.checkpointing;
  c.lora_dropout = 0.0;
  c.on_policy_exact = o.on_policy_exact;
  c.kv_memory = o.kv_memory;
  c.kv_dtype = o.kv_dtype;
  c.max_num_seqs = std::max<int64_t>(256, o.prompts * o.generations);
  c.seed = int64_t(o.seed);
  c.rewards = nlohmann::json::parse(
      R"([{"type": "length_penalty", "mode": "linear", "target_length": 1, "per_token": 0.001}])");
  {
    GrpoTrainer trainer(ctx, model, bench.fresh_adapter(), nullptr, {}, std::move(prompts), c,
                        make_reward_set(c.rewards), "bench");
    trainer.run();
  }
  const nlohmann::json last = take_last_metrics(dir);
  nlohmann::json r =
      rollout_report("bench grpo", bench, o, o, bench.fresh_adapter().config().lora_alpha);
  r["on_policy_exact"] = o.on_policy_exact;
  for (const char* k :
       {"peak_memory_bytes/rollout", "peak_memory_bytes/train", "timing/rollout_seconds",
        "timing/rollout_logprob_seconds", "timing/train_seconds", "timing/step_seconds",
        "rollout_tokens_per_second", "train_tokens_per_second", "completions/mean_length",
        "memory/standby_region_bytes", "sampling/sampling_logp_difference/mean",
        "sampling/sampling_logp_difference/max", "sampling/token_prob_error/mean"})
    if (last.contains(k)) r[std::string("last_step/") + k] = last[k];
  r["weights_bytes"] = model.device_bytes();
  print_bench_json(r, o.out);
}

}  // namespace

void add_bench_grpo_command(CLI::App& bench) {
  auto o = std::make_shared<BenchGrpoOptions>();
  CLI::App* c = bench.add_subcommand(
      "grpo", "Time GRPO steps on one model: peak memory per phase, rollout/training split");
  add_bench_model_options(*c, *o);
  add_bench_lora_options(*c, *o);
  add_bench_rollout_options(*c, *o);
  c->add_flag("--on-policy-exact", o->on_policy_exact,
              "GRPO's on_policy_exact: batch-invariant kernels, logprob mismatch checked to be 0");
  c->add_option("--turns", o->turns,
                "Time T-turn episode rollouts against single-turn ones of the same tokens "
                "instead of GRPO steps (1: the steps)")
      ->capture_default_str();
  c->add_option("--env-tokens", o->env_tokens,
                "With --turns: the environment's tokens appended after each turn but the last")
      ->capture_default_str();
  c->callback([o] { run_bench_grpo(*o); });
}

}  // namespace fp8rl::cli
