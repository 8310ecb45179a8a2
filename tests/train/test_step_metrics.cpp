// A training run's step metrics: report_to's accepted and refused names, the TensorBoard tags
// of a metrics line (transformers' names), and StepMetrics writing metrics.jsonl and, only when
// asked, an event file; a resumed run's file starts with a session start past its checkpoint.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/check.h"
#include "formats/tensorboard_event.pb.h"
#include "formats/tensorboard_events.h"
#include "train/step_metrics.h"
#include "train/training_arguments.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
namespace pb = fp8rl::tensorboard;

std::string error_of(const std::vector<std::string>& report_to) {
  try {
    check_report_to(report_to);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("fp8rl_step_metrics_" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<pb::Event> read_events(const std::string& path) {
  std::vector<pb::Event> events;
  for (const std::string& r : read_tfrecords(path)) {
    pb::Event e;
    EXPECT_TRUE(e.ParseFromString(r));
    events.push_back(e);
  }
  return events;
}

TEST(StepMetrics, ReportToNames) {
  for (const std::vector<std::string>& ok : std::vector<std::vector<std::string>>{
           {}, {"none"}, {"tensorboard"}, {"all"}, {"tensorboard", "all"}})
    EXPECT_EQ(error_of(ok), "") << ::testing::PrintToString(ok);
  EXPECT_FALSE(reports_to_tensorboard({}));
  EXPECT_FALSE(reports_to_tensorboard({"none"}));
  EXPECT_TRUE(reports_to_tensorboard({"tensorboard"}));
  EXPECT_TRUE(reports_to_tensorboard({"all"}));
  for (const char* other : {"wandb", "mlflow", "trackio", "comet_ml"}) {
    const std::string e = error_of({"tensorboard", other});
    EXPECT_NE(e.find(std::string("'") + other + "' is a tracker fp8rl does not have"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("supported: tensorboard"), std::string::npos) << e;
  }
  EXPECT_NE(error_of({"tensorbord"}).find("'tensorbord' is not a tracker"), std::string::npos);
  EXPECT_NE(error_of({"none", "tensorboard"}).find("'none' stands alone"), std::string::npos);
  // TrainingArguments::validate checks the key.
  TrainingArguments a;
  a.report_to = {"wandb"};
  EXPECT_THROW(a.validate(), Error);
}

TEST(StepMetrics, TagsAreTransformers) {
  const nlohmann::json line = {
      {"step", 3},           {"loss", 1.5},          {"eval_loss", 2.0},        {"test_acc", 1},
      {"skipped", true},     {"grad_norm", nullptr}, {"rewards/chosen", -0.25}, {"note", "text"},
      {"nested", {{"a", 1}}}};
  std::map<std::string, float> tags;
  for (const auto& [tag, v] : tensorboard_scalars(line)) tags[tag] = v;
  const std::map<std::string, float> want = {{"train/loss", 1.5f},
                                             {"eval/loss", 2.0f},
                                             {"test/acc", 1.0f},
                                             {"train/skipped", 1.0f},
                                             {"train/rewards/chosen", -0.25f}};
  EXPECT_EQ(tags, want);
}

TEST(StepMetrics, WritesTensorBoardOnlyWhenAsked) {
  TempDir tmp;
  TrainingArguments a;
  a.output_dir = (tmp.path / "run").string();
  fs::create_directories(a.output_dir);
  {
    StepMetrics m(a, 0);  // report_to: none
    m.write({{"step", 1}, {"loss", 1.0}});
  }
  EXPECT_TRUE(fs::exists(tmp.path / "run/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(tmp.path / "run/runs"));

  a.report_to = {"tensorboard"};
  {
    StepMetrics m(a, 0);
    m.write({{"step", 1}, {"loss", 1.0}, {"learning_rate", 1e-3}});
    m.write({{"step", 2}, {"loss", 0.5}, {"learning_rate", 5e-4}});
  }
  // The default directory: output_dir/runs/<Mon DD_HH-MM-SS>_<hostname>.
  std::vector<std::string> files = event_files(tmp.path / "run/runs");
  ASSERT_EQ(files.size(), 1u);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string run_name = fs::path(files[0]).parent_path().filename().string();
  EXPECT_EQ(run_name.size(), std::string("Dec06_14-05-48_").size() + std::strlen(host)) << run_name;
  EXPECT_EQ(run_name.substr(run_name.size() - std::strlen(host)), host);
  std::vector<pb::Event> ev = read_events(files[0]);
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  std::vector<std::tuple<int64_t, std::string, float>> got;
  for (size_t i = 1; i < ev.size(); ++i)
    got.emplace_back(ev[i].step(), ev[i].summary().value(0).tag(),
                     ev[i].summary().value(0).simple_value());
  const std::vector<std::tuple<int64_t, std::string, float>> want = {
      {1, "train/learning_rate", 1e-3f},
      {1, "train/loss", 1.0f},
      {2, "train/learning_rate", 5e-4f},
      {2, "train/loss", 0.5f}};
  EXPECT_EQ(got, want);

  // logging_dir; a run resumed after step 1 marks its restart at step 2.
  a.logging_dir = (tmp.path / "tb").string();
  {
    StepMetrics m(a, 1);
    m.write({{"step", 2}, {"loss", 0.75}});
  }
  files = event_files(a.logging_dir);
  ASSERT_EQ(files.size(), 1u);
  ev = read_events(files[0]);
  ASSERT_EQ(ev.size(), 3u);
  ASSERT_TRUE(ev[1].has_session_log());
  EXPECT_EQ(ev[1].session_log().status(), pb::SessionLog::START);
  EXPECT_EQ(ev[1].step(), 2);
  EXPECT_EQ(ev[2].step(), 2);
  EXPECT_EQ(ev[2].summary().value(0).simple_value(), 0.75f);
}

TEST(StepMetrics, UnwritableLoggingDirIsAnErrorNamingIt) {
  TempDir tmp;
  fs::create_directories(tmp.path);
  std::ofstream(tmp.path / "file") << "x";
  TrainingArguments a;
  a.logging_dir = (tmp.path / "file/tb").string();
  check_logging_dir_writable(a);  // report_to none: not checked
  a.report_to = {"tensorboard"};
  try {
    check_logging_dir_writable(a);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("logging_dir '" + a.logging_dir + "'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fp8rl
