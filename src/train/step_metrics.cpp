#include "train/step_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>
#include <filesystem>

#include "core/check.h"
#include "formats/tensorboard_events.h"
#include "train/training_arguments.h"

namespace fp8rl {

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

double number_or_nan(const nlohmann::json& line, const char* key) {
  const auto it = line.find(key);
  return it != line.end() && it->is_number() ? it->get<double>() : std::nan("");
}

namespace {

// transformers' report_to values of trackers fp8rl does not have, named in the error as such
// (any other name is an unknown one).
constexpr const char* kOtherTrackers[] = {
    "azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte",
    "mlflow",   "neptune", "ray",        "swanlab",  "trackio", "wandb"};

constexpr const char* kSupported = "supported: tensorboard, all (= tensorboard) or none";

}  // namespace

void check_report_to(const std::vector<std::string>& report_to) {
  for (const std::string& name : report_to) {
    if (name == "tensorboard" || name == "all") continue;
    if (name == "none") {
      CHECK(report_to.size() == 1, "report_to: 'none' stands alone, not in a list with others");
      continue;
    }
    const bool known = std::any_of(std::begin(kOtherTrackers), std::end(kOtherTrackers),
                                   [&](const char* t) { return name == t; });
    RAISE("report_to: '{}' is {} ({}; metrics.jsonl is always written)", name,
          known ? "a tracker fp8rl does not have" : "not a tracker", kSupported);
  }
}

bool reports_to_tensorboard(const std::vector<std::string>& report_to) {
  return std::any_of(report_to.begin(), report_to.end(),
                     [](const std::string& n) { return n == "tensorboard" || n == "all"; });
}

std::string tensorboard_dir(const TrainingArguments& args) {
  if (!args.logging_dir.empty()) return args.logging_dir;
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::array<char, 64> when{};
  std::strftime(when.data(), when.size(), "%b%d_%H-%M-%S", &local);
  std::array<char, 256> host{};
  if (::gethostname(host.data(), host.size() - 1) != 0) host = {};
  return (std::filesystem::path(args.output_dir) / "runs" /
          (std::string(when.data()) + "_" + host.data()))
      .string();
}

void check_logging_dir_writable(const TrainingArguments& args) {
  if (reports_to_tensorboard(args.report_to) && !args.logging_dir.empty())
    check_run_dir_writable(args.logging_dir, "logging_dir");
}

std::vector<std::pair<std::string, float>> tensorboard_scalars(const nlohmann::json& line) {
  std::vector<std::pair<std::string, float>> out;
  for (const auto& [key, value] : line.items()) {
    if (key == "step") continue;
    float v = 0;
    if (value.is_number())
      v = float(value.get<double>());
    else if (value.is_boolean())
      v = value.get<bool>() ? 1.0f : 0.0f;
    else
      continue;
    std::string tag;
    if (key.rfind("eval_", 0) == 0)
      tag = "eval/" + key.substr(5);
    else if (key.rfind("test_", 0) == 0)
      tag = "test/" + key.substr(5);
    else
      tag = "train/" + key;
    out.emplace_back(std::move(tag), v);
  }
  return out;
}

StepMetrics::StepMetrics(const TrainingArguments& args, int64_t resumed_step)
    : jsonl_(args.output_dir, resumed_step) {
  if (!reports_to_tensorboard(args.report_to)) return;
  tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir(args));
  if (resumed_step > 0) tensorboard_->add_session_start(resumed_step + 1);
}

StepMetrics::~StepMetrics() = default;

void StepMetrics::write(const nlohmann::json& line) {
  jsonl_.write(line);
  if (!tensorboard_) return;
  const auto step = line.find("step");
  CHECK(step != line.end() && step->is_number_integer(), "a metrics line without a step: {}",
        line.dump());
  tensorboard_->add_scalars(step->get<int64_t>(), tensorboard_scalars(line));
}

}  // namespace fp8rl
