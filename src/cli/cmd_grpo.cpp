// fp8rl grpo --config RUN.yaml [MODEL] [every GRPOConfig key as a flag]; fp8rl rloo, the same
// loop with RLOOConfig's defaults; fp8rl online-dpo, the loop with two completions per prompt
// and TRL's online DPO loss.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "cli/output_path.h"
#include "cli/train_session.h"
#include "core/check.h"
#include "core/spelling.h"
#include "ops/memory.h"
#include "rl/grpo_trainer.h"
#include "rl/prompt_data.h"
#include "rl/reward_config.h"
#include "rl/reward_model.h"
#include "rl/tools_environment.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"

namespace fp8rl::cli {

namespace {

// `name` is the command's, in its progress lines.
void run_grpo(const GrpoConfig& cfg, const std::string& yaml, const char* name = "grpo") {
  CHECK(!cfg.data.empty(), "no dataset: give --data PROMPTS.jsonl (or `data:` in the config)");
  // A RUN_DIR that is (or holds) an input, or cannot be written, fails before the model loads.
  check_run_dir(cfg.output_dir, {cfg.model, cfg.data, cfg.adapter, cfg.eval_dataset});
  check_output_dir(cfg);
  if (!cfg.dry_run) check_logging_dir_writable(cfg);
  // The rewards first: a malformed reward spec or a process that cannot start fails before
  // the model loads.
  // An environment may be the only reward (its steps').
  // Tools: the helper imports and describes them before the model loads.
  if (!cfg.tools.empty()) check_tools_helper(cfg.tools);
  const bool env_only = (!cfg.environment.empty() || !cfg.environment_server.empty()) &&
                        cfg.reward_process.empty() && cfg.rewards.is_array() && cfg.rewards.empty();
  RewardSet rewards = env_only                     ? RewardSet()
                      : cfg.reward_process.empty() ? make_reward_set(cfg.rewards)
                                                   : make_reward_process_set(cfg.reward_process);
  // The prompts next, tokenized before the weights load: a row that cannot run (too long for
  // the model's context with a whole completion) fails at once, not in the round that draws it.
  ModelFiles files = load_model_files(cfg);
  const ModelConfig& config = files.text.config();
  PromptDataOptions d;
  d.max_prompt_length = cfg.max_prompt_length;
  d.truncation = cfg.truncation;
  d.chat_template_kwargs = cfg.chat_template_kwargs;
  const ChatTemplateConfig* chat =
      files.tokenizer_setup.chat ? &*files.tokenizer_setup.chat : nullptr;
  // A dry run still plans when the prompts cannot be tokenized: at the configured lengths.
  const bool untokenized = cfg.dry_run && files.text.tokenizer() == nullptr;
  std::vector<PromptExample> prompts, eval_prompts;
  if (untokenized) {
    CHECK(cfg.max_prompt_length.has_value(),
          "--dry-run: {} has no tokenizer.json to measure the prompts with and max_prompt_length "
          "is null: give max_prompt_length for the plan",
          cfg.model);
    // A full completion after a prompt of one token must fit; prompts longer than what is left
    // of the context cannot run, so the configured length stops there.
    check_context(config, 1 + cfg.max_completion_length,
                  fmt::format("a prompt of 1 token plus max_completion_length {}",
                              cfg.max_completion_length));
    PromptExample p;
    p.ids.assign(
        size_t(std::min(*cfg.max_prompt_length, config.max_context - cfg.max_completion_length)),
        0);
    prompts.assign(size_t(cfg.prompts_per_generation()), p);
  } else {
    const tok::Tokenizer& tokenizer = files.text.require_tokenizer("training");
    prompts = read_prompt_dataset(cfg.data, tokenizer, chat, d);
    // The eval prompts as the training ones (the same limits), before any step.
    if (cfg.evaluates()) eval_prompts = read_prompt_dataset(cfg.eval_dataset, tokenizer, chat, d);
    // The lengths once every input has been read (a malformed row is named first).
    check_prompt_room(prompts, cfg.data, cfg.max_completion_length, config);
    check_prompt_room(eval_prompts, cfg.eval_dataset, cfg.max_completion_length, config);
  }
  const size_t num_prompts = prompts.size();
  const int64_t prompt_length = prompts.empty() ? 0 : int64_t(prompts[0].ids.size());
  TrainSession ts(cfg, uint64_t(cfg.seed), std::move(files), cfg.dry_run);
  // Reward models load beside the policy (sharing its weights when they are its base); a dry
  // run plans their scoring from the shapes of weights of their own.
  load_reward_models(rewards, {&ts.ctx(), &ts.model(), cfg.dry_run, cfg.model});
  GrpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), ts.tokenizer_if_any(),
                      ts.session().eos_ids(), std::move(prompts), cfg, std::move(rewards),
                      ts.base_model_name());
  if (cfg.evaluates() && !untokenized) trainer.set_eval_data(std::move(eval_prompts));
  // The session's own (`chat` pointed into the files it took over).
  trainer.set_chat_template(ts.tokenizer_setup().chat ? &*ts.tokenizer_setup().chat : nullptr);
  {
    // The plan, printed by a dry run, and checked against gpu_memory before the first step.
    const RolloutMemoryPlan p = trainer.memory_plan();
    const std::string of =
        untokenized ? fmt::format(
                          "the prompts not tokenized, {} has no tokenizer.json: {} of {}, "
                          "max_prompt_length{}",
                          cfg.model, counted(int64_t(num_prompts), "prompt"),
                          counted(prompt_length, "token"),
                          prompt_length < cfg.max_prompt_length.value_or(0)
                              ? " cut to what the context leaves"
                              : "")
                    : fmt::format("{}, {}", counted(int64_t(num_prompts), "prompt"),
                                  counted(trainer.total_steps(), "step"));
    report_memory_plan(ts,
                       fmt::format("memory plan of the run ({}; the pass over the longest "
                                   "micro-batch)",
                                   of),
                       p.optimizer_state_bytes, rollout_plan_parts(ts, p), p.scratch_bytes(),
                       cfg.dry_run,
                       training_budget_hint(cfg,
                                            "kv_memory, per_device_train_batch_size or "
                                            "max_completion_length"));
    if (cfg.dry_run) return;
  }
  write_run_config(cfg.output_dir, yaml);
  RunControl control(cfg);
  trainer.run(
      [&](const GrpoStepInfo& i) {
        const auto print_eval = [&] {
          if (i.evaluated)
            fmt::print(stderr, "{} eval at step {} | eval_reward {:.3f} | {:.1f} s\n", name, i.step,
                       i.eval_reward, i.eval_seconds);
        };
        if (i.step % std::max<int64_t>(cfg.logging_steps, 1) != 0 && i.step != i.total_steps)
          return print_eval();
        const std::string kl = i.has_kl ? fmt::format("{:.4f}", i.kl) : std::string("-");
        fmt::print(stderr,
                   "{} step {}/{} | reward {:.3f} ± {:.3f} | kl {} | loss {:.4f} | {:.1f} s/step | "
                   "ETA {}\n",
                   name, i.step, i.total_steps, i.reward, i.reward_std, kl, i.loss, i.seconds,
                   control.eta(i.step, i.total_steps));
        print_eval();
      },
      control.stop());
  control.print_done(trainer.total_steps(), cfg.output_dir, "adapter and metrics");
}

}  // namespace

void add_grpo_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "grpo", "GRPO (and DAPO, Dr. GRPO, GSPO, CISPO) with LoRA over the frozen (FP8) model");
  auto flags = std::make_shared<ConfigFlags<GrpoConfig>>(*c, grpo_keys());
  flags->add_positional(*c, "model", "Hugging Face model directory (or `model:` in the config)");
  c->callback([flags] {
    GrpoConfig cfg = flags->resolve();
    cfg.adopt_adapter_config(flags->given_keys());
    cfg.resolve_target_modules();
    run_grpo(cfg, flags->table().dump_yaml(cfg));
  });
}

void add_rloo_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "rloo", "RLOO as TRL's RLOOTrainer (leave-one-out baseline, KL in the reward, its loss)");
  auto flags = std::make_shared<ConfigFlags<RlooConfig>>(*c, rloo_keys());
  flags->add_positional(*c, "model", "Hugging Face model directory (or `model:` in the config)");
  c->callback([flags] {
    RlooConfig cfg = flags->resolve();
    cfg.adopt_adapter_config(flags->given_keys());
    cfg.resolve_target_modules();
    run_grpo(cfg, flags->table().dump_yaml(cfg));
  });
}

void add_online_dpo_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "online-dpo",
      "Online DPO as TRL's OnlineDPOTrainer (two samples per prompt, the better by reward "
      "chosen, DPO's loss on the pair)");
  c->alias("online_dpo");
  auto flags = std::make_shared<ConfigFlags<OnlineDpoConfig>>(*c, online_dpo_keys());
  flags->add_positional(*c, "model", "Hugging Face model directory (or `model:` in the config)");
  c->callback([flags] {
    OnlineDpoConfig cfg = flags->resolve();
    cfg.adopt_adapter_config(flags->given_keys());
    cfg.resolve_target_modules();
    run_grpo(cfg.trainer_config(), flags->table().dump_yaml(cfg), "online-dpo");
  });
}

}  // namespace fp8rl::cli
