// Run management of the training commands, end to end on the demo model: SIGINT/SIGTERM stop a
// run with a checkpoint of its last completed step (a second SIGINT ends it at once), --resume
// continues it exactly and may extend it, and a run directory that holds a run is never
// silently mixed with a new one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process_run.h"

namespace fs = std::filesystem;

namespace {

const std::string kDemoModel = FP8RL_SOURCE_DIR "/examples/demo/model";

struct Result {
  int exit_code = -1;  // -1: killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr
};

std::string temp(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("fp8rl_runctl_" + name + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::vector<std::string> words(const std::string& args) {
  std::vector<std::string> w{FP8RL_BIN};
  std::istringstream in(args);
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

// fp8rl with `args` (split at spaces), to the end.
Result run(const std::string& args) {
  fp8rl::test::ProcessLimits limits;
  limits.merge_output = true;
  limits.wall_seconds = 120;
  const fp8rl::test::ProcessResult p = fp8rl::test::run_process(words(args), limits);
  return {p.exit_code, p.signal, p.out};
}

// fp8rl started in the background; signal() it, then wait() for it.
class Background {
 public:
  explicit Background(const std::string& args) : log_(temp("log") + ".txt") {
    std::vector<std::string> w = words(args);
    std::vector<char*> argv;
    for (std::string& s : w) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
    if (::posix_spawn(&pid_, argv[0], &fa, &attr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
  ~Background() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove(log_);
  }
  std::string output() const { return file_bytes(log_); }
  // Polls `ready` every 2 ms for up to 60 s; false if the process ended or time ran out first.
  template <class F>
  bool wait_for(F ready) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < end) {
      if (ready()) return true;
      siginfo_t info{};
      if (::waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid)
        return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }
  void signal(int sig) const { ::kill(pid_, sig); }
  Result wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    Result r;
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.output = output();
    return r;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

// A short run of `command` (sft, grpo, dpo) on the demo model into `out`; a constant learning
// rate unless `schedule`.
std::string train_args(const std::string& command, const std::string& out,
                       const std::string& schedule = "constant") {
  const std::string data = temp(command + "_data") + ".jsonl";
  const std::string common =
      " --lr 1e-2 --lr-scheduler-type " + schedule + " --device cpu --seed 3";
  if (command == "sft") {
    write_file(data,
               "{\"prompt\": \"What is 2+2? \", \"completion\": \"4\"}\n"
               "{\"text\": \"7+1=8\"}\n"
               "{\"prompt\": \"What is 3+5? \", \"completion\": \"8\"}\n"
               "{\"text\": \"9+9=18\"}\n");
    return "sft " + kDemoModel + " --data " + data + " --out " + out + " --batch-size 2" + common;
  }
  if (command == "dpo") {
    write_file(data,
               "{\"prompt\": \"2+2=\", \"chosen\": \"4\", \"rejected\": \"5\"}\n"
               "{\"prompt\": \"3+5=\", \"chosen\": \"8\", \"rejected\": \"9\"}\n"
               "{\"prompt\": \"1+1=\", \"chosen\": \"2\", \"rejected\": \"3\"}\n");
    return "dpo " + kDemoModel + " --data " + data + " --output-dir " + out +
           " --per-device-train-batch-size 2" + common;
  }
  // The demo's own rows (chat prompts it half solves), so that rewards vary within a group.
  std::ifstream demo(FP8RL_SOURCE_DIR "/examples/demo/train.jsonl");
  std::string rows, line;
  for (int i = 0; i < 16 && std::getline(demo, line); ++i) rows += line + "\n";
  write_file(data, rows);
  const std::string cfg = temp("grpo_cfg") + ".yaml";
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data +
                      "\nrewards:\n  - {type: answer_match, mode: numeric}\n");
  return "grpo --config " + cfg + " --output-dir " + out +
         " --num-generations 4 --per-device-train-batch-size 8 --max-completion-length 4"
         " --lora-r 4" +
         common;
}

std::string sft_args(const std::string& out, const std::string& schedule = "constant") {
  return train_args("sft", out, schedule);
}

size_t metrics_lines(const std::string& dir) {
  std::ifstream in(dir + "/metrics.jsonl");
  return size_t(
      std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
}

bool contains(const std::string& text, const std::string& fragment) {
  return text.find(fragment) != std::string::npos;
}

// The keys of a metrics line that measure time or memory, not the training.
bool measured(const std::string& key) {
  return contains(key, "second") || contains(key, "memory");
}

// SIGINT (and SIGTERM) in the middle of a long run: the checkpoint of the last completed step,
// a message saying where the run stands and how to continue it, exit status 128 + signal; the
// resume from that checkpoint ends exactly as a run that was never interrupted.
struct SignalCase {
  std::string command;
  int signal;
};

class RunControlSignal : public ::testing::TestWithParam<SignalCase> {};

TEST_P(RunControlSignal, StopsWithACheckpointAndResumesExactly) {
  const std::string command = GetParam().command;
  const int sig = GetParam().signal;
  const std::string dir = temp("stopped"), full = temp("full");
  Background b(train_args(command, dir) + " --max-steps 100000");
  ASSERT_TRUE(b.wait_for([&] { return metrics_lines(dir) >= 1; })) << b.output();
  b.signal(sig);
  const Result r = b.wait();
  ASSERT_EQ(r.exit_code, 128 + sig) << r.output;
  const size_t steps = metrics_lines(dir);
  ASSERT_GE(steps, 1u);
  const std::string name = "checkpoint-" + std::to_string(steps);
  for (const char* f :
       {"adapter_model.safetensors", "adapter_config.json", "trainer_state.safetensors"})
    EXPECT_TRUE(fs::exists(dir + "/" + name + "/" + f)) << name << "/" << f;
  EXPECT_TRUE(
      contains(r.output, sig == SIGINT ? "interrupted by SIGINT" : "interrupted by SIGTERM"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "at step " + std::to_string(steps) + " of 100000")) << r.output;
  EXPECT_TRUE(contains(r.output, dir + "/" + name)) << r.output;
  EXPECT_TRUE(contains(r.output, "to continue it: fp8rl " + command + " ")) << r.output;
  EXPECT_TRUE(contains(r.output, " --resume\n")) << r.output;

  // Resumed to two steps past the interruption, against the same two-step-longer run
  // uninterrupted (the constant rate makes the schedule independent of max_steps).
  const std::string steps_to = " --max-steps " + std::to_string(steps + 2);
  const Result resumed = run(train_args(command, dir) + steps_to + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "resuming from " + name)) << resumed.output;
  const Result uninterrupted = run(train_args(command, full) + steps_to);
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  EXPECT_EQ(file_bytes(dir + "/adapter_model.safetensors"),
            file_bytes(full + "/adapter_model.safetensors"));
  const auto m = read_jsonl(dir + "/metrics.jsonl"), m_full = read_jsonl(full + "/metrics.jsonl");
  ASSERT_EQ(m.size(), steps + 2);
  ASSERT_EQ(m_full.size(), steps + 2);
  for (size_t i = 0; i < m.size(); ++i) {
    for (const auto& [key, value] : m_full[i].items()) {
      if (measured(key)) continue;
      EXPECT_EQ(m[i][key], value) << "step " << i + 1 << " " << key;
    }
  }
  // The resumed steps changed the adapter (the comparison is not of two untouched adapters).
  EXPECT_NE(file_bytes(dir + "/adapter_model.safetensors"),
            file_bytes(dir + "/" + name + "/adapter_model.safetensors"));
  fs::remove_all(dir);
  fs::remove_all(full);
}

INSTANTIATE_TEST_SUITE_P(Commands, RunControlSignal,
                         ::testing::Values(SignalCase{"sft", SIGINT}, SignalCase{"grpo", SIGTERM},
                                           SignalCase{"dpo", SIGINT}),
                         [](const auto& info) {
                           return info.param.command +
                                  (info.param.signal == SIGINT ? "_SIGINT" : "_SIGTERM");
                         });

// Whether process `pid` is gone (or a zombie no one reaped).
bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// A second SIGINT ends the run at once, inside a step that would not end for minutes (a reward
// process that never answers), and the reward process's group goes with it.
TEST(RunControl, SecondSigintExitsAtOnceAndKillsTheRewardProcess) {
  const std::string dir = temp("second"), data = temp("grpo_data") + ".jsonl",
                    pid_file = temp("reward_pid"), cfg = temp("grpo_cfg") + ".yaml";
  std::ifstream demo(FP8RL_SOURCE_DIR "/examples/demo/train.jsonl");
  std::string rows, line;
  for (int i = 0; i < 8 && std::getline(demo, line); ++i) rows += line + "\n";
  write_file(data, rows);
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data + "\noutput_dir: " + dir +
                      "\nreward_process: 'echo $$ > " + pid_file + "; exec sleep 600'\n");
  Background b("grpo --config " + cfg +
               " --num-generations 4 --per-device-train-batch-size 8 --max-completion-length 4"
               " --lora-r 4 --max-steps 5 --device cpu");
  // The run has begun (its config written just before the handler is installed) and its
  // first rollout waits for the reward process.
  ASSERT_TRUE(b.wait_for([&] { return fs::exists(dir + "/config.yaml") && fs::exists(pid_file); }))
      << b.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  pid_t reward = 0;
  std::ifstream(pid_file) >> reward;
  ASSERT_GT(reward, 0);
  EXPECT_FALSE(gone(reward));
  b.signal(SIGINT);
  ASSERT_TRUE(b.wait_for([&] { return contains(b.output(), "interrupt again to exit at once"); }))
      << b.output();
  const auto t0 = std::chrono::steady_clock::now();
  b.signal(SIGINT);
  const Result r = b.wait();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(r.signal, SIGINT) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/checkpoint-1"));
  for (int i = 0; i < 500 && !gone(reward); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(gone(reward)) << "the reward process " << reward << " outlived the run";
  if (!gone(reward)) ::kill(-reward, SIGKILL);
  fs::remove_all(dir);
}

// The first signal's path ends the reward process too (its owner's destructor, as the run
// unwinds), not only the second signal's.
TEST(RunControl, InterruptedGrpoRunEndsItsRewardProcess) {
  const std::string dir = temp("reward_run"), data = temp("reward_data") + ".jsonl",
                    pid_file = temp("reward_pid1"), cfg = temp("reward_cfg") + ".yaml";
  std::ifstream demo(FP8RL_SOURCE_DIR "/examples/demo/train.jsonl");
  std::string rows, line;
  for (int i = 0; i < 8 && std::getline(demo, line); ++i) rows += line + "\n";
  write_file(data, rows);
  // Answers every batch of 8 completions with rewards that vary, so that steps train.
  write_file(cfg, "model: " + kDemoModel + "\ndata: " + data + "\noutput_dir: " + dir +
                      "\nreward_process: 'echo $$ > " + pid_file +
                      "; while read l; do echo \"{\\\"rewards\\\": [0,1,0,1,1,0,1,0]}\"; "
                      "done'\n");
  Background b("grpo --config " + cfg +
               " --num-generations 4 --per-device-train-batch-size 8 --max-completion-length 4"
               " --lora-r 4 --max-steps 100000 --device cpu");
  ASSERT_TRUE(b.wait_for([&] { return metrics_lines(dir) >= 1; })) << b.output();
  pid_t reward = 0;
  std::ifstream(pid_file) >> reward;
  ASSERT_GT(reward, 0);
  EXPECT_FALSE(gone(reward));
  b.signal(SIGINT);
  const Result r = b.wait();
  EXPECT_EQ(r.exit_code, 130) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/checkpoint-" + std::to_string(metrics_lines(dir)))) << r.output;
  EXPECT_TRUE(gone(reward)) << "the reward process " << reward << " outlived the run";
  if (!gone(reward)) ::kill(-reward, SIGKILL);
  fs::remove_all(dir);
}

// Resumed with a larger max_steps, the run goes on, and its learning rate follows the
// schedule of the larger run (recomputed, as transformers does) from the resumed step on.
TEST(RunControl, ResumeWithLargerMaxStepsFollowsTheLongerSchedule) {
  const std::string dir = temp("extend"), fresh = temp("extend_fresh");
  ASSERT_EQ(run(sft_args(dir, "linear") + " --max-steps 2").exit_code, 0);
  const Result again = run(sft_args(dir, "linear") + " --max-steps 2 --resume");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(contains(again.output, "nothing to train: the run is at step 2 of 2"))
      << again.output;
  const Result extended = run(sft_args(dir, "linear") + " --max-steps 4 --resume");
  ASSERT_EQ(extended.exit_code, 0) << extended.output;
  EXPECT_TRUE(contains(extended.output, "resuming from checkpoint-2")) << extended.output;
  EXPECT_TRUE(contains(extended.output, "trained 2 steps (3 to 4)")) << extended.output;
  ASSERT_EQ(run(sft_args(fresh, "linear") + " --max-steps 4").exit_code, 0);
  const auto m = read_jsonl(dir + "/metrics.jsonl"), m4 = read_jsonl(fresh + "/metrics.jsonl");
  ASSERT_EQ(m.size(), 4u);
  ASSERT_EQ(m4.size(), 4u);
  for (size_t i : {2u, 3u}) EXPECT_EQ(m[i]["learning_rate"], m4[i]["learning_rate"]) << i + 1;
  // Negative control: the 2-step schedule differs from the 4-step one (its step 2 ran at half
  // the rate), so the equality above is the recomputed schedule, not a schedule that ignores
  // max_steps.
  EXPECT_NE(m[1]["learning_rate"], m4[1]["learning_rate"]);
  EXPECT_GT(m[2]["learning_rate"].get<double>(), 0.0);
  // A setting the checkpoint's optimizer state holds cannot change: the key, old and new value.
  const Result lr = run(sft_args(dir, "linear") + " --max-steps 6 --resume --lr 2e-2");
  EXPECT_EQ(lr.exit_code, 1) << lr.output;
  EXPECT_TRUE(contains(lr.output, "learning_rate was 0.01 in the checkpoint, this run has 0.02"))
      << lr.output;
  const Result beta = run(sft_args(dir, "linear") + " --max-steps 6 --resume --adam-beta2 0.99");
  EXPECT_EQ(beta.exit_code, 1) << beta.output;
  EXPECT_TRUE(contains(beta.output, "adam_beta2 was 0.999 in the checkpoint, this run has 0.99"))
      << beta.output;
  fs::remove_all(dir);
  fs::remove_all(fresh);
}

// An output_dir that holds a run: an error without --resume, replaced with
// --overwrite-output-dir (fp8rl's files only: a user's file stays).
TEST(RunControl, OutputDirWithARunNeedsResumeOrOverwrite) {
  const std::string dir = temp("taken");
  fs::create_directories(dir);
  write_file(dir + "/notes.txt", "mine");
  ASSERT_EQ(run(sft_args(dir) + " --max-steps 2").exit_code, 0);  // other files are no run
  const Result taken = run(sft_args(dir) + " --max-steps 1");
  EXPECT_EQ(taken.exit_code, 1) << taken.output;
  for (const char* fragment : {"holds a run", "checkpoint-2", "--resume", "--overwrite-output-dir"})
    EXPECT_TRUE(contains(taken.output, fragment)) << fragment << "\n" << taken.output;
  EXPECT_EQ(read_jsonl(dir + "/metrics.jsonl").size(), 2u);  // untouched
  const Result both = run(sft_args(dir) + " --max-steps 1 --resume --overwrite-output-dir");
  EXPECT_EQ(both.exit_code, 1) << both.output;
  const Result over = run(sft_args(dir) + " --max-steps 1 --overwrite-output-dir");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_EQ(read_jsonl(dir + "/metrics.jsonl").size(), 1u);
  EXPECT_FALSE(fs::exists(dir + "/checkpoint-2"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoint-1"));
  EXPECT_EQ(file_bytes(dir + "/notes.txt"), "mine");
  fs::remove_all(dir);
}

}  // namespace
