// What the training commands (sft, grpo, dpo) share: the model session with a trainable
// adapter for it (fresh with the run's LoRA keys, or from --adapter), the tokenizer's EOS
// and chat template, the run directory's config record, and the per-step log line.
//
// A command reads the model directory's files first (load_model_files: config.json, the
// tokenizer), reads its data and checks the lengths against the model's context, then makes its
// session, which loads the weights. A --dry-run that cannot load (no weights in the directory, or
// --device cuda without a CUDA device) is an estimate: the model is its shapes on a dry-run
// context (SessionOptions::plan_only), and the plan says so (estimate_reason()).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/model_session.h"
#include "core/interrupt.h"
#include "core/wall_clock.h"
#include "model/adapter.h"
#include "rl/rollout_memory_plan.h"
#include "train/logprob_pass.h"
#include "train/model_arguments.h"
#include "train/sft_data.h"
#include "train/training_arguments.h"

namespace fp8rl::cli {

// The model directory's files a training command reads before the weights: config.json and the
// text side (ModelText), and the tokenizer's training setup (EOS, chat template; empty without a
// tokenizer.json). The command reads its datasets with them and checks their lengths against
// text.config() (check_context), then hands them to its TrainSession.
struct ModelFiles {
  ModelText text;
  SftTokenizerSetup tokenizer_setup;
};
// An error without a model (args.model empty).
ModelFiles load_model_files(const ModelArguments& args);

class TrainSession {
 public:
  // Loads the model (ModelSession, from `files`) and the adapter to train: args.adapter's PEFT
  // adapter, or a fresh one of args.lora_config() initialized from `seed`, on the session's
  // device. dry_run: a training command's --dry-run, which only plans; when it cannot load as
  // the run would (no weights in the directory, no CUDA device) the model is its shapes
  // (SessionOptions::plan_only) and estimate_reason() says why.
  TrainSession(const ModelArguments& args, uint64_t seed, ModelFiles files, bool dry_run = false);
  // The same, the files read here (load_model_files).
  TrainSession(const ModelArguments& args, uint64_t seed);
  ~TrainSession();
  // Why the plan is an estimate ("MODEL holds no weights", "no CUDA device is visible");
  // empty when the session loads the model as a run does.
  const std::string& estimate_reason() const { return estimate_reason_; }
  ModelSession& session() { return *session_; }
  Context& ctx() { return session_->ctx(); }
  Model& model() { return session_->model(); }
  LoraAdapter& adapter() { return *adapter_; }
  const tok::Tokenizer& tokenizer() const;  // an error when the model has no tokenizer.json
  // The tokenizer, or null when the model directory has no tokenizer.json.
  const tok::Tokenizer* tokenizer_if_any() const { return session_->tokenizer(); }
  const SftTokenizerSetup& tokenizer_setup() const { return tok_setup_; }
  const std::string& base_model_name() const { return base_model_name_; }

 private:
  std::unique_ptr<ModelSession> session_;
  std::unique_ptr<LoraAdapter> adapter_;
  SftTokenizerSetup tok_setup_;
  std::string base_model_name_;
  std::string estimate_reason_;
};

// The run directory's part of a training command, before the model loads: checks that
// output_dir can be written and is not taken by another run (claim_run_dir: --resume or
// --overwrite-output-dir). Nothing for a dry run, which writes nothing.
void check_output_dir(const TrainingArguments& args);

// What a training command does around its trainer's run(): says which checkpoint it resumes
// from, lets SIGINT and SIGTERM stop the run between steps (stop(), for the trainer) for its
// lifetime, and times the steps of this process alone (a resumed run's earlier steps took no
// time here, so counting them would make the ETA too short).
class RunControl {
 public:
  explicit RunControl(const TrainingArguments& args);
  StopRequest stop() const { return interrupt_.stop_request(); }
  // The time left after `step` of `total_steps`, from the steps this process has run.
  std::string eta(int64_t step, int64_t total_steps);
  // The closing line: the steps trained here, or why none were.
  void print_done(int64_t total_steps, const std::string& dir, const std::string& what) const;

 private:
  InterruptHandler interrupt_;
  int64_t resumed_step_ = 0;  // the step of the checkpoint resumed from (0: a fresh run)
  Clock::time_point start_;
};

// Writes the resolved configuration into the run directory as config.yaml (created first).
void write_run_config(const std::string& dir, const std::string& yaml);

// One line of a training command's memory plan (--dry-run) besides the session's own parts.
struct PlanPart {
  std::string name;
  size_t bytes = 0;
  std::string note;      // printed after the size, in parentheses
  bool in_total = true;  // false: host memory, listed but not summed
};

// A training command's memory plan: the session's weights and adapter (masters, compute
// copies and gradients), the optimizer's state, `parts` (the step's memory, measured by the
// trainer's dry run), the workspace (the scratch arena as it will be: the larger of
// `scratch_bytes` and what it holds, for it only grows; the cuBLASLt workspace) and the total.
// print (a dry run): printed under `title`; an estimate (TrainSession::estimate_reason) says
// so, and why, after the total. Then, with a memory budget (--gpu-memory), the total is
// checked against it before the first step: over it is an error naming every part and the
// excess, with `hint` (what to lower); a printed plan shows the budget and what it leaves.
void report_memory_plan(TrainSession& ts, const std::string& title, size_t optimizer_state_bytes,
                        const std::vector<PlanPart>& parts, size_t scratch_bytes, bool print,
                        const std::string& hint);

// report_memory_plan for a trainer whose step memory is one pass: its saved activations and KV
// (and the offloaded layer inputs, in host memory, listed apart), after `extra` parts.
void report_pass_memory_plan(TrainSession& ts, const std::string& title,
                             size_t optimizer_state_bytes, const PassPlan& plan, bool print,
                             const std::string& hint, std::vector<PlanPart> extra = {});

// The step-memory parts of a rollout trainer's plan (GRPO's, PPO's): the standby region and
// what takes turns in it, the reward models' own weights and adapters, the frozen reference
// adapter and the offloaded layer inputs (host memory, listed apart).
std::vector<PlanPart> rollout_plan_parts(TrainSession& ts, const RolloutMemoryPlan& p);

// What a training run can change to fit its memory budget (report_memory_plan's hint): lower
// `sizes` (the command's batch and length keys), the memory switches it has not turned on, or
// a larger gpu_memory.
std::string training_budget_hint(const TrainingArguments& args, const std::string& sizes);

// "1h02m", "3m12s", "45s".
std::string format_duration(double seconds);

}  // namespace fp8rl::cli
