// fp8rl reward --config RUN.yaml [MODEL] [every RewardConfig key as a flag]
#include <algorithm>
#include <memory>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "cli/output_path.h"
#include "cli/train_session.h"
#include "core/check.h"
#include "core/spelling.h"
#include "rl/reward_trainer.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"

namespace fp8rl::cli {

namespace {

// The longest sequence against the model's context, before the weights load.
void check_pairs_context(const ModelConfig& c, const std::vector<RewardPair>& pairs,
                         const std::string& data) {
  const RewardPair* longest = nullptr;
  const auto length = [](const RewardPair& p) {
    return std::max(p.chosen.size(), p.rejected.size());
  };
  for (const RewardPair& p : pairs)
    if (longest == nullptr || length(p) > length(*longest)) longest = &p;
  if (longest != nullptr)
    check_context(c, int64_t(length(*longest)),
                  fmt::format("the longest sequence, {} line {}", data, longest->line));
}

void run_reward(const RewardConfig& cfg, const std::string& yaml) {
  CHECK(!cfg.data.empty(), "no dataset: give --data PAIRS.jsonl (or `data:` in the config)");
  check_run_dir(cfg.output_dir, {cfg.model, cfg.data, cfg.adapter, cfg.eval_dataset});
  check_output_dir(cfg);
  if (!cfg.dry_run) check_logging_dir_writable(cfg);
  ModelFiles files = load_model_files(cfg);
  const ModelConfig& config = files.text.config();
  PreferenceDataOptions d;
  d.max_length = cfg.max_length;
  d.truncation = cfg.truncation;
  d.chat_template_kwargs = cfg.chat_template_kwargs;
  d.eos_token_id = files.tokenizer_setup.eos_token_id;
  const auto& chat = files.tokenizer_setup.chat;
  const bool untokenized = cfg.dry_run && files.text.tokenizer() == nullptr;
  const int64_t length = std::min(cfg.max_length, config.max_context);
  std::vector<RewardPair> pairs, eval_pairs;
  if (untokenized) {
    RewardPair p;
    p.chosen.assign(size_t(length), 0);
    p.rejected = p.chosen;
    pairs.assign(size_t(cfg.per_device_train_batch_size), p);
  } else {
    const tok::Tokenizer& tokenizer = files.text.require_tokenizer("training");
    pairs = read_reward_dataset(cfg.data, tokenizer, chat ? &*chat : nullptr, d);
    if (cfg.evaluates())
      eval_pairs = read_reward_dataset(cfg.eval_dataset, tokenizer, chat ? &*chat : nullptr, d);
    check_pairs_context(config, pairs, cfg.data);
    check_pairs_context(config, eval_pairs, cfg.eval_dataset);
  }
  TrainSession ts(cfg, uint64_t(cfg.seed), std::move(files), cfg.dry_run);
  const size_t num_pairs = pairs.size();
  RewardTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), std::move(pairs), cfg,
                        ts.base_model_name());
  if (cfg.evaluates() && !untokenized) trainer.set_eval_data(std::move(eval_pairs));
  const std::string of =
      untokenized
          ? fmt::format("the pairs not tokenized, {} has no tokenizer.json: {} of {}", cfg.model,
                        counted(int64_t(num_pairs), "pair"), counted(length, "token"))
          : fmt::format("{}, {}", counted(int64_t(num_pairs), "pair"),
                        counted(trainer.total_steps(), "step"));
  report_pass_memory_plan(ts, fmt::format("memory plan of the largest batch ({})", of),
                          trainer.optimizer_state_bytes(), trainer.plan(), cfg.dry_run,
                          training_budget_hint(cfg, "per_device_train_batch_size or max_length"),
                          {});
  if (cfg.dry_run) return;
  write_run_config(cfg.output_dir, yaml);
  RunControl control(cfg);
  trainer.run(
      [&](const RewardStepInfo& i) {
        const auto print_eval = [&] {
          if (i.evaluated)
            fmt::print(stderr,
                       "reward eval at step {} | eval_loss {:.4f} | eval_rewards/accuracies "
                       "{:.3f}\n",
                       i.step, i.eval_loss, i.eval_accuracy);
        };
        if (i.step % std::max<int64_t>(cfg.logging_steps, 1) != 0 && i.step != i.total_steps)
          return print_eval();
        fmt::print(stderr,
                   "reward step {}/{} | loss {:.4f} | accuracy {:.3f} | margin {:.4f} | ETA {}\n",
                   i.step, i.total_steps, i.loss, i.accuracy, i.margin,
                   control.eta(i.step, i.total_steps));
        print_eval();
      },
      control.stop());
  control.print_done(trainer.total_steps(), cfg.output_dir,
                     "adapter (with its score head) and metrics");
}

}  // namespace

void add_reward_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "reward",
      "Train a reward model (Bradley-Terry on chosen/rejected pairs): LoRA + a score head over "
      "the frozen (FP8) model, saved as a PEFT SEQ_CLS adapter");
  auto flags = std::make_shared<ConfigFlags<RewardConfig>>(*c, reward_keys());
  flags->add_positional(*c, "model", "Hugging Face model directory (or `model:` in the config)");
  c->callback([flags] {
    RewardConfig cfg = flags->resolve();
    cfg.adopt_adapter_config(flags->given_keys());
    cfg.resolve_target_modules();
    run_reward(cfg, flags->table().dump_yaml(cfg));
  });
}

}  // namespace fp8rl::cli
