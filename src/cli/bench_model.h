// What the bench commands share: the model options; the model (a checkpoint directory, or
// random weights made on the device for a preset or a directory holding only config.json);
// a fresh LoRA adapter of rank R on all seven projections; the developer controls
// (--device-option); random token ids.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/device_options.h"
#include "cli/model_session.h"
#include "model/adapter.h"
#include "rl/prompt_data.h"

namespace fp8rl::cli {

struct BenchModelOptions {
  std::string model, preset, fp8 = "row", device = "cuda", out;
  std::string adapter;    // a PEFT adapter directory instead of a fresh one (bench forward)
  bool random = false;    // random weights even if the directory has a checkpoint
  int64_t lora_r = 32;    // 0: no fresh adapter
  double lora_alpha = 0;  // 0: 2 r
  uint64_t seed = 0;
  std::vector<std::string> device_options;  // --device-option KEY=VALUE
  std::optional<double> gpu_memory;         // --gpu-memory GIB (SessionOptions::gpu_memory)
};

// --model, --preset, --fp8, --device, --gpu-memory, --seed, --out and --device-option.
void add_bench_model_options(CLI::App& c, BenchModelOptions& o);
// --lora-r and --lora-alpha.
void add_bench_lora_options(CLI::App& c, BenchModelOptions& o);

// The shape of an RL bench step (bench grpo, bench ppo): P prompts, each G times in the batch,
// of L prompt and C completion tokens; N steps, each trained in K micro-batches.
struct BenchRolloutOptions {
  int64_t prompts = 1, generations = 8, prompt_tokens = 128, completion_tokens = 512;
  int64_t steps = 3;
  int64_t gradient_accumulation_steps = 1;
  double kv_memory = 0;
  std::string kv_dtype = "bf16";
  bool checkpointing = true;
};
// --prompts, --generations, --prompt-tokens, --completion-tokens, --steps,
// --gradient-accumulation-steps, --kv-memory, --kv-dtype and --[no-]checkpointing.
void add_bench_rollout_options(CLI::App& c, BenchRolloutOptions& o);

// The fresh adapter's B: zero as PEFT initializes it (training starts from the base model), or
// drawn like A so that the adapter's term is not zero (a trained adapter's cost in generation).
enum class BenchLoraInit { peft, random };

class BenchModel {
 public:
  // `command` names the benchmark in errors; `scopes` are the --device-option scopes it has.
  BenchModel(const BenchModelOptions& o, const std::string& command,
             const std::vector<ControlScope>& scopes, BenchLoraInit init);
  ~BenchModel();
  ModelSession& session() { return *session_; }
  Context& ctx() { return session_->ctx(); }
  Model& model() { return session_->model(); }
  const DeviceControls& controls() const { return controls_; }
  bool random_weights() const { return random_weights_; }
  // The fresh adapter (--lora-r > 0) or the --adapter one; null when there is neither.
  const LoraAdapter* adapter() const;
  // The fresh adapter, which training benchmarks require.
  LoraAdapter& fresh_adapter();
  std::string device_name();  // the CUDA device's name, or "cpu"
  // "checkpoint" or "random (Model::random on the device)", for the JSON.
  const char* weights() const;

 private:
  DeviceControls controls_;
  bool random_weights_ = false;
  std::string command_;
  std::unique_ptr<ModelSession> session_;
  std::unique_ptr<LoraAdapter> adapter_;
};

// n ids uniform in [0, vocab), a function of the seed.
std::vector<int32_t> random_token_ids(int64_t n, int64_t vocab, uint64_t seed);
// The prompts of o.steps steps: o.prompts prompts of o.prompt_tokens random ids each (from
// seed), each `copies` times in a row (bench grpo: 1, the engine samples its generations;
// bench ppo: o.generations, a PPO batch holding each prompt that often).
std::vector<PromptExample> random_prompts(const BenchRolloutOptions& o, int64_t vocab,
                                          uint64_t seed, int64_t copies);

// The last line of `dir`/metrics.jsonl (an RL bench's run), then `dir` removed.
nlohmann::json take_last_metrics(const std::string& dir);
// The head of an RL bench's JSON: command, model, weights, fp8, device, the CUDA controls and
// the rollout's shape (prompts, generations, lengths, KV dtype, LoRA, checkpointing, steps).
nlohmann::json rollout_report(const std::string& command, BenchModel& bench,
                              const BenchModelOptions& m, const BenchRolloutOptions& o,
                              double lora_alpha);

}  // namespace fp8rl::cli
