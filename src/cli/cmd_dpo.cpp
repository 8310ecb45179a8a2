// fp8rl dpo --config RUN.yaml [MODEL] [every DPOConfig key as a flag]
#include <algorithm>
#include <chrono>
#include <memory>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "cli/output_path.h"
#include "cli/train_session.h"
#include "core/check.h"
#include "core/spelling.h"
#include "rl/dpo_trainer.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"

namespace fp8rl::cli {

namespace {

// The longer sequence of each pair (prompt + chosen, prompt + rejected) against the model's
// context, before the weights load.
void check_pairs_context(const ModelConfig& c, const std::vector<PreferencePair>& pairs,
                         const std::string& data) {
  const PreferencePair* longest = nullptr;
  const auto length = [](const PreferencePair& p) {
    return p.prompt.size() + std::max(p.chosen.size(), p.rejected.size());
  };
  for (const PreferencePair& p : pairs)
    if (longest == nullptr || length(p) > length(*longest)) longest = &p;
  if (longest != nullptr)
    check_context(c, int64_t(length(*longest)),
                  fmt::format("the longest prompt + completion, {} line {}", data, longest->line));
}

void run_dpo(const DpoConfig& cfg, const std::string& yaml) {
  CHECK(!cfg.data.empty(), "no dataset: give --data PAIRS.jsonl (or `data:` in the config)");
  // A RUN_DIR that is (or holds) an input, or cannot be written, fails before the model loads.
  check_run_dir(cfg.output_dir, {cfg.model, cfg.data, cfg.adapter, cfg.eval_dataset});
  check_output_dir(cfg);
  if (!cfg.dry_run) check_logging_dir_writable(cfg);
  // The model directory's config and tokenizer first: the pairs are read and their lengths
  // checked against the model's context before the weights load.
  ModelFiles files = load_model_files(cfg);
  const ModelConfig& config = files.text.config();
  PreferenceDataOptions d;
  d.max_length = cfg.max_length;
  d.max_prompt_length = cfg.max_prompt_length;
  d.truncation = cfg.truncation;
  d.chat_template_kwargs = cfg.chat_template_kwargs;
  d.eos_token_id = files.tokenizer_setup.eos_token_id;
  const auto& chat = files.tokenizer_setup.chat;
  // A dry run still plans when the pairs cannot be tokenized: pairs of max_length sequences.
  const bool untokenized = cfg.dry_run && files.text.tokenizer() == nullptr;
  // Sequences longer than the context cannot train, so the configured length stops there.
  const int64_t length = std::min(cfg.max_length, config.max_context);
  std::vector<PreferencePair> pairs, eval_pairs;
  if (untokenized) {
    PreferencePair p;
    const int64_t prompt =
        std::min(cfg.max_prompt_length.value_or(length / 2), std::max<int64_t>(length - 1, 0));
    p.prompt.assign(size_t(prompt), 0);
    p.chosen.assign(size_t(length) - p.prompt.size(), 0);
    p.rejected = p.chosen;
    pairs.assign(size_t(cfg.per_device_train_batch_size), p);
  } else {
    const tok::Tokenizer& tokenizer = files.text.require_tokenizer("training");
    pairs = read_preference_dataset(cfg.data, tokenizer, chat ? &*chat : nullptr, d);
    // The eval pairs as the training ones (the same limits), before any step.
    if (cfg.evaluates())
      eval_pairs = read_preference_dataset(cfg.eval_dataset, tokenizer, chat ? &*chat : nullptr, d);
    // The lengths once every input has been read (a malformed row is named first).
    check_pairs_context(config, pairs, cfg.data);
    check_pairs_context(config, eval_pairs, cfg.eval_dataset);
  }
  TrainSession ts(cfg, uint64_t(cfg.seed), std::move(files), cfg.dry_run);
  const size_t num_pairs = pairs.size();
  DpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), std::move(pairs), cfg,
                     ts.base_model_name());
  if (cfg.evaluates() && !untokenized) trainer.set_eval_data(std::move(eval_pairs));
  if (cfg.dry_run) {
    std::vector<PlanPart> extra;
    if (trainer.reference_adapter_bytes() > 0)
      extra.push_back({"reference adapter", trainer.reference_adapter_bytes(),
                       "the adapter the run continues from, frozen", true});
    const std::string of =
        untokenized ? fmt::format(
                          "the pairs not tokenized, {} has no tokenizer.json: {} of {}, "
                          "max_length{}",
                          cfg.model, counted(int64_t(num_pairs), "pair"), counted(length, "token"),
                          length < cfg.max_length ? " cut to the model's context" : "")
                    : fmt::format("{}, {}", counted(int64_t(num_pairs), "pair"),
                                  counted(trainer.total_steps(), "step"));
    print_pass_memory_plan(ts, fmt::format("memory plan of the largest batch ({})", of),
                           trainer.optimizer_state_bytes(), trainer.plan(), std::move(extra));
    return;
  }
  write_run_config(cfg.output_dir, yaml);
  RunControl control(cfg);
  trainer.run(
      [&](const DpoStepInfo& i) {
        const auto print_eval = [&] {
          if (i.evaluated)
            fmt::print(stderr,
                       "dpo eval at step {} | eval_loss {:.4f} | eval_rewards/accuracies {:.3f}\n",
                       i.step, i.eval_loss, i.eval_accuracy);
        };
        if (i.step % std::max<int64_t>(cfg.logging_steps, 1) != 0 && i.step != i.total_steps)
          return print_eval();
        fmt::print(stderr,
                   "dpo step {}/{} | loss {:.4f} | accuracy {:.3f} | margin {:.4f} | ETA {}\n",
                   i.step, i.total_steps, i.loss, i.accuracy, i.margin,
                   control.eta(i.step, i.total_steps));
        print_eval();
      },
      control.stop());
  control.print_done(trainer.total_steps(), cfg.output_dir, "adapter and metrics");
}

}  // namespace

void add_dpo_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "dpo", "DPO with LoRA over the frozen (FP8) model; the reference is the base itself");
  auto flags = std::make_shared<ConfigFlags<DpoConfig>>(*c, dpo_keys());
  flags->add_positional(*c, "model", "Hugging Face model directory (or `model:` in the config)");
  c->callback([flags] {
    DpoConfig cfg = flags->resolve();
    cfg.adopt_adapter_config(flags->given_keys());
    cfg.resolve_target_modules();
    run_dpo(cfg, flags->table().dump_yaml(cfg));
  });
}

}  // namespace fp8rl::cli
