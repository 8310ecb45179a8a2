// fp8rl kto --config RUN.yaml [MODEL] [every KTOConfig key as a flag]
#include <algorithm>
#include <memory>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "cli/output_path.h"
#include "cli/train_session.h"
#include "core/check.h"
#include "core/spelling.h"
#include "rl/kto_trainer.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"

namespace fp8rl::cli {

namespace {

// The longest sequence the trainer packs (an example's own, or its prompt with its KL partner's
// completion, each cut at max_length) against the model's context, before the weights load.
void check_examples_context(const ModelConfig& c, const std::vector<UnpairedExample>& examples,
                            const KtoConfig& cfg, const std::string& data) {
  int64_t longest = 0, line = 0;
  const int64_t n = int64_t(examples.size());
  for (int64_t i = 0; i < n; ++i) {
    const UnpairedExample& e = examples[size_t(i)];
    const UnpairedExample& partner =
        examples[size_t(kto_kl_partner(i, n, cfg.per_device_train_batch_size))];
    const int64_t length = std::max(kto_sequence_length(e, e.completion, cfg.max_length),
                                    kto_loss_uses_kl(cfg.loss_type)
                                        ? kto_sequence_length(e, partner.completion, cfg.max_length)
                                        : 0);
    if (length > longest) {
      longest = length;
      line = e.line;
    }
  }
  if (longest > 0)
    check_context(c, longest,
                  fmt::format("the longest prompt + completion, {} line {}", data, line));
}

void run_kto(const KtoConfig& cfg, const std::string& yaml) {
  CHECK(!cfg.data.empty(), "no dataset: give --data EXAMPLES.jsonl (or `data:` in the config)");
  check_run_dir(cfg.output_dir, {cfg.model, cfg.data, cfg.adapter, cfg.eval_dataset});
  check_output_dir(cfg);
  if (!cfg.dry_run) check_logging_dir_writable(cfg);
  ModelFiles files = load_model_files(cfg);
  const ModelConfig& config = files.text.config();
  PreferenceDataOptions d;
  d.max_length = cfg.max_length;
  d.max_prompt_length = std::nullopt;
  d.truncation = cfg.truncation;
  d.chat_template_kwargs = cfg.chat_template_kwargs;
  d.eos_token_id = files.tokenizer_setup.eos_token_id;
  const auto& chat = files.tokenizer_setup.chat;
  // A dry run still plans when the rows cannot be tokenized: examples of max_length tokens.
  const bool untokenized = cfg.dry_run && files.text.tokenizer() == nullptr;
  const int64_t length = std::min(cfg.max_length, config.max_context);
  std::vector<UnpairedExample> examples, eval_examples;
  if (untokenized) {
    UnpairedExample e;
    e.prompt.assign(size_t(std::max<int64_t>(length / 2, 1)), 0);
    e.completion.assign(size_t(std::max<int64_t>(length - int64_t(e.prompt.size()), 1)), 0);
    examples.assign(size_t(cfg.per_device_train_batch_size), e);
  } else {
    const tok::Tokenizer& tokenizer = files.text.require_tokenizer("training");
    examples = read_unpaired_dataset(cfg.data, tokenizer, chat ? &*chat : nullptr, d);
    if (cfg.evaluates())
      eval_examples =
          read_unpaired_dataset(cfg.eval_dataset, tokenizer, chat ? &*chat : nullptr, d);
    check_examples_context(config, examples, cfg, cfg.data);
    if (!eval_examples.empty())
      check_examples_context(config, eval_examples, cfg, cfg.eval_dataset);
  }
  TrainSession ts(cfg, uint64_t(cfg.seed), std::move(files), cfg.dry_run);
  const size_t num_examples = examples.size();
  KtoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), std::move(examples), cfg,
                     ts.base_model_name());
  if (cfg.evaluates() && !untokenized) trainer.set_eval_data(std::move(eval_examples));
  std::vector<PlanPart> extra;
  if (trainer.reference_adapter_bytes() > 0)
    extra.push_back({"reference adapter", trainer.reference_adapter_bytes(),
                     "the adapter the run continues from, frozen", true});
  const std::string of =
      untokenized
          ? fmt::format("the examples not tokenized, {} has no tokenizer.json: {} of {}", cfg.model,
                        counted(int64_t(num_examples), "example"), counted(length, "token"))
          : fmt::format("{}, {}", counted(int64_t(num_examples), "example"),
                        counted(trainer.total_steps(), "step"));
  report_pass_memory_plan(ts, fmt::format("memory plan of the largest batch ({})", of),
                          trainer.optimizer_state_bytes(), trainer.plan(), cfg.dry_run,
                          training_budget_hint(cfg, "per_device_train_batch_size or max_length"),
                          std::move(extra));
  if (cfg.dry_run) return;
  write_run_config(cfg.output_dir, yaml);
  RunControl control(cfg);
  trainer.run(
      [&](const KtoStepInfo& i) {
        const auto print_eval = [&] {
          if (i.evaluated)
            fmt::print(stderr, "kto eval at step {} | eval_loss {:.4f}\n", i.step, i.eval_loss);
        };
        if (i.step % std::max<int64_t>(cfg.logging_steps, 1) != 0 && i.step != i.total_steps)
          return print_eval();
        fmt::print(stderr, "kto step {}/{} | loss {:.4f} | kl {:.4f} | ETA {}\n", i.step,
                   i.total_steps, i.loss, i.kl, control.eta(i.step, i.total_steps));
        print_eval();
      },
      control.stop());
  control.print_done(trainer.total_steps(), cfg.output_dir, "adapter and metrics");
}

}  // namespace

void add_kto_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "kto", "KTO with LoRA over the frozen (FP8) model on unpaired desirable/undesirable rows");
  auto flags = std::make_shared<ConfigFlags<KtoConfig>>(*c, kto_keys());
  flags->add_positional(*c, "model", "Hugging Face model directory (or `model:` in the config)");
  c->callback([flags] {
    KtoConfig cfg = flags->resolve();
    cfg.adopt_adapter_config(flags->given_keys());
    cfg.resolve_target_modules();
    run_kto(cfg, flags->table().dump_yaml(cfg));
  });
}

}  // namespace fp8rl::cli
