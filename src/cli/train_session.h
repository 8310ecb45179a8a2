// What the training commands (sft, grpo, dpo) share: the model session with a trainable
// adapter for it (fresh with the run's LoRA keys, or from --adapter), the tokenizer's EOS
// and chat template, the run directory's config record, and the per-step log line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/model_session.h"
#include "model/adapter.h"
#include "train/logprob_pass.h"
#include "train/model_arguments.h"
#include "train/sft_data.h"

namespace fp8rl::cli {

class TrainSession {
 public:
  // Loads the model (ModelSession) and the adapter to train: args.adapter's PEFT adapter, or a
  // fresh one of args.lora_config() initialized from `seed`, on the session's device.
  TrainSession(const ModelArguments& args, uint64_t seed);
  ~TrainSession();
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
};

// Writes the resolved configuration into the run directory as config.yaml (created first).
void write_run_config(const std::string& dir, const std::string& yaml);

// Bytes of the model's weights as the forward reads them (FP8 codes and scales, embeddings,
// norms; the lm_head once when tied).
size_t model_weight_bytes(const Model& model);

// One line of a training command's memory plan (--dry-run) besides the session's own parts.
struct PlanPart {
  std::string name;
  size_t bytes = 0;
  std::string note;      // printed after the size, in parentheses
  bool in_total = true;  // false: host memory, listed but not summed
};

// Prints a training command's memory plan: the session's weights and adapter (masters, compute
// copies and gradients), the optimizer's state, `parts` (the step's memory, measured by the
// trainer's dry run), the workspace (the scratch arena as it will be: the larger of
// `scratch_bytes` and what it holds, for it only grows; the cuBLASLt workspace) and the total.
void print_memory_plan(TrainSession& ts, const std::string& title, size_t optimizer_state_bytes,
                       const std::vector<PlanPart>& parts, size_t scratch_bytes);

// print_memory_plan for a trainer whose step memory is one pass: its saved activations and KV
// (and the offloaded layer inputs, in host memory, listed apart), after `extra` parts.
void print_pass_memory_plan(TrainSession& ts, const std::string& title,
                            size_t optimizer_state_bytes, const PassPlan& plan,
                            std::vector<PlanPart> extra = {});

// "1h02m", "3m12s", "45s".
std::string format_duration(double seconds);

}  // namespace fp8rl::cli
