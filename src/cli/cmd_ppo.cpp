// fp8rl ppo --config RUN.yaml [MODEL] [every PPOConfig key as a flag]
#include <algorithm>
#include <memory>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "cli/output_path.h"
#include "cli/train_session.h"
#include "core/check.h"
#include "rl/ppo_trainer.h"
#include "rl/prompt_data.h"
#include "rl/reward_config.h"
#include "rl/reward_model.h"
#include "rl/value_model.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"

namespace fp8rl::cli {

namespace {

void run_ppo(const PpoConfig& cfg, const std::string& yaml) {
  CHECK(!cfg.data.empty(), "no dataset: give --data PROMPTS.jsonl (or `data:` in the config)");
  cfg.validate();
  check_run_dir(cfg.output_dir, {cfg.model, cfg.data, cfg.adapter, cfg.value_adapter});
  check_output_dir(cfg);
  if (!cfg.dry_run) check_logging_dir_writable(cfg);
  CHECK(!cfg.evaluates(),
        "ppo has no evaluation (TRL's PPOTrainer has none): set eval_strategy: no");
  // The rewards first: a malformed spec or a process that cannot start fails before the model.
  RewardSet rewards = cfg.reward_process.empty() ? make_reward_set(cfg.rewards)
                                                 : make_reward_process_set(cfg.reward_process);
  ModelFiles files = load_model_files(cfg);
  PromptDataOptions d;
  d.max_prompt_length = cfg.max_prompt_length;
  d.truncation = cfg.truncation;
  d.chat_template_kwargs = cfg.chat_template_kwargs;
  const ChatTemplateConfig* chat =
      files.tokenizer_setup.chat ? &*files.tokenizer_setup.chat : nullptr;
  const tok::Tokenizer& tokenizer = files.text.require_tokenizer("training");
  std::vector<PromptExample> prompts = read_prompt_dataset(cfg.data, tokenizer, chat, d);
  check_prompt_room(prompts, cfg.data, cfg.response_length, files.text.config());
  const size_t num_prompts = prompts.size();
  TrainSession ts(cfg, uint64_t(cfg.seed), std::move(files), cfg.dry_run);
  CHECK(ts.estimate_reason().empty(), "ppo --dry-run: {}; the plan needs the loaded model",
        ts.estimate_reason());
  // The value model and the reward models over the policy's weights (one copy).
  std::unique_ptr<LoraAdapter> value = make_value_adapter(
      cfg.value_adapter, ts.adapter(), ts.model(), ts.ctx(), cfg.adapter_init_seed(cfg.seed) + 1);
  load_reward_models(rewards, {&ts.ctx(), &ts.model(), cfg.dry_run, cfg.model});
  PpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), *value, ts.tokenizer_if_any(),
                     ts.session().eos_ids(), std::move(prompts), cfg, std::move(rewards),
                     ts.base_model_name());
  const RolloutMemoryPlan p = trainer.memory_plan();
  std::vector<PlanPart> parts = rollout_plan_parts(ts, p);
  parts.insert(parts.begin(), {"value adapter", value->nbytes(),
                               "LoRA + score head, trained beside the policy's", true});
  report_memory_plan(
      ts,
      fmt::format("memory plan of the run ({}, {}; the larger pass, policy or value, over a "
                  "micro-batch)",
                  counted(int64_t(num_prompts), "prompt"),
                  counted(trainer.total_steps(), "update")),
      p.optimizer_state_bytes, parts, p.scratch_bytes(), cfg.dry_run,
      training_budget_hint(cfg, "kv_memory, per_device_train_batch_size or response_length"));
  if (cfg.dry_run) return;
  write_run_config(cfg.output_dir, yaml);
  RunControl control(cfg);
  trainer.run(
      [&](const PpoStepInfo& i) {
        if (i.step % std::max<int64_t>(cfg.logging_steps, 1) != 0 && i.step != i.total_steps)
          return;
        fmt::print(stderr,
                   "ppo update {}/{} | score {:.3f} | kl {:.4f} | policy loss {:.4f} | value "
                   "loss {:.4f} | {:.1f} s | ETA {}\n",
                   i.step, i.total_steps, i.score, i.kl, i.policy_loss, i.value_loss, i.seconds,
                   control.eta(i.step, i.total_steps));
      },
      control.stop());
  control.print_done(trainer.total_steps(), cfg.output_dir,
                     "policy adapter, value adapter (value/) and metrics");
}

}  // namespace

void add_ppo_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "ppo",
      "PPO as TRL's PPOTrainer: a policy adapter and a value adapter + head over the same "
      "frozen (FP8) model, GAE over per-token KL-penalized rewards");
  auto flags = std::make_shared<ConfigFlags<PpoConfig>>(*c, ppo_keys());
  flags->add_positional(*c, "model", "Hugging Face model directory (or `model:` in the config)");
  c->callback([flags] {
    PpoConfig cfg = flags->resolve();
    cfg.adopt_adapter_config(flags->given_keys());
    cfg.resolve_target_modules();
    run_ppo(cfg, flags->table().dump_yaml(cfg));
  });
}

}  // namespace fp8rl::cli
