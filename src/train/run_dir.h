// The run directory of a training command (fp8rl sft / grpo / dpo), as TRL's output_dir:
//   metrics.jsonl            one JSON object per optimizer step
//   checkpoint-<step>/       adapter_config.json + adapter_model.safetensors (PEFT's files)
//                            and trainer_state.safetensors (optimizer moments, step counters,
//                            schedule, and the run's own resume state as JSON metadata)
//   adapter_config.json, adapter_model.safetensors   the final adapter
// A checkpoint is written completely under a temporary name and then renamed, so an
// interrupted run (a kill, a full disk) leaves the previous checkpoints intact and loadable.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fp8rl {

class LoraAdapter;
class StopRequest;
struct Context;
class Model;
class TrainStep;

// Creates the run directory (and parents) and checks it is writable: an error names it.
// Removes what an interrupted run left there (a checkpoint being built, files' temporaries).
void prepare_run_dir(const std::string& dir);

// What prepare_run_dir would reject, found without creating anything (the directory, or its
// nearest existing ancestor, is not a writable directory): the training commands call it
// before loading a model so that a bad RUN_DIR fails at once. `what` names the directory in
// errors (logging_dir for TensorBoard's).
void check_run_dir_writable(const std::string& dir, const char* what = "the run directory");

// What of fp8rl's run files `dir` holds (metrics.jsonl, config.yaml, samples.jsonl, report.html,
// checkpoint-<step>/, the adapter's files), by name; empty for an empty or missing directory
// or one with only other files.
std::vector<std::string> run_files(const std::string& dir);

// Before a training run writes into `dir` (the commands call it before loading the model):
// resuming, `dir` may hold anything; otherwise a `dir` that holds a run is an error that says so,
// unless `overwrite` (--overwrite-output-dir), which removes fp8rl's run files from it first.
// Other files are left where they are, as transformers writes into a directory that holds them.
void claim_run_dir(const std::string& dir, bool resuming, bool overwrite);

// The checkpoint a run resumes from, given resume_from_checkpoint: "" or "false" none, "true" the
// newest in output_dir (an error when there is none), else that directory.
std::string resume_checkpoint(const std::string& resume_from_checkpoint,
                              const std::string& output_dir);

// The step of a checkpoint directory named checkpoint-<step>, or -1.
int64_t checkpoint_step(const std::string& checkpoint);

// Thrown by a trainer's run() that a StopRequest (core/interrupt.h) stopped between steps, once
// the checkpoint of the last completed step is on disk.
class RunInterrupted : public std::runtime_error {
 public:
  // `checkpoint`: where the run stands ("" when it has none: no step completed).
  RunInterrupted(int signal, int64_t step, int64_t total_steps, std::string checkpoint);
  int signal = 0;
  int64_t step = 0, total_steps = 0;
  std::string checkpoint;
};

// The path of checkpoint-<step> in `dir`.
std::string checkpoint_path(const std::string& dir, int64_t step);

// The end of a training loop that `stop` ended after `step` of `total_steps`: calls `save`
// (which writes checkpoint-<step> as save_steps does) unless `saved`, the run's newest
// checkpoint ("" none), is already of that step, or no step was taken; then throws
// RunInterrupted.
[[noreturn]] void end_stopped_run(const StopRequest& stop, int64_t step, int64_t total_steps,
                                  const std::string& dir, const std::string& saved,
                                  const std::function<void()>& save);

// Writes checkpoint-<step> of `dir`. `state` is the trainer's resume state (data position,
// random streams, ...), stored as metadata "train.run_state". Built under a temporary name,
// fsynced and renamed: a failure (a full disk) raises an error naming the file and the
// reason, and leaves no directory that latest_checkpoint() would take. `write_extra`, when
// given, writes the trainer's other files into the directory being built (its path) before the
// rename (PPO's value adapter).
void save_checkpoint(const std::string& dir, int64_t step, const LoraAdapter& adapter,
                     const TrainStep& train_step, const nlohmann::json& state,
                     const std::string& base_model_name,
                     const std::function<void(const std::string&)>& write_extra = {});

// The checkpoint directory with the highest step under `dir`, or "" when there is none.
std::string latest_checkpoint(const std::string& dir);

// Loads a checkpoint written by save_checkpoint: the adapter's values (into `adapter`'s
// masters, in place, so every forward given the adapter reads them; device copies refreshed on
// CUDA), the optimizer state and counters into train_step; returns the run state.
nlohmann::json load_checkpoint(const std::string& checkpoint, Context& ctx, const Model& model,
                               LoraAdapter& adapter, TrainStep& train_step);

// Field `key` of a checkpoint's run state `state` as a data position: an integer >= 0, else
// an error naming the checkpoint and the field (a negative position would index before the
// data).
int64_t checkpoint_position(const nlohmann::json& state, const char* key,
                            const std::string& checkpoint);

// A JSON-lines log of the run keyed by "step" (metrics.jsonl, samples.jsonl), one write(2)
// per line. Opening for a resumed run keeps the lines of steps <= resumed_step and drops later
// ones (written after that checkpoint by the interrupted run), so the file reads as one
// uninterrupted run; the file is replaced whole (write, then rename). A failed write raises
// an error naming the file and the reason and truncates the partial line away.
class MetricsLog {
 public:
  MetricsLog(const std::string& dir, int64_t resumed_step,
             const std::string& file = "metrics.jsonl");
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& line);

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;  // bytes of whole lines in the file
};

// Peak resident memory of the process since it started or since the last reset_peak_memory
// of a CPU context, bytes.
size_t peak_host_memory_bytes();
// The peak of the memory training runs in: the device's allocations on CUDA, the process's
// resident high water on the CPU; since the last reset_peak_memory(ctx).
size_t peak_memory_bytes(const Context& ctx);
// Starts the peak again from what is in use now, so that a phase (rollout, training) reports
// its own peak.
void reset_peak_memory(Context& ctx);

}  // namespace fp8rl
