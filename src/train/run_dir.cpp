#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/check.h"
#include "core/input_file.h"
#include "core/interrupt.h"
#include "core/output_file.h"
#include "formats/json_read.h"
#include "formats/safetensors.h"
#include "model/adapter.h"
#include "model/model.h"
#include "ops/memory.h"
#include "train/train_step.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

constexpr const char* kRunStateKey = "train.run_state";
constexpr const char* kStateFile = "trainer_state.safetensors";
// The optimizer moments are flat vectors laid out like LoraAdapter::master_params(); a
// checkpoint names that layout so that one written with another cannot be resumed silently
// wrong.
constexpr const char* kLayoutKey = "fp8rl_adapter_layout";
constexpr const char* kLayout = "per layer: A matrices in projection order, then B matrices";
// A checkpoint is built under this prefix + step, then renamed to checkpoint-<step>.
constexpr const char* kCheckpointTemp = ".tmp-checkpoint-";
// The files of a run directory that are replaced through a temporary "<name>.tmp".
constexpr const char* kRunFiles[] = {"config.yaml", "metrics.jsonl", "samples.jsonl",
                                     "adapter_config.json", "adapter_model.safetensors"};

int64_t step_of(const fs::path& p) {
  const std::string name = p.filename().string();
  const std::string prefix = "checkpoint-";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  int64_t step = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9' || step > (int64_t(1) << 50)) return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

}  // namespace

void prepare_run_dir(const std::string& dir) {
  CHECK(!dir.empty(), "the run directory (output_dir / --out) is not set");
  std::error_code ec;
  fs::create_directories(dir, ec);
  CHECK(!ec && fs::is_directory(dir), "cannot create the run directory '{}': {}", dir,
        ec ? ec.message() : "not a directory");
  CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "the run directory '{}' is not writable: {}", dir,
        std::strerror(errno));
  // What an interrupted run (a kill, a full disk) may have left: a checkpoint being built and
  // the temporaries of files being replaced. None of them is ever read.
  std::vector<fs::path> stale;  // collected first: removing while iterating is unspecified
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    bool is_stale = name.rfind(kCheckpointTemp, 0) == 0;
    for (const char* f : kRunFiles) is_stale = is_stale || name == std::string(f) + ".tmp";
    if (is_stale) stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
}

std::vector<std::string> run_files(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    bool ours = step_of(e.path()) >= 0 && e.is_directory(ec);
    for (const char* f : kRunFiles) ours = ours || name == f;
    ours = ours || name == "report.html";
    if (ours) found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

void claim_run_dir(const std::string& dir, bool resuming, bool overwrite) {
  CHECK(!(resuming && overwrite),
        "--overwrite-output-dir and --resume contradict each other: resuming continues the run "
        "in '{}', overwriting removes it",
        dir);
  if (resuming) return;
  const std::vector<std::string> found = run_files(dir);
  if (found.empty()) return;
  std::string names;
  for (size_t i = 0; i < found.size() && i < 4; ++i) names += (i ? ", " : "") + found[i];
  if (found.size() > 4) names += fmt::format(" and {} more", found.size() - 4);
  CHECK(overwrite,
        "output_dir '{}' holds a run ({}): continue it with --resume, replace it with "
        "--overwrite-output-dir, or choose another output_dir",
        dir, names);
  // Only what fp8rl writes: a user's own files in the directory stay.
  for (const std::string& f : found) {
    std::error_code ec;
    fs::remove_all(fs::path(dir) / f, ec);
    CHECK(!ec, "--overwrite-output-dir: cannot remove '{}': {}", (fs::path(dir) / f).string(),
          ec.message());
  }
}

std::string resume_checkpoint(const std::string& resume_from_checkpoint,
                              const std::string& output_dir) {
  if (resume_from_checkpoint.empty() || resume_from_checkpoint == "false") return "";
  if (resume_from_checkpoint != "true") return resume_from_checkpoint;
  const std::string latest = latest_checkpoint(output_dir);
  CHECK(!latest.empty(), "resume_from_checkpoint: no checkpoint in '{}'", output_dir);
  return latest;
}

int64_t checkpoint_step(const std::string& checkpoint) {
  return step_of(fs::path(checkpoint).lexically_normal().filename().empty()
                     ? fs::path(checkpoint).parent_path()
                     : fs::path(checkpoint));
}

RunInterrupted::RunInterrupted(int signal_number, int64_t step_done, int64_t total,
                               std::string checkpoint_dir)
    : std::runtime_error(
          checkpoint_dir.empty()
              ? fmt::format("interrupted by signal {} before the first step", signal_number)
              : fmt::format("interrupted by signal {} after step {} of {}; the run stands in '{}'",
                            signal_number, step_done, total, checkpoint_dir)),
      signal(signal_number),
      step(step_done),
      total_steps(total),
      checkpoint(std::move(checkpoint_dir)) {}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("checkpoint-" + std::to_string(step))).string();
}

void end_stopped_run(const StopRequest& stop, int64_t step, int64_t total_steps,
                     const std::string& dir, const std::string& saved,
                     const std::function<void()>& save) {
  std::string at = saved;
  if (step > 0 && checkpoint_step(saved) != step) {
    save();
    at = checkpoint_path(dir, step);
  }
  throw RunInterrupted(stop.signal(), step, total_steps, at);
}

void check_run_dir_writable(const std::string& dir, const char* what) {
  CHECK(!dir.empty(), "the run directory (output_dir / --out) is not set");
  fs::path p = fs::absolute(dir);
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_relative_path()) p = p.parent_path();
  CHECK(fs::is_directory(p, ec), "cannot create {} '{}': '{}' is not a directory", what, dir,
        p.string());
  CHECK(::access(p.c_str(), W_OK | X_OK) == 0, "{} '{}' is not writable: '{}': {}", what, dir,
        p.string(), std::strerror(errno));
}

void save_checkpoint(const std::string& dir, int64_t step, const LoraAdapter& adapter,
                     const TrainStep& train_step, const nlohmann::json& state,
                     const std::string& base_model_name,
                     const std::function<void(const std::string&)>& write_extra) {
  const fs::path final_dir = fs::path(dir) / ("checkpoint-" + std::to_string(step));
  const fs::path tmp = fs::path(dir) / (kCheckpointTemp + std::to_string(step));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    adapter.save_peft(tmp.string(), base_model_name);
    SafetensorsWriter writer;
    train_step.add_state(writer);
    writer.add_metadata(kRunStateKey, state.dump());
    writer.add_metadata(kLayoutKey, kLayout);
    writer.write((tmp / kStateFile).string());
    if (write_extra) write_extra(tmp.string());
    fsync_directory(tmp);
    fs::remove_all(final_dir, ec);  // a re-run of the same step replaces its checkpoint
    fs::rename(tmp, final_dir, ec);
    CHECK(!ec, "cannot rename '{}' to '{}': {}", tmp.string(), final_dir.string(), ec.message());
  } catch (const Error& e) {
    fs::remove_all(tmp, ec);
    RAISE("cannot write {}: {} (the earlier checkpoints in '{}' are intact)",
          final_dir.filename().string(), e.what(), dir);
  }
  fsync_directory(dir);
}

std::string latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  int64_t best = -1;
  fs::path best_path;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = step_of(e.path());
    if (s > best && fs::exists(e.path() / kStateFile)) best = s, best_path = e.path();
  }
  return best < 0 ? "" : best_path.string();
}

nlohmann::json load_checkpoint(const std::string& checkpoint, Context& ctx, const Model& model,
                               LoraAdapter& adapter, TrainStep& train_step) {
  const fs::path dir(checkpoint);
  CHECK(fs::is_directory(dir) && fs::exists(dir / kStateFile),
        "'{}' is not a checkpoint (no {} in it)", checkpoint, kStateFile);
  LoraAdapter loaded = LoraAdapter::load_peft(checkpoint, model);
  CHECK(loaded.master_params().numel() == adapter.master_params().numel(),
        "checkpoint '{}': its adapter ({} values) does not match this run's ({})", checkpoint,
        loaded.master_params().numel(), adapter.master_params().numel());
  const auto file = SafetensorsFile::open((dir / kStateFile).string());
  const auto layout = file->metadata().find(kLayoutKey);
  CHECK(layout != file->metadata().end() && layout->second == kLayout,
        "checkpoint '{}' was written by an earlier fp8rl whose optimizer state is laid out "
        "differently; it cannot be resumed (start a new run from its adapter with --adapter {})",
        checkpoint, checkpoint);
  train_step.load_state(*file);
  auto it = file->metadata().find(kRunStateKey);
  CHECK(it != file->metadata().end(), "checkpoint '{}': no run state", checkpoint);
  // Through the one JSON policy (its depth limit): the header's limits do not reach the JSON
  // text inside a metadata string.
  nlohmann::json state;
  try {
    state = parse_json_text(it->second, "the run state");
  } catch (const std::exception& e) {
    RAISE("checkpoint '{}': the run state is not JSON: {}", checkpoint, e.what());
  }
  // Into the existing adapter (uploaded on CUDA): its masters and compute copies are what the
  // engine and the pass read.
  CHECK(adapter.device() == ctx.device, "checkpoint '{}': the run is on {}, its adapter on {}",
        checkpoint, device_name(ctx.device), device_name(adapter.device()));
  adapter.set_masters(loaded.master_params());
  return state;
}

int64_t checkpoint_position(const nlohmann::json& state, const char* key,
                            const std::string& checkpoint) {
  const auto it = state.is_object() ? state.find(key) : state.end();
  CHECK(it != state.end(), "checkpoint '{}': its run state has no '{}'", checkpoint, key);
  CHECK(it->is_number_integer() && it->get<int64_t>() >= 0,
        "checkpoint '{}': its run state's '{}' is {}, expected an integer >= 0", checkpoint, key,
        json_excerpt(*it));
  return it->get<int64_t>();
}

namespace {

// The step of a kept log line: its integer "step" (0 when it has none); nullopt for any other
// value, which ends what is kept like a cut line (a float would convert out of range).
std::optional<int64_t> log_step(const nlohmann::json& j) {
  const auto it = j.find("step");
  if (it == j.end()) return 0;
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)) return std::nullopt;
  if (!it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

MetricsLog::MetricsLog(const std::string& dir, int64_t resumed_step, const std::string& file)
    : path_((fs::path(dir) / file).string()) {
  std::string kept;
  std::error_code ec;
  if (resumed_step > 0 && fs::symlink_status(path_, ec).type() != fs::file_type::not_found) {
    // An input file like every other (core/input_file.h): a FIFO there fails at once instead
    // of blocking in open(), a device or an endless line is an error, not memory.
    constexpr uint64_t kMaxLineBytes = uint64_t{64} << 20;  // the JSON policy's limit
    InputLines lines(path_, "the run's log", kMaxLineBytes);
    std::string line;
    while (lines.next(line)) {
      JsonLimits limits;
      limits.reject_duplicate_keys = false;  // the last one wins, as before
      nlohmann::json j;
      try {
        j = parse_json_text(line, "a line of the log", limits);
      } catch (const Error&) {
        break;  // a line cut by the interruption ends what is kept
      }
      const std::optional<int64_t> step = j.is_object() ? log_step(j) : std::nullopt;
      if (!step) break;
      if (*step <= resumed_step) kept += line + '\n';
    }
  }
  // Replaced as a whole: a resumed run that fails here (a full disk) keeps the old log.
  write_file_replacing(path_, kept);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  CHECK(fd_ >= 0, "cannot open '{}': {}", path_, std::strerror(errno));
  size_ = int64_t(kept.size());
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const nlohmann::json& line) {
  size_ = append_whole(fd_, size_, line.dump() + '\n', path_);
}

size_t peak_memory_bytes(const Context& ctx) {
  return ctx.device == Device::cpu ? peak_host_memory_bytes()
                                   : ops::device_peak_allocated_bytes(ctx);
}

void reset_peak_memory(Context& ctx) {
  if (ctx.device != Device::cpu) {
    ops::reset_device_peak_allocated(ctx);
    return;
  }
  // Linux: writing 5 to clear_refs restarts VmHWM from the current resident size. Where that
  // is not allowed the peak stays the process's (never lower than the phase's).
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

size_t peak_host_memory_bytes() {
  // VmHWM (kB), which reset_peak_memory can restart, unlike getrusage's ru_maxrss.
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    size_t kb = 0;
    bool found = false;
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::sscanf(line, "VmHWM: %zu kB", &kb) == 1) {
        found = true;
        break;
      }
    std::fclose(f);
    if (found) return kb * 1024;
  }
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return size_t(u.ru_maxrss) * 1024;
}

}  // namespace fp8rl
