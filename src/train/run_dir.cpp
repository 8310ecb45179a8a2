#include "train/run_dir.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "core/check.h"
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

int64_t checkpoint_step(const fs::path& p) {
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
  CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, "the run directory '{}' is not writable", dir);
}

void save_checkpoint(const std::string& dir, int64_t step, const LoraAdapter& adapter,
                     const TrainStep& train_step, const nlohmann::json& state,
                     const std::string& base_model_name) {
  const fs::path final_dir = fs::path(dir) / ("checkpoint-" + std::to_string(step));
  const fs::path tmp = fs::path(dir) / (".tmp-checkpoint-" + std::to_string(step));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  adapter.save_peft(tmp.string(), base_model_name);
  SafetensorsWriter writer;
  train_step.add_state(writer);
  writer.add_metadata(kRunStateKey, state.dump());
  writer.write((tmp / kStateFile).string());
  fs::remove_all(final_dir, ec);  // a re-run of the same step replaces its checkpoint
  fs::rename(tmp, final_dir, ec);
  CHECK(!ec, "cannot rename checkpoint '{}' to '{}': {}", tmp.string(), final_dir.string(),
        ec.message());
}

std::string latest_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  int64_t best = -1;
  fs::path best_path;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t s = checkpoint_step(e.path());
    if (s > best && fs::exists(e.path() / kStateFile)) best = s, best_path = e.path();
  }
  return best < 0 ? "" : best_path.string();
}

nlohmann::json load_checkpoint(const std::string& checkpoint, Context& ctx, Model& model,
                               LoraAdapter& adapter, TrainStep& train_step) {
  const fs::path dir(checkpoint);
  CHECK(fs::is_directory(dir) && fs::exists(dir / kStateFile),
        "'{}' is not a checkpoint (no {} in it)", checkpoint, kStateFile);
  LoraAdapter loaded = LoraAdapter::load_peft(checkpoint, model);
  CHECK(loaded.master_params().numel() == adapter.master_params().numel(),
        "checkpoint '{}': its adapter ({} values) does not match this run's ({})", checkpoint,
        loaded.master_params().numel(), adapter.master_params().numel());
  const auto file = SafetensorsFile::open((dir / kStateFile).string());
  train_step.load_state(*file);
  auto it = file->metadata().find(kRunStateKey);
  CHECK(it != file->metadata().end(), "checkpoint '{}': no run state", checkpoint);
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(it->second);
  } catch (const std::exception& e) {
    RAISE("checkpoint '{}': the run state is not JSON: {}", checkpoint, e.what());
  }
  // Into the existing adapter (uploaded on CUDA): its masters and compute copies are what the
  // model's views point at.
  CHECK(adapter.device() == ctx.device, "checkpoint '{}': the run is on {}, its adapter on {}",
        checkpoint, device_name(ctx.device), device_name(adapter.device()));
  adapter.set_masters(loaded.master_params());
  return state;
}

MetricsLog::MetricsLog(const std::string& dir, int64_t resumed_step, const std::string& file)
    : path_((fs::path(dir) / file).string()) {
  std::vector<std::string> kept;
  if (resumed_step > 0) {
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      try {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (j.value("step", int64_t(0)) <= resumed_step) kept.push_back(line);
      } catch (const std::exception&) {
        break;  // a line cut by the interruption ends what is kept
      }
    }
  }
  out_.open(path_, std::ios::trunc);
  CHECK(out_.good(), "cannot write '{}'", path_);
  for (const std::string& l : kept) out_ << l << '\n';
  out_.flush();
}

void MetricsLog::write(const nlohmann::json& line) {
  out_ << line.dump() << '\n';
  out_.flush();
  CHECK(out_.good(), "cannot write '{}' (disk full?)", path_);
}

size_t peak_memory_bytes(const Context& ctx) {
  return ctx.device == Device::cpu ? peak_host_memory_bytes()
                                   : ops::device_peak_allocated_bytes(ctx);
}

size_t peak_host_memory_bytes() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return size_t(u.ru_maxrss) * 1024;
}

}  // namespace fp8rl
