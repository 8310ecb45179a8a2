// The external reward process: any command line, run through /bin/sh -c,
// started once and kept alive for the run. Per batch it reads one JSON line on its stdin,
//   {"prompts": [...], "completions": [...], "completion_ids": [[...]], "<column>": [...], ...,
//    "prompt_messages": [[{role, content}, ...], ...], "trainer_state": {"global_step": ...}}
// (every other dataset column, one value per completion; prompt_messages only for
// conversational datasets, completion_messages (each episode's messages after its opening)
// only for multi-turn episodes, trainer_state only inside a run) and writes one line on its stdout,
//   {"rewards": [r_0, ..., r_{B-1}], "metrics": {...}, "extra": {...}}
// where each r_i is a number, null (no reward for that sample, TRL's None), or one of the
// strings "NaN", "Infinity", "-Infinity" (JSON has no non-finite numbers; such rewards are
// reported and not trained on). The optional "metrics" (name -> a number or a list of numbers)
// and "extra" (column -> B values) carry TRL's log_metric and log_extra. Its stderr passes
// through to ours. A timeout, an exit, a reply that is not that JSON object, or the wrong number
// of rewards is an fp8rl::Error naming the process and the problem, and the process is killed.
// python/fp8rl_reward serves this protocol for a TRL-style Python reward function.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "rl/reward.h"

namespace fp8rl {

class ChildProcess;

// The longest timeout_s accepted (about 31 years: "no timeout" in practice). Larger values
// would overflow the milliseconds the wait is counted in.
inline constexpr double kMaxRewardTimeoutS = 1e9;

struct RewardProcessOptions {
  std::string name = "reward_process";
  std::string command;     // run as /bin/sh -c COMMAND
  double timeout_s = 300;  // per batch: writing the request and reading the answer
  // The longest answer line accepted (bytes).
  size_t max_reply_bytes = size_t{64} << 20;
};

// A parsed answer line.
struct RewardReply {
  RewardValues rewards;
  RewardLogs logs;
};

class RewardProcess final : public RewardFunction {
 public:
  // Starts the process.
  explicit RewardProcess(RewardProcessOptions options);
  // Closes its stdin, waits up to 2 s for it to exit, then kills its process group.
  ~RewardProcess() override;

  const std::string& name() const override { return options_.name; }
  RewardValues score(const RewardBatch& batch) override;
  RewardLogs take_logs() override;

  // The request line of a batch (ending in '\n'). Invalid UTF-8 in the text is replaced by
  // U+FFFD.
  static std::string request_line(const RewardBatch& batch);
  // The rewards and logs of a reply line; `who` names the process in errors.
  static RewardReply parse_reply(std::string_view line, int64_t expected, const std::string& who);

 private:
  RewardProcessOptions options_;
  std::string who_;
  std::unique_ptr<ChildProcess> child_;
  RewardLogs logs_;  // of the last batch
};

}  // namespace fp8rl
