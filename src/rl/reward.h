// The reward interface of the GRPO family: one batch of samples in, one value per sample out,
// as TRL's reward functions. The built-ins (builtin_rewards.h), the
// external reward process (reward_process.h) and their weighted combination (reward_set.h)
// all go through it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fp8rl {

// One batch of samples, as TRL passes it to reward functions (B rows after the G-fold repeat).
struct RewardBatch {
  std::vector<std::string> prompts;      // [B] prompt text; for chat prompts the rendered text
  std::vector<std::string> completions;  // [B] decoded, special tokens skipped
  std::vector<std::vector<int32_t>> completion_ids;  // [B][len] without padding
  // Every other dataset column -> an array of B values (an object; may be empty or null).
  nlohmann::json columns;
  // A conversational dataset (TRL's is_conversational): [B] each prompt's message list as the
  // dataset holds it, which TRL passes as `prompts`. Null for a text dataset.
  nlohmann::json prompt_messages;
  // Multi-turn episodes (an environment): [B] each episode's messages after its opening, the
  // model's turns and the environment's, which TRL passes as the completions; then
  // `completions` and `completion_ids` hold each episode's last turn. Null otherwise.
  nlohmann::json completion_messages;
  // TRL's trainer_state as an object (global_step, max_steps, epoch, ...); null outside a run.
  nlohmann::json trainer_state;

  int64_t size() const { return int64_t(completions.size()); }
  // Throws fp8rl::Error unless prompts, completions, completion_ids, prompt_messages (when
  // set) and every column hold the same number of rows, trainer_state is null or an object,
  // and no column takes a name of the reward protocol (RewardBatch::reserved_names).
  void validate() const;
  static const std::vector<std::string>& reserved_names();
  // The column's array; an fp8rl::Error naming `who` and the columns present when it is absent.
  const nlohmann::json& column(const std::string& name, const std::string& who) const;
};

// One reward value per sample; nullopt = no reward for that sample (TRL's None). A function may
// also return NaN or +-Inf: RewardSet reports those rows as non-finite and they are not trained
// on.
using RewardValues = std::vector<std::optional<double>>;

// What a reward function logged while scoring one batch: TRL's log_metric and log_extra.
struct RewardLogs {
  // name -> every value logged under it (TRL reports their mean for the batch).
  std::vector<std::pair<std::string, std::vector<double>>> metrics;
  // column -> one value per completion (TRL's completions table; samples.jsonl here). An
  // object.
  nlohmann::json extra = nlohmann::json::object();
};

class RewardFunction {
 public:
  virtual ~RewardFunction();
  // The name in the metrics: rewards/<name>/mean.
  virtual const std::string& name() const = 0;
  // Exactly batch.size() values.
  virtual RewardValues score(const RewardBatch& batch) = 0;
  // What the last score() logged, moved out (nothing for functions that do not log).
  virtual RewardLogs take_logs() { return {}; }
};

}  // namespace fp8rl
