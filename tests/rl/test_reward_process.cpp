#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "rl/child_process.h"
#include "rl/reward_process.h"

namespace fp8rl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto None = std::nullopt;

RewardBatch batch3() {
  RewardBatch b;
  b.prompts = {"p0", "p1", "p2"};
  b.completions = {"c0", "c1 \"quoted\"", "c2"};
  b.completion_ids = {{1, 2}, {3}, {}};
  b.columns = {{"answer", {"a0", "a1", nullptr}}, {"level", {1, 2, 3}}};
  return b;
}

// The error message of scoring batch3() with a process running `command`.
std::string error_of(const std::string& command, double timeout_s = 5) {
  RewardProcess p({.command = command, .timeout_s = timeout_s});
  try {
    p.score(batch3());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Replies `reply` to every request line.
std::string replier(const std::string& reply) {
  return "while read -r line; do echo '" + reply + "'; done";
}

// Whether a process of group `pgid` is alive (not a zombie): /proc/<pid>/stat has the state
// third and the process group fifth. (Zombies re-parented away from us are reaped by init, if
// the container's init reaps at all, so they do not count.)
bool group_alive(pid_t pgid) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (std::sscanf(line.c_str() + paren + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') return true;
  }
  return false;
}

bool have_python3() {
  return std::system("command -v python3 >/dev/null 2>&1") == 0;
}

TEST(RewardProcess, RequestLineHoldsEveryColumn) {
  const nlohmann::json request = nlohmann::json::parse(RewardProcess::request_line(batch3()));
  EXPECT_EQ(request["prompts"], nlohmann::json({"p0", "p1", "p2"}));
  EXPECT_EQ(request["completions"][1], "c1 \"quoted\"");
  EXPECT_EQ(request["completion_ids"], nlohmann::json::parse("[[1,2],[3],[]]"));
  EXPECT_EQ(request["answer"], nlohmann::json({"a0", "a1", nullptr}));
  EXPECT_EQ(request["level"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(request.size(), 5u);
  // Invalid UTF-8 is replaced, not an exception.
  RewardBatch b = batch3();
  b.completions[0] = "\xff";
  EXPECT_EQ(nlohmann::json::parse(RewardProcess::request_line(b))["completions"][0],
            "\xEF\xBF\xBD");
}

TEST(RewardProcess, GoodProcessAnswersEveryBatchAndNullIsNone) {
  RewardProcess p({.name = "sh", .command = replier(R"({"rewards": [1, null, 0.5]})")});
  for (int round = 0; round < 3; ++round) {  // one process, kept alive across batches
    const RewardValues v = p.score(batch3());
    EXPECT_EQ(v, (RewardValues{1.0, None, 0.5}));
  }
}

TEST(RewardProcess, ProcessSeesTheRequest) {
  // The reply depends on the input: the process echoes back the number of "answer" keys it saw
  // (grep -c counts lines), proving the line reached it whole.
  RewardProcess p({.command = "while read -r line; do n=$(printf '%s\\n' \"$line\" | grep -c "
                              "'\"level\":\\[1,2,3\\]'); echo \"{\\\"rewards\\\": [$n, $n, $n]}\"; "
                              "done"});
  EXPECT_EQ(p.score(batch3()), (RewardValues{1.0, 1.0, 1.0}));
  RewardBatch other = batch3();
  other.columns["level"] = {7, 8, 9};
  EXPECT_EQ(p.score(other), (RewardValues{0.0, 0.0, 0.0}));
}

TEST(RewardProcess, NonFiniteStrings) {
  RewardProcess p({.command = replier(R"({"rewards": ["NaN", "Infinity", "-Infinity"]})")});
  const RewardValues v = p.score(batch3());
  EXPECT_TRUE(std::isnan(*v[0]));
  EXPECT_EQ(*v[1], INFINITY);
  EXPECT_EQ(*v[2], -INFINITY);
}

TEST(RewardProcess, TimeoutIsAnErrorAndDoesNotHang) {
  const auto start = Clock::now();
  const std::string e = error_of("while read -r line; do sleep 30; done", 0.3);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(e.find("gave no answer within 0.3 s"), std::string::npos) << e;
  EXPECT_NE(e.find("while read"), std::string::npos) << e;  // names the command
  EXPECT_LT(seconds, 5.0);
}

TEST(RewardProcess, ProcessThatExits) {
  const std::string e = error_of("read -r line; exit 3");
  EXPECT_NE(e.find("exited with status 3"), std::string::npos) << e;
  const std::string missing = error_of("no_such_command_fp8rl_test");
  EXPECT_NE(missing.find("status 127 (the shell did not find the command)"), std::string::npos)
      << missing;
}

TEST(RewardProcess, ProcessKilledBySignal) {
  const std::string e = error_of("read -r line; kill -9 $$");
  EXPECT_NE(e.find("was killed by signal 9 (SIGKILL"), std::string::npos) << e;
}

TEST(RewardProcess, ProcessThatNeverReadsDoesNotRaiseSigpipe) {
  // The process closes its stdin without reading a 4 MB request and keeps its stdout open (for
  // longer than the exchange waits): our write gets EPIPE (SIGPIPE would kill this test binary;
  // the test makes sure SIGPIPE is not ignored) and the error says so.
  struct sigaction previous {};
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &default_action, &previous);
  RewardProcess p({.command = "exec 0<&-; sleep 10"});
  RewardBatch b = batch3();
  b.completions[0] = std::string(size_t{4} << 20, 'x');
  try {
    p.score(b);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("closed its stdin but is still running"),
              std::string::npos)
        << e.what();
  }
  ::sigaction(SIGPIPE, &previous, nullptr);
}

TEST(RewardProcess, MalformedAnswers) {
  const std::string garbage = error_of(replier("hello"));
  EXPECT_NE(garbage.find("not a JSON object"), std::string::npos) << garbage;
  const std::string count = error_of(replier(R"({"rewards": [1]})"));
  EXPECT_NE(count.find("answered 1 rewards for a batch of 3 completions"), std::string::npos)
      << count;
  const std::string type = error_of(replier(R"({"rewards": [1, true, 2]})"));
  EXPECT_NE(type.find("rewards[1] is true"), std::string::npos) << type;
  const std::string key = error_of(replier(R"({"rewards": [1, 2, 3], "extra": 1})"));
  EXPECT_NE(key.find("only the key 'rewards'"), std::string::npos) << key;
  const std::string array = error_of(replier(R"([1, 2, 3])"));
  EXPECT_NE(array.find("expected one line"), std::string::npos) << array;
  const std::string two =
      error_of(R"(while read -r l; do printf '{"rewards":[1,2,3]}\n{"rewards":[1,2,3]}\n'; done)");
  EXPECT_NE(two.find("more than one line"), std::string::npos) << two;
  // The control: the same replier with a valid answer gives no error.
  EXPECT_EQ(error_of(replier(R"({"rewards": [1, 2, 3]})")), "");
}

TEST(RewardProcess, AfterAnErrorTheProcessIsStopped) {
  RewardProcess p({.command = replier(R"({"rewards": [1]})")});
  EXPECT_THROW(p.score(batch3()), Error);
  try {
    p.score(batch3());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no longer running"), std::string::npos) << e.what();
  }
}

TEST(RewardProcess, ChildInheritsNoOtherDescriptors) {
  // A descriptor of ours without close-on-exec (as a library might open one).
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 3);
  ASSERT_TRUE(std::filesystem::exists(fmt::format("/proc/self/fd/{}", fd)));  // the control
  RewardProcess p({.command = fmt::format(
                       "while read -r l; do if [ -e /proc/$$/fd/{} ]; then r=1; else r=0; fi; "
                       "echo \"{{\\\"rewards\\\": [$r, $r, $r]}}\"; done",
                       fd)});
  EXPECT_EQ(p.score(batch3()), (RewardValues{0.0, 0.0, 0.0}));
  ::close(fd);
}

TEST(ChildProcess, DestructorKillsAProcessThatIgnoresEofAndTerm) {
  pid_t pid = -1;
  const auto start = Clock::now();
  {
    ChildProcess child("trap '' TERM; sleep 60 & wait", "test child");
    pid = child.pid();
    ASSERT_GT(pid, 0);
    EXPECT_EQ(::kill(pid, 0), 0);       // running
    const auto started = Clock::now();  // the shell starts the background sleep
    while (!group_alive(pid) && Clock::now() - started < std::chrono::seconds(5)) {
    }
    EXPECT_TRUE(group_alive(pid));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 6.0);
  // Reaped: no such child any more (a zombie would still answer waitpid).
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
  // The whole group is gone, including the background sleep (the control: it was alive). A
  // SIGKILLed process may show as running for a moment until it is scheduled to die.
  const auto killed = Clock::now();
  while (group_alive(pid) && Clock::now() - killed < std::chrono::seconds(2)) {
  }
  EXPECT_FALSE(group_alive(pid));
}

TEST(ChildProcess, DestructorLetsACooperativeProcessExit) {
  const auto start = Clock::now();
  { ChildProcess child("cat >/dev/null", "test child"); }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.5);
}

class PythonRewardProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_python3()) GTEST_SKIP() << "python3 not found";
  }
  static std::string command(const std::string& extra_path, const std::string& function) {
    return fmt::format(
        "PYTHONPATH='{}/python:{}' PYTHONDONTWRITEBYTECODE=1 exec python3 -m fp8rl_reward {}",
        FP8RL_SOURCE_DIR, extra_path, function);
  }
  // A module file in a fresh temporary folder; returns the folder.
  static std::string write_module(const std::string& name, const std::string& text) {
    const auto dir = std::filesystem::temp_directory_path() /
                     fmt::format("fp8rl_reward_test_{}_{}", ::getpid(), name);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / (name + ".py")) << text;
    return dir.string();
  }
};

TEST_F(PythonRewardProcess, ExampleMathRewardRunsUnchanged) {
  RewardProcess p({.command = command(std::string(FP8RL_SOURCE_DIR) + "/examples/rewards",
                                      "math_reward:correctness")});
  RewardBatch b = batch3();
  b.completions = {"so \\boxed{1,000}", "the answer is 41", "anything"};
  b.columns["answer"] = {"1000", "42", nullptr};
  EXPECT_EQ(p.score(b), (RewardValues{1.0, 0.0, None}));
  b.columns["answer"] = {"999", "41", "7"};
  EXPECT_EQ(p.score(b), (RewardValues{0.0, 1.0, 0.0}));
}

TEST_F(PythonRewardProcess, KwargsPrintsAsyncAndChat) {
  const std::string dir = write_module("user_rewards", R"(
import asyncio

def lengths(prompts, completions, completion_ids, level, **kwargs):
    print("debug output that must not reach the protocol")
    kwargs["log_metric"]("x", 1.0)
    return [len(ids) * 10 + lv for ids, lv in zip(completion_ids, level)]

def only_named(completions, answer):
    return [None if a is None else float(c == a) for c, a in zip(completions, answer)]

async def later(prompts, completions, **kwargs):
    await asyncio.sleep(0)
    return [float("nan"), float("inf"), 1]

def chat(prompts, completions, **kwargs):
    return [len(c[0]["content"]) + len(p) for p, c in zip(prompts, completions)]

def broken(prompts, completions, **kwargs):
    raise RuntimeError("reward bug")
)");
  {
    RewardProcess p({.command = command(dir, "user_rewards:lengths")});
    EXPECT_EQ(p.score(batch3()), (RewardValues{21.0, 12.0, 3.0}));
  }
  {
    RewardProcess p({.command = command(dir, "user_rewards:only_named")});
    RewardBatch b = batch3();
    b.columns["answer"] = {"c0", "x", nullptr};
    EXPECT_EQ(p.score(b), (RewardValues{1.0, 0.0, None}));
  }
  {
    RewardProcess p({.command = command(dir, "user_rewards:later")});
    const RewardValues v = p.score(batch3());
    EXPECT_TRUE(std::isnan(*v[0]));
    EXPECT_EQ(*v[1], INFINITY);
    EXPECT_EQ(*v[2], 1.0);
  }
  {
    RewardProcess p({.command = command(dir, "user_rewards:chat --chat")});
    RewardBatch b = batch3();
    b.columns["messages"] = {"ab", "abc", "abcd"};  // stands in for message lists
    EXPECT_EQ(p.score(b), (RewardValues{4.0, 14.0, 6.0}));
  }
  const std::string e = error_of(command(dir, "user_rewards:broken"));
  EXPECT_NE(e.find("exited with status 1"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8rl
