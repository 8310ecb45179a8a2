// The environment of multi-turn GRPO (`environment: COMMAND`): any command line, run through
// /bin/sh -c, started once and kept alive for the run, speaking JSON lines on its stdin and
// stdout like the reward process (rl/reward_process.h). Each GRPO sample is an episode with an
// id unique in the run. Per round it reads
//   {"type": "reset", "episodes": [{"id": "...", "row": {<every dataset column>}}, ...]}
// and answers {"episodes": [{"id": "...", "messages": [...]}, ...]}: each episode's opening
// conversation (without "messages": the row's own prompt). After each assistant turn of the
// episodes still running it reads
//   {"type": "step", "episodes": [{"id": "...", "completion": "<the turn's text>",
//                                  "messages": [<the whole conversation so far>]}, ...]}
// and answers {"episodes": [{"id": "...", "messages": [<to append>], "reward": <number or
// null>, "done": <bool>}, ...]}. Optional: the reset answer's top-level "tools" (JSON schemas the
// chat template renders), the step answer's top-level "metrics" ({name: number}, logged).
// docs/ENVIRONMENTS.md is the user's description. A timeout, an
// exit, a reply that is not such an object (ids missing, unknown or repeated, keys missing or
// of the wrong type) is an fp8rl::Error naming the environment and the problem, and the process
// is killed.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8rl {

class ChildProcess;

struct EnvironmentOptions {
  std::string command;     // run as /bin/sh -c COMMAND
  double timeout_s = 300;  // per exchange: writing the request and reading the answer
  size_t max_reply_bytes = size_t{64} << 20;
  std::string kind = "environment";    // the config key, naming the process in errors
  std::vector<std::string> variables;  // NAME=VALUE set in its environment
};

struct EpisodeStart {
  std::string id;
  nlohmann::json row;  // every column of the dataset row (an object)
};

struct EpisodeTurn {
  std::string id;
  std::string completion;   // the turn's text, special tokens skipped
  nlohmann::json messages;  // the conversation so far, this turn's assistant message last
};

struct EpisodeStepReply {
  nlohmann::json messages = nlohmann::json::array();  // to append (may be empty)
  std::optional<double> reward;                       // null: no reward for this step
  bool done = false;
};

struct EnvironmentReset {
  // The opening conversations, in the order of the request: a message list, or null where the
  // environment gave none (the row's prompt is the opening).
  std::vector<nlohmann::json> openings;
  nlohmann::json tools;  // the tools' JSON schemas for the chat template (a list); null: none
};

struct EnvironmentStep {
  std::vector<EpisodeStepReply> episodes;  // in the order of the request
  std::map<std::string, double> metrics;   // the answer's "metrics" (empty when absent)
};

class EnvironmentProcess {
 public:
  explicit EnvironmentProcess(EnvironmentOptions options);
  // Closes its stdin, waits up to 2 s for it to exit, then kills its process group.
  ~EnvironmentProcess();

  EnvironmentReset reset(const std::vector<EpisodeStart>& episodes);
  EnvironmentStep step(const std::vector<EpisodeTurn>& turns);
  // An agent program (`environment_server`, rl/agent_environment.h): the reset request, then
  // its answer {"episodes": [{"id": ..., "reward": number}, ...]} once it has run them, each
  // episode's reward in the order of `episodes`. While `waiting_on_us` returns true (its
  // requests are being answered) the timeout does not run.
  std::vector<double> run_agents(const std::vector<EpisodeStart>& episodes,
                                 const std::function<bool()>& waiting_on_us);

  const std::string& who() const { return who_; }

  // The request lines (ending in '\n'); invalid UTF-8 in the text is replaced by U+FFFD.
  static std::string reset_line(const std::vector<EpisodeStart>& episodes);
  static std::string step_line(const std::vector<EpisodeTurn>& turns);
  // The answers to a request for episodes `ids`, in that order; `who` names the process.
  static EnvironmentReset parse_reset_reply(std::string_view line,
                                            const std::vector<std::string>& ids,
                                            const std::string& who);
  static EnvironmentStep parse_step_reply(std::string_view line,
                                          const std::vector<std::string>& ids,
                                          const std::string& who);
  static std::vector<double> parse_rewards_reply(std::string_view line,
                                                 const std::vector<std::string>& ids,
                                                 const std::string& who);

 private:
  std::string exchange(const std::string& line, const std::function<bool()>& waiting_on_us = {});

  EnvironmentOptions options_;
  std::string who_;
  std::unique_ptr<ChildProcess> child_;
};

// Checks that `messages` (`what` names it in the error) is a list of chat messages: objects
// with a string "role" and a "content" that is a string, a list or null.
void check_chat_messages(const nlohmann::json& messages, const std::string& what);

}  // namespace fp8rl
