#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "rl/child_process.h"
#include "rl/reward_process.h"

namespace fp8rl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kNoReward = std::nullopt;

RewardBatch batch3() {
  RewardBatch b;
  b.prompts = {"p0", "p1", "p2"};
  b.completions = {"c0", "c1 \"quoted\"", "c2"};
  b.completion_ids = {{1, 2}, {3}, {}};
  b.columns = {{"answer", {"a0", "a1", nullptr}}, {"level", {1, 2, 3}}};
  return b;
}

// batch3() as a conversational dataset gives it inside a run: each prompt's message list and
// the trainer's state.
RewardBatch chat_batch3() {
  RewardBatch b = batch3();
  b.prompt_messages = nlohmann::json::array();
  for (const char* question : {"q0", "q11", "q222"})
    b.prompt_messages.push_back(
        nlohmann::json::array({{{"role", "system"}, {"content", "be brief"}},
                               {{"role", "user"}, {"content", question}}}));
  b.trainer_state = {{"global_step", 7}, {"max_steps", 10}, {"epoch", 1.5}};
  return b;
}

// The error message of scoring batch3() with a process running `command`.
std::string process_error(const std::string& command, double timeout_s = 5) {
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

TEST(RewardProcess, RequestLineCarriesMessagesAndTrainerStateWhenSet) {
  const RewardBatch b = chat_batch3();
  const nlohmann::json request = nlohmann::json::parse(RewardProcess::request_line(b));
  EXPECT_EQ(request["prompt_messages"], b.prompt_messages);
  EXPECT_EQ(request["trainer_state"], b.trainer_state);
  EXPECT_EQ(request["prompts"], nlohmann::json({"p0", "p1", "p2"}));  // still the text
  EXPECT_EQ(request.size(), 7u);
  // The control: batch3() (text, outside a run) has neither key (RequestLineHoldsEveryColumn).
  EXPECT_FALSE(
      nlohmann::json::parse(RewardProcess::request_line(batch3())).contains("prompt_messages"));
}

TEST(RewardProcess, AnswerCarriesLoggedMetricsAndExtraColumns) {
  RewardProcess p(
      {.command = replier(R"({"rewards": [1, 2, 3], "metrics": {"m": [1, "NaN"], "one": 4}, )"
                          R"("extra": {"gold": ["a", null, {"k": 1}]}})")});
  EXPECT_EQ(p.score(batch3()), (RewardValues{1.0, 2.0, 3.0}));
  const RewardLogs logs = p.take_logs();
  ASSERT_EQ(logs.metrics.size(), 2u);
  EXPECT_EQ(logs.metrics[0].first, "m");
  ASSERT_EQ(logs.metrics[0].second.size(), 2u);
  EXPECT_EQ(logs.metrics[0].second[0], 1.0);
  EXPECT_TRUE(std::isnan(logs.metrics[0].second[1]));
  EXPECT_EQ(logs.metrics[1], (std::pair<std::string, std::vector<double>>{"one", {4.0}}));
  EXPECT_EQ(logs.extra, nlohmann::json::parse(R"({"gold": ["a", null, {"k": 1}]})"));
  // Taken once: the logs belong to one batch.
  EXPECT_TRUE(p.take_logs().metrics.empty());
}

TEST(RewardProcess, GoodProcessAnswersEveryBatchAndNullIsNone) {
  RewardProcess p({.name = "sh", .command = replier(R"({"rewards": [1, null, 0.5]})")});
  for (int round = 0; round < 3; ++round) {  // one process, kept alive across batches
    const RewardValues v = p.score(batch3());
    EXPECT_EQ(v, (RewardValues{1.0, kNoReward, 0.5}));
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
  const std::string e = process_error("while read -r line; do sleep 30; done", 0.3);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(e.find("gave no answer within 0.3 s"), std::string::npos) << e;
  EXPECT_NE(e.find("while read"), std::string::npos) << e;  // names the command
  EXPECT_LT(seconds, 5.0);
}

TEST(RewardProcess, ProcessThatExits) {
  const std::string e = process_error("read -r line; exit 3");
  EXPECT_NE(e.find("exited with status 3"), std::string::npos) << e;
  const std::string missing = process_error("no_such_command_fp8rl_test");
  EXPECT_NE(missing.find("status 127 (the shell did not find the command)"), std::string::npos)
      << missing;
}

// The process exits without answering while a program it started in the background keeps its
// stdout open, so no end of file comes: its exit is seen while waiting (it took the whole
// timeout), and its group, the background program included, is killed.
TEST(RewardProcess, ProcessThatExitsWhileItsChildHoldsTheStdout) {
  const auto start = Clock::now();
  const std::string e = process_error("sleep 30 & read -r line; exit 3", 20);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(e.find("reward process '"), std::string::npos) << e;
  EXPECT_NE(e.find("exited with status 3 without an answer, while a program it started still "
                   "holds its stdout open"),
            std::string::npos)
      << e;
  EXPECT_LT(seconds, 5.0);
  // The same through the child process alone, to see the group: the background sleep (alive
  // before the exchange: the control) is gone after the error.
  ChildProcess child("sleep 30 & read -r line; exit 0", "test child");
  const pid_t pid = child.pid();
  const auto started = Clock::now();
  while (!group_alive(pid) && Clock::now() - started < std::chrono::seconds(5)) {
  }
  ASSERT_TRUE(group_alive(pid));
  EXPECT_THROW(child.exchange("x\n", std::chrono::milliseconds(20000), 1024), Error);
  EXPECT_FALSE(child.running());
  const auto killed = Clock::now();
  while (group_alive(pid) && Clock::now() - killed < std::chrono::seconds(2)) {
  }
  EXPECT_FALSE(group_alive(pid));
}

// An answer written just before the process exits is still the answer.
TEST(RewardProcess, AnswerWrittenBeforeExitingIsRead) {
  RewardProcess p({.command = R"(sleep 30 & read -r line; echo '{"rewards": [1, 2, 3]}'; exit 0)"});
  EXPECT_EQ(p.score(batch3()), (RewardValues{1.0, 2.0, 3.0}));
}

TEST(RewardProcess, ProcessKilledBySignal) {
  const std::string e = process_error("read -r line; kill -9 $$");
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

// Control characters of an answer are escaped where an error quotes it: an escape sequence
// would reach the terminal, a carriage return would split the error line.
TEST(RewardProcess, ErrorsEscapeTheAnswersControlCharacters) {
  const std::string garbage =
      process_error(R"(while read -r l; do printf '\033[2Jred\rX\tY\n'; done)");
  EXPECT_NE(garbage.find(R"('\x1b[2Jred\rX\tY')"), std::string::npos) << garbage;
  const std::string two =
      process_error(R"(while read -r l; do printf '{"rewards":[1,2,3]}\n\033]0;t\a\n'; done)");
  EXPECT_NE(two.find(R"('\x1b]0;t\x07\n')"), std::string::npos) << two;
  for (const std::string& e : {garbage, two})
    for (char c : e) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20) << e;
}

TEST(RewardProcess, MalformedAnswers) {
  const std::string garbage = process_error(replier("hello"));
  EXPECT_NE(garbage.find("not a JSON object"), std::string::npos) << garbage;
  const std::string count = process_error(replier(R"({"rewards": [1]})"));
  EXPECT_NE(count.find("answered 1 rewards for a batch of 3 completions"), std::string::npos)
      << count;
  const std::string type = process_error(replier(R"({"rewards": [1, true, 2]})"));
  EXPECT_NE(type.find("rewards[1] is true"), std::string::npos) << type;
  const std::string key = process_error(replier(R"({"rewards": [1, 2, 3], "other": 1})"));
  EXPECT_NE(key.find("only the keys 'rewards', 'metrics' and 'extra', got 'other'"),
            std::string::npos)
      << key;
  const std::string metric =
      process_error(replier(R"({"rewards": [1, 2, 3], "metrics": {"m": "x"}})"));
  EXPECT_NE(metric.find("metric 'm' must be a number"), std::string::npos) << metric;
  const std::string metrics = process_error(replier(R"({"rewards": [1, 2, 3], "metrics": [1]})"));
  EXPECT_NE(metrics.find("'metrics' must be an object"), std::string::npos) << metrics;
  const std::string extra =
      process_error(replier(R"({"rewards": [1, 2, 3], "extra": {"e": [1]}})"));
  EXPECT_NE(extra.find("extra column 'e' must be a list of 3 values (one per completion), got 1"),
            std::string::npos)
      << extra;
  const std::string array = process_error(replier(R"([1, 2, 3])"));
  EXPECT_NE(array.find("expected one line"), std::string::npos) << array;
  const std::string two = process_error(
      R"(while read -r l; do printf '{"rewards":[1,2,3]}\n{"rewards":[1,2,3]}\n'; done)");
  EXPECT_NE(two.find("more than one line"), std::string::npos) << two;
  // The control: the same replier with a valid answer gives no error.
  EXPECT_EQ(process_error(replier(R"({"rewards": [1, 2, 3]})")), "");
  EXPECT_EQ(
      process_error(replier(R"({"rewards": [1, 2, 3], "metrics": {}, "extra": {"e": [1, 2, 3]}})")),
      "");
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
  EXPECT_EQ(p.score(b), (RewardValues{1.0, 0.0, kNoReward}));
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
    EXPECT_EQ(p.score(b), (RewardValues{1.0, 0.0, kNoReward}));
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
  const std::string e = process_error(command(dir, "user_rewards:broken"));
  EXPECT_NE(e.find("exited with status 1"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

// Whether python3 can import every module of the space-separated list.
bool python_imports(const std::string& modules) {
  std::string code;
  for (size_t start = 0; start < modules.size();) {
    const size_t end = std::min(modules.find(' ', start), modules.size());
    code += "import " + modules.substr(start, end - start) + "; ";
    start = end + 1;
  }
  return std::system(fmt::format("python3 -c '{}' >/dev/null 2>&1", code).c_str()) == 0;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// TRL's argument shapes follow the data with no flag: message lists and one assistant message
// per completion for a conversational batch, strings for a text batch.
TEST_F(PythonRewardProcess, ConversationalShapesFollowTheData) {
  const std::string dir = write_module("shapes", R"(
def shapes(prompts, completions, **kwargs):
    # 1 for TRL's conversational shapes, 2 for strings, 0 for a mix; plus the lengths of the
    # last prompt message (or the prompt text) and of the completion's text.
    out = []
    for p, c in zip(prompts, completions):
        if isinstance(p, list) and isinstance(c, list):
            assert len(c) == 1 and c[0]["role"] == "assistant"
            out.append(1 + 10 * len(p[-1]["content"]) + 1000 * len(c[0]["content"]))
        elif isinstance(p, str) and isinstance(c, str):
            out.append(2 + 10 * len(p) + 1000 * len(c))
        else:
            out.append(0)
    return out
)");
  // Completions "c0", "c1 \"quoted\"", "c2"; questions "q0", "q11", "q222"; texts "p0".."p2".
  const RewardValues chat{1 + 20 + 2000, 1 + 30 + 11000, 1 + 40 + 2000};
  const RewardValues text{2 + 20 + 2000, 2 + 20 + 11000, 2 + 20 + 2000};
  {
    RewardProcess p({.command = command(dir, "shapes:shapes")});
    EXPECT_EQ(p.score(chat_batch3()), chat);
    EXPECT_EQ(p.score(batch3()), text);
  }
  {
    // The controls: --text gives strings (the rendered prompt) whatever the data; --chat wraps
    // the completions of a text batch, whose prompts stay strings.
    RewardProcess as_text({.command = command(dir, "shapes:shapes --text")});
    EXPECT_EQ(as_text.score(chat_batch3()), text);
    RewardProcess as_chat({.command = command(dir, "shapes:shapes --chat")});
    EXPECT_EQ(as_chat.score(batch3()), (RewardValues{0.0, 0.0, 0.0}));
  }
  std::filesystem::remove_all(dir);
}

// Every column, completion_ids and trainer_state reach the function as keyword arguments;
// trainer_state is an object with attributes, as transformers' TrainerState.
TEST_F(PythonRewardProcess, KwargsHoldColumnsCompletionIdsAndTrainerState) {
  const std::string dir = write_module("state", R"(
def state(prompts, completions, completion_ids, trainer_state, level, answer, **kwargs):
    assert "prompt_messages" not in kwargs and "log_metric" in kwargs
    assert trainer_state.is_world_process_zero and trainer_state.log_history == []
    step = trainer_state.global_step * 100 + trainer_state.max_steps + (trainer_state.epoch or 0)
    return [step + 1000 * len(ids) + 10000 * lv + (a is None) * 0.25
            for ids, lv, a in zip(completion_ids, level, answer)]
)");
  RewardProcess p({.command = command(dir, "state:state")});
  // completion_ids lengths 2, 1, 0; level 1, 2, 3; answer null in row 2.
  EXPECT_EQ(p.score(chat_batch3()), (RewardValues{12711.5, 21711.5, 30711.75}));
  // Outside a run (no trainer_state in the line): transformers' defaults, step 0.
  EXPECT_EQ(p.score(batch3()), (RewardValues{12000.0, 21000.0, 30000.25}));
  std::filesystem::remove_all(dir);
}

TEST_F(PythonRewardProcess, LogMetricAndLogExtraReachTheAnswer) {
  const std::string dir = write_module("logs", R"(
def logs(completions, log_metric, log_extra, **kwargs):
    log_metric("mine/len", 1.0)
    log_metric("mine/len", 2)
    log_metric("mine/nan", float("nan"))
    log_extra("seen", [c[0]["content"][:2] for c in completions])
    log_extra("half", [0.5])
    log_extra("half", [float("inf"), None])  # extends, as TRL's log_extra
    log_extra("twice", [1, 2, 3])
    log_extra("twice", [4, 5, 6])  # TRL's table keeps the last batch's worth
    return [0.0] * len(completions)

def silent(completions, **kwargs):
    return [0.0] * len(completions)
)");
  RewardProcess p({.command = command(dir, "logs:logs")});
  EXPECT_EQ(p.score(chat_batch3()), (RewardValues{0.0, 0.0, 0.0}));
  const RewardLogs logs = p.take_logs();
  ASSERT_EQ(logs.metrics.size(), 2u);
  EXPECT_EQ(logs.metrics[0], (std::pair<std::string, std::vector<double>>{"mine/len", {1, 2}}));
  EXPECT_EQ(logs.metrics[1].first, "mine/nan");
  EXPECT_TRUE(std::isnan(logs.metrics[1].second.at(0)));
  EXPECT_EQ(
      logs.extra,
      nlohmann::json::parse(
          R"({"seen": ["c0", "c1", "c2"], "half": [0.5, "Infinity", null], "twice": [4, 5, 6]})"));
  // The control: a function that logs nothing answers no logs.
  RewardProcess quiet({.command = command(dir, "logs:silent")});
  quiet.score(chat_batch3());
  const RewardLogs none = quiet.take_logs();
  EXPECT_TRUE(none.metrics.empty());
  EXPECT_TRUE(none.extra.empty());
  std::filesystem::remove_all(dir);
}

// A function that fails, answers the wrong shape or logs badly ends its process with status 1
// and a last stderr line naming it; fp8rl's error names the process. No hang.
TEST_F(PythonRewardProcess, BadFunctionsFailNamingTheFunction) {
  const std::string dir = write_module("user_errors", R"(
def wrong_length(completions, **kwargs):
    return [1.0, 2.0]

def returns_none(completions, **kwargs):
    return None

def wrong_value(completions, **kwargs):
    return [1.0, "high", 0.0]

def bad_metric(completions, log_metric, **kwargs):
    log_metric("m", "x")
    return [0.0] * len(completions)

def raises(completions, **kwargs):
    raise KeyError("solution")

def short_extra(completions, log_extra, **kwargs):
    log_extra("gold", [1])
    return [0.0] * len(completions)
)");
  const std::string log = dir + "/stderr.txt";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"wrong_length", "ValueError: wrong_length returned 2 rewards for 3 completions"},
      {"returns_none", "TypeError: returns_none returned NoneType; expected a list of 3 rewards"},
      {"wrong_value", "wrong_value returned 'high' (str) for completion 1"},
      {"bad_metric", "log_metric('m', 'x'): the value must be a number"},
      {"raises", "KeyError: 'solution'"},
  };
  for (const auto& [function, message] : cases) {
    const auto start = Clock::now();
    const std::string e = process_error(command(dir, "user_errors:" + function) + " 2>" + log);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
    EXPECT_NE(e.find("exited with status 1"), std::string::npos) << function << ": " << e;
    EXPECT_NE(e.find("user_errors:" + function), std::string::npos) << e;  // the command
    const std::string err = read_text(log);
    EXPECT_NE(err.find("fp8rl_reward: reward function user_errors:" + function + " failed: "),
              std::string::npos)
        << err;
    EXPECT_NE(err.find(message), std::string::npos) << err;
  }
  // An extra column of the wrong length is caught by fp8rl (as for any process).
  const std::string e = process_error(command(dir, "user_errors:short_extra"));
  EXPECT_NE(e.find("extra column 'gold' must be a list of 3 values"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

// TRL's think_format_reward (trl/rewards/format_rewards.py), restated: 1.0 when the
// completion's text starts with <think>, has no second <think>, and closes it; it reads
// completion[0]["content"], so it needs the conversational shape.
constexpr const char* kThinkFormatModule = R"py(
import re

_pattern = re.compile(r"^<think>(?!.*<think>)(.*?)</think>.*$", re.DOTALL | re.MULTILINE)

def think_format_reward(completions, **kwargs):
    return [1.0 if _pattern.match(completion[0]["content"]) else 0.0 for completion in completions]
)py";

RewardBatch think_batch() {
  RewardBatch b = chat_batch3();
  // Good; a <think> not at the start (re.search would accept it); a second <think>.
  b.completions = {"<think>\nwhy\n</think>\n42", "so <think>why</think> 42",
                   "<think>a</think><think>b</think>"};
  return b;
}

TEST_F(PythonRewardProcess, TrlThinkFormatRewardRunsUnchanged) {
  const std::string dir = write_module("trl_format", kThinkFormatModule);
  RewardProcess p({.command = command(dir, "trl_format:think_format_reward")});
  EXPECT_EQ(p.score(think_batch()), (RewardValues{1.0, 0.0, 0.0}));
  // The control: a text batch gives strings, on which TRL's function fails (as it does in TRL).
  RewardBatch text = think_batch();
  text.prompt_messages = nullptr;
  const std::string log = dir + "/stderr.txt";
  RewardProcess q({.command = command(dir, "trl_format:think_format_reward") + " 2>" + log});
  EXPECT_THROW(q.score(text), Error);
  EXPECT_NE(read_text(log).find("TypeError"), std::string::npos) << read_text(log);
  std::filesystem::remove_all(dir);
}

// TRL's own files, when this machine has them: trl importable, or FP8RL_TRL_REWARDS naming a
// folder with TRL's format_rewards.py (e.g. a checkout's trl/rewards).
TEST_F(PythonRewardProcess, TrlsOwnThinkFormatRewardWhenAvailable) {
  std::string path, function;
  if (const char* dir = std::getenv("FP8RL_TRL_REWARDS");
      dir != nullptr && std::filesystem::exists(std::string(dir) + "/format_rewards.py")) {
    path = dir;
    function = "format_rewards:think_format_reward";
  } else if (python_imports("trl.rewards")) {
    function = "trl.rewards:think_format_reward";
  } else {
    GTEST_SKIP() << "TRL is not installed and FP8RL_TRL_REWARDS is unset (TrlThinkFormatRewardRuns"
                    "Unchanged runs a restatement of it)";
  }
  RewardProcess p({.command = command(path, function)});
  EXPECT_EQ(p.score(think_batch()), (RewardValues{1.0, 0.0, 0.0}));
}

// TRL's accuracy_reward needs trl, math_verify and latex2sympy2_extended; skipped without them.
TEST_F(PythonRewardProcess, TrlAccuracyRewardWhenItsImportsExist) {
  if (!python_imports("trl.rewards.accuracy_rewards math_verify latex2sympy2_extended"))
    GTEST_SKIP() << "accuracy_reward needs trl, math_verify and latex2sympy2_extended (not "
                    "importable here)";
  RewardProcess p({.command = command("", "trl.rewards:accuracy_reward")});
  RewardBatch b = chat_batch3();
  b.completions = {"so \\boxed{\\frac{1}{3}}", "so \\boxed{\\frac{1}{2}}", "anything"};
  b.columns["solution"] = {"$\\frac{1}{3}$", "$\\frac{1}{3}$", "no math here"};
  EXPECT_EQ(p.score(b), (RewardValues{1.0, 0.0, kNoReward}));
  const RewardLogs logs = p.take_logs();
  EXPECT_TRUE(logs.extra.contains("gold_parsed")) << logs.extra.dump();
}

// Reward functions in the style of Unsloth's GSM8K GRPO notebook (written here, not copied):
// they read completion[0]["content"] and the question as prompts[0][-1]["content"], take the
// answer column, print, and keep a global counter.
constexpr const char* kNotebookModule = R"py(
import re

reasoning_end = "<end_working_out>"
solution_start = "<SOLUTION>"
solution_end = "</SOLUTION>"

match_format = re.compile(
    rf"{reasoning_end}.*?{solution_start}(.+?){solution_end}\s*$", flags=re.MULTILINE | re.DOTALL)
match_numbers = re.compile(
    solution_start + r".*?\s*([-]?[\d\.\,]{1,})", flags=re.MULTILINE | re.DOTALL)
CALLS = 0

def match_format_exactly(completions, **kwargs):
    return [3.0 if match_format.search(c[0]["content"]) is not None else 0.0 for c in completions]

def match_format_approximately(completions, **kwargs):
    scores = []
    for completion in completions:
        response = completion[0]["content"]
        score = 0.0
        for tag in (reasoning_end, solution_start, solution_end):
            score += 0.5 if response.count(tag) == 1 else -1.0
        scores.append(score)
    return scores

def check_answer(prompts, completions, answer, **kwargs):
    question = prompts[0][-1]["content"]
    guesses = [m.group(1) if (m := match_format.search(c[0]["content"])) else None
               for c in completions]
    scores = []
    for guess, truth in zip(guesses, answer):
        if guess is None:
            scores.append(-2.0)
        elif guess == truth:
            scores.append(5.0)
        elif guess.strip() == truth.strip():
            scores.append(3.5)
        else:
            try:
                ratio = float(guess) / float(truth)
            except (ValueError, ZeroDivisionError):
                scores.append(-4.5)
                continue
            scores.append(2.0 if 0.9 <= ratio <= 1.1 else 1.5 if 0.8 <= ratio <= 1.2 else -2.5)
    return scores

def check_numbers(prompts, completions, answer, **kwargs):
    global CALLS
    question = prompts[0][-1]["content"]
    responses = [c[0]["content"] for c in completions]
    guesses = [m.group(1) if (m := match_numbers.search(r)) else None for r in responses]
    if CALLS % 5 == 0:
        print("*" * 20, f"Question:\n{question}", f"\nAnswer:\n{answer[0]}",
              f"\nResponse:\n{responses[0]}", f"\nExtracted:\n{guesses[0]}")
    CALLS += 1
    scores = []
    for guess, truth in zip(guesses, answer):
        if guess is None:
            scores.append(-2.5)
            continue
        try:
            scores.append(3.5 if float(guess.strip().replace(",", "")) == float(truth.strip())
                          else -1.5)
        except ValueError:
            scores.append(0.0)
    return scores
)py";

TEST_F(PythonRewardProcess, NotebookStyleGsm8kRewardsRunUnchanged) {
  const std::string dir = write_module("gsm8k_notebook", kNotebookModule);
  RewardBatch b = chat_batch3();
  b.completions = {"steps<end_working_out><SOLUTION>72</SOLUTION>",
                   "<end_working_out><SOLUTION> 9 </SOLUTION>\n", "no format at all"};
  b.columns["answer"] = {"72", "10", "5"};
  const std::vector<std::pair<std::string, RewardValues>> expected = {
      {"match_format_exactly", {3.0, 3.0, 0.0}},
      {"match_format_approximately", {1.5, 1.5, -3.0}},
      {"check_answer", {5.0, 2.0, -2.0}},  // exact; 9 / 10 within 10%; no format
      {"check_numbers", {3.5, -1.5, -2.5}},
  };
  for (const auto& [function, values] : expected) {
    RewardProcess p({.command = command(dir, "gsm8k_notebook:" + function)});
    for (int round = 0; round < 2; ++round) EXPECT_EQ(p.score(b), values) << function;
  }
  // The control: with strings (as before the conversational shapes), prompts[0][-1]["content"]
  // fails.
  RewardProcess text({.command = command(dir, "gsm8k_notebook:check_answer --text")});
  EXPECT_THROW(text.score(b), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fp8rl
