// fp8rl sft MODEL --data TRAIN.jsonl --out RUN_DIR [--config F.yaml] [every SFTConfig key]
#include <memory>

#include "cli/commands.h"
#include "cli/config_keys.h"
#include "cli/output_path.h"
#include "cli/train_session.h"
#include "core/check.h"
#include "core/spelling.h"
#include "train/run_dir.h"
#include "train/sft_trainer.h"
#include "train/step_metrics.h"
#include "train/training_arguments.h"

namespace fp8rl::cli {

namespace {

void run_sft(const SftConfig& cfg, const std::string& yaml) {
  CHECK(!cfg.data.empty(), "no dataset: give --data TRAIN.jsonl (or `data:` in the config)");
  // A RUN_DIR that is (or holds) an input, or cannot be written, fails before the model loads.
  check_run_dir(cfg.output_dir, {cfg.model, cfg.data, cfg.adapter, cfg.eval_dataset});
  check_output_dir(cfg);
  if (!cfg.dry_run) check_logging_dir_writable(cfg);
  TrainSession ts(cfg, uint64_t(cfg.seed));
  SftDataOptions d;
  d.max_length = cfg.max_length;
  d.truncation = cfg.truncation;
  d.chat_template_kwargs = cfg.chat_template_kwargs;
  d.dataset_text_field = cfg.dataset_text_field;
  d.completion_only_loss = cfg.completion_only_loss;
  d.assistant_only_loss = cfg.assistant_only_loss;
  d.eos_token_id = ts.tokenizer_setup().eos_token_id;
  d.vocab_size = ts.model().config().vocab_size;
  const auto& chat = ts.tokenizer_setup().chat;
  std::vector<SftExample> examples =
      read_sft_dataset(cfg.data, ts.tokenizer_if_any(), chat ? &*chat : nullptr, d);
  // The eval rows as the training ones (the same limits and loss masks), before any step.
  std::vector<SftExample> eval_examples;
  if (cfg.evaluates())
    eval_examples =
        read_sft_dataset(cfg.eval_dataset, ts.tokenizer_if_any(), chat ? &*chat : nullptr, d);
  const size_t num_examples = examples.size();
  SftTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), std::move(examples), cfg,
                     ts.base_model_name());
  if (cfg.evaluates()) trainer.set_eval_data(std::move(eval_examples));
  if (cfg.dry_run) {
    print_pass_memory_plan(ts,
                           fmt::format("memory plan of the largest micro-batch ({}, {})",
                                       counted(int64_t(num_examples), "example"),
                                       counted(trainer.total_steps(), "step")),
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
