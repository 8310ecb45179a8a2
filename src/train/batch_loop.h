// The optimizer-step loop of the trainers over a fixed dataset (dpo, kto, reward), as
// transformers' Trainer runs it: resume from a checkpoint, eval_on_start, steps of
// gradient_accumulation_steps micro-batches (an epoch's last step may be shorter), each step's
// metrics line with the evaluation eval_strategy asks for, checkpoints every save_steps and at
// the end, a stopped run's checkpoint, the final adapter. A trainer gives what differs as hooks.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "core/tensor.h"

namespace fp8rl {

struct Context;
class Model;
class LoraAdapter;
class StopRequest;
class TrainStep;
struct TrainingArguments;

// Where the loop stands in the data: the epoch and the next batch of it.
struct DataPosition {
  int64_t epoch = 0, batch = 0;
};

struct BatchLoopHooks {
  // The trainer's resume state beyond the position (written into each checkpoint, read back
  // from the one resumed); may be empty.
  std::function<void(nlohmann::json& state)> save_state;
  std::function<void(const nlohmann::json& state, const std::string& checkpoint)> load_state;
  std::function<nlohmann::json()> evaluate;  // the eval_* metrics
  std::function<void()> begin_step;          // before a step's first micro-batch; may be empty
  // Micro-batch `at`, its dropout keyed by `dropout_seed`: adds its gradient divided by
  // `accumulation` (gradient_accumulation_steps) to grads [P] and returns its loss so divided.
  std::function<double(const DataPosition& at, uint64_t dropout_seed, const TensorView& grads,
                       double accumulation)>
      micro_step;
  // The trainer's metrics of the step just taken (`micro_batches` of them, in `seconds`),
  // added to its line.
  std::function<void(nlohmann::json& line, int64_t micro_batches, double seconds)> add_metrics;
  // After the line (with any evaluation) is written; may be empty.
  std::function<void(const nlohmann::json& line, double loss, double seconds, bool evaluated)>
      on_step;
};

struct BatchLoop {
  const TrainingArguments& cfg;
  Context& ctx;
  const Model& model;
  LoraAdapter& adapter;
  TrainStep& train_step;
  const std::string& base_model_name;
  int64_t total_steps = 0, batches_per_epoch = 0;
};

// Runs `loop` from `at` (moved on as batches are taken) until total_steps or `stop`.
void run_batch_loop(const BatchLoop& loop, DataPosition& at, const BatchLoopHooks& hooks,
                    const StopRequest& stop);

}  // namespace fp8rl
