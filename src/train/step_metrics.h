// The per-step metrics of a training run (sft, grpo, dpo, kto, reward): metrics.jsonl always
// (MetricsLog), and the trackers report_to names. fp8rl has one tracker, TensorBoard
// (formats/tensorboard_events.h), whose scalars carry the tags transformers'
// TensorBoardCallback gives them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/run_dir.h"

namespace fp8rl {

struct TrainingArguments;
class TensorBoardWriter;

// report_to's names: tensorboard, all (= tensorboard) or none (alone). Any other tracker is
// an error naming it and what is supported.
void check_report_to(const std::vector<std::string>& report_to);

// A metrics value as metrics.jsonl writes it: the number, or null when it is not finite (as
// transformers' JSON log cannot hold NaN or infinities).
nlohmann::json finite_or_null(double v);
// A metrics line's number at `key`, NaN when it has none (or null).
double number_or_nan(const nlohmann::json& line, const char* key);
bool reports_to_tensorboard(const std::vector<std::string>& report_to);

// Where a run's TensorBoard files go: logging_dir, or (transformers' default)
// output_dir/runs/<Mon DD_HH-MM-SS>_<hostname> at the time of the call.
std::string tensorboard_dir(const TrainingArguments& args);

// When report_to names tensorboard and logging_dir is set: an error unless logging_dir can be
// created and written (check_run_dir_writable's test), so that a bad one fails before the model
// loads. The default lies under output_dir, which the run checks itself.
void check_logging_dir_writable(const TrainingArguments& args);

// A metrics line's scalars as TensorBoard tags, as transformers' rewrite_logs names them:
// "eval_x" -> "eval/x", "test_x" -> "test/x", any other key k -> "train/k". Numbers and
// booleans (0 or 1); null (how metrics.jsonl writes a non-finite value), strings, objects and
// "step" itself are left out, as transformers leaves out what is not a number.
std::vector<std::pair<std::string, float>> tensorboard_scalars(const nlohmann::json& line);

class StepMetrics {
 public:
  // metrics.jsonl of output_dir for a run resumed after `resumed_step` (0: a fresh run) and,
  // when report_to names tensorboard, a new event file in tensorboard_dir(args). A resumed
  // run's event file starts with a session start at resumed_step + 1, so that TensorBoard
  // drops what an interrupted run logged past its checkpoint (where both runs share a
  // logging_dir), as metrics.jsonl drops those lines.
  StepMetrics(const TrainingArguments& args, int64_t resumed_step);
  ~StepMetrics();
  StepMetrics(const StepMetrics&) = delete;
  StepMetrics& operator=(const StepMetrics&) = delete;

  // The line into metrics.jsonl, and its scalars at its "step" into TensorBoard, both written
  // through before this returns.
  void write(const nlohmann::json& line);

 private:
  MetricsLog jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace fp8rl
