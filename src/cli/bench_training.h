// What the training benchmarks (bench train, bench grpo) share: the model options, the model
// (a directory, or a preset with random weights made on the device) with a fresh LoRA adapter
// of rank R (alpha 2R) on all seven projections attached, random token ids, the JSON output.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/model_session.h"
#include "model/adapter.h"

namespace fp8rl::cli {

struct BenchModelOptions {
  std::string model, preset, fp8 = "row", device = "cuda", out;
  int64_t lora_r = 32;
  uint64_t seed = 0;
  CudaDeviceOptions cuda;  // the controls of add_cuda_control_flags
};

// --model, --preset, --fp8, --lora-r, --device, --seed, --out, and the controls
// --no-concurrent-linears, --no-decode-mma.
void add_bench_model_options(CLI::App& c, BenchModelOptions& o);

class BenchTrainingModel {
 public:
  // `command` names the benchmark in errors.
  BenchTrainingModel(const BenchModelOptions& o, const std::string& command);
  ~BenchTrainingModel();
  ModelSession& session() { return *session_; }
  Context& ctx() { return session_->ctx(); }
  Model& model() { return session_->model(); }
  LoraAdapter& adapter() { return *adapter_; }

 private:
  std::unique_ptr<ModelSession> session_;
  std::unique_ptr<LoraAdapter> adapter_;
};

// n ids uniform in [0, vocab), a function of the seed.
std::vector<int32_t> random_token_ids(int64_t n, int64_t vocab, uint64_t seed);

}  // namespace fp8rl::cli
