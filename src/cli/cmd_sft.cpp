// fp8rl sft MODEL --data TRAIN.jsonl --out RUN_DIR [--config F.yaml] [every SFTConfig key]
#include <algorithm>
#include <memory>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "cli/output_path.h"
#include "cli/train_session.h"
#include "core/check.h"
#include "core/input_file.h"
#include "core/spelling.h"
#include "formats/json_read.h"
#include "train/run_dir.h"
#include "train/sft_trainer.h"
#include "train/step_metrics.h"
#include "train/training_arguments.h"

namespace fp8rl::cli {

namespace {

// Whether the dataset's first row holds token ids (input_ids), which need no tokenizer.
bool rows_are_token_ids(const std::string& path) {
  InputLines in(path, "dataset", uint64_t(64) << 20);
  std::string text;
  while (in.next(text)) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const nlohmann::json row = parse_json_text(text, "the row");
      return row.is_object() && row.contains("input_ids");
    } catch (const Error&) {
      return false;  // the reader names what is wrong with it
    }
  }
  return false;
}

// The largest micro-batch of a dry run whose text rows cannot be tokenized (the model
// directory has no tokenizer.json): sequences of `length` tokens, as many as one takes.
std::vector<SftExample> configured_examples(const SftConfig& cfg, int64_t length) {
  const int64_t n = cfg.packing ? std::max<int64_t>(1, cfg.tokens_per_batch() / length)
                                : cfg.per_device_train_batch_size;
  SftExample e;
  e.input_ids.assign(size_t(length), 0);
  e.loss_mask.assign(size_t(length), 1);
  e.loss_mask[0] = 0;
  return std::vector<SftExample>(size_t(n), e);
}

// The longest example against the model's context, before the weights load.
void check_examples_context(const ModelConfig& c, const std::vector<SftExample>& examples,
                            const std::string& data) {
  const SftExample* longest = nullptr;
  for (const SftExample& e : examples)
    if (longest == nullptr || e.input_ids.size() > longest->input_ids.size()) longest = &e;
  if (longest != nullptr)
    check_context(c, int64_t(longest->input_ids.size()),
                  fmt::format("the longest example, {} line {}", data, longest->line));
}

void run_sft(const SftConfig& cfg, const std::string& yaml) {
  CHECK(!cfg.data.empty(), "no dataset: give --data TRAIN.jsonl (or `data:` in the config)");
  // A RUN_DIR that is (or holds) an input, or cannot be written, fails before the model loads.
  check_run_dir(cfg.output_dir, {cfg.model, cfg.data, cfg.adapter, cfg.eval_dataset});
  check_output_dir(cfg);
  if (!cfg.dry_run) check_logging_dir_writable(cfg);
  // The model directory's config and tokenizer first: the dataset is read and its lengths
  // checked against the model's context before the weights load.
  ModelFiles files = load_model_files(cfg);
  const ModelConfig& config = files.text.config();
  const tok::Tokenizer* tokenizer = files.text.tokenizer();
  SftDataOptions d;
  d.max_length = cfg.max_length;
  d.truncation = cfg.truncation;
  d.chat_template_kwargs = cfg.chat_template_kwargs;
  d.dataset_text_field = cfg.dataset_text_field;
  d.completion_only_loss = cfg.completion_only_loss;
  d.assistant_only_loss = cfg.assistant_only_loss;
  d.eos_token_id = files.tokenizer_setup.eos_token_id;
  d.vocab_size = config.vocab_size;
  const auto& chat = files.tokenizer_setup.chat;
  // A dry run still plans when text rows cannot be tokenized: at the configured lengths.
  const bool untokenized = cfg.dry_run && tokenizer == nullptr && !rows_are_token_ids(cfg.data);
  // Rows longer than the context cannot train, so the configured length stops there.
  const int64_t length = std::min(cfg.max_length, config.max_context);
  std::vector<SftExample> examples, eval_examples;
  if (untokenized) {
    examples = configured_examples(cfg, length);
  } else {
    examples = read_sft_dataset(cfg.data, tokenizer, chat ? &*chat : nullptr, d);
    // The eval rows as the training ones (the same limits and loss masks), before any step.
    if (cfg.evaluates())
      eval_examples = read_sft_dataset(cfg.eval_dataset, tokenizer, chat ? &*chat : nullptr, d);
    // The lengths once every input has been read (a malformed row is named first).
    check_examples_context(config, examples, cfg.data);
    check_examples_context(config, eval_examples, cfg.eval_dataset);
  }
  TrainSession ts(cfg, uint64_t(cfg.seed), std::move(files), cfg.dry_run);
  const size_t num_examples = examples.size();
  SftTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), std::move(examples), cfg,
                     ts.base_model_name());
  if (cfg.evaluates() && !untokenized) trainer.set_eval_data(std::move(eval_examples));
  if (cfg.dry_run) {
    const std::string of =
        untokenized
            ? fmt::format(
                  "the dataset not tokenized, {} has no tokenizer.json: {} of {}, "
                  "max_length{}",
                  cfg.model, counted(int64_t(num_examples), "example"), counted(length, "token"),
                  length < cfg.max_length ? " cut to the model's context" : "")
            : fmt::format("{}, {}", counted(int64_t(num_examples), "example"),
                          counted(trainer.total_steps(), "step"));
    print_pass_memory_plan(ts, fmt::format("memory plan of the largest micro-batch ({})", of),
                           trainer.optimizer_state_bytes(), trainer.plan());
    return;
  }
  write_run_config(cfg.output_dir, yaml);
  RunControl control(cfg);
  trainer.run(
      [&](const SftStepInfo& i) {
        const auto print_eval = [&] {
          if (i.evaluated)
            fmt::print(stderr, "sft eval at step {} | eval_loss {:.4f} | {:.1f} s\n", i.step,
                       i.eval_loss, i.eval_seconds);
        };
        if (i.step % std::max<int64_t>(cfg.logging_steps, 1) != 0 && i.step != i.total_steps)
          return print_eval();
        fmt::print(stderr,
                   "sft step {}/{} | loss {:.4f} | grad_norm {:.3f} | lr {:.3g} | {:.0f} tok/s | "
                   "ETA {}{}\n",
                   i.step, i.total_steps, i.loss, i.grad_norm, i.lr, i.tokens_per_second,
                   control.eta(i.step, i.total_steps),
                   i.skipped ? " | step skipped (non-finite)" : "");
        print_eval();
      },
      control.stop());
  control.print_done(trainer.total_steps(), cfg.output_dir, "adapter");
}

}  // namespace

void add_sft_command(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "sft", "Supervised fine-tuning of a LoRA adapter over the frozen (FP8) model");
  auto flags = std::make_shared<ConfigFlags<SftConfig>>(*c, sft_keys());
  flags->add_positional(*c, "model", "Hugging Face model directory");
  c->callback([flags] {
    SftConfig cfg = flags->resolve();
    cfg.adopt_adapter_config(flags->given_keys());
    cfg.resolve_target_modules();
    run_sft(cfg, flags->table().dump_yaml(cfg));
  });
}

}  // namespace fp8rl::cli
