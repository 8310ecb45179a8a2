// The reward interface of the GRPO family: one batch of samples in, one value per sample out,
// as TRL's reward functions. The built-ins (builtin_rewards.h), the
// external reward process (reward_process.h) and their weighted combination (reward_set.h)
// all go through it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fp8rl {

// One batch of samples, as TRL passes it to reward functions (B rows after the G-fold repeat).
struct RewardBatch {
  std::vector<std::string> prompts;      // [B] prompt text; for chat prompts the rendered text
  std::vector<std::string> completions;  // [B] decoded, special tokens skipped
  std::vector<std::vector<int32_t>> completion_ids;  // [B][len] without padding
  // Every other dataset column -> an array of B values (an object; may be empty or null).
  nlohmann::json columns;

  int64_t size() const { return int64_t(completions.size()); }
  // Throws fp8rl::Error unless prompts, completions, completion_ids and every column hold the
  // same number of rows and no column is named prompts, completions or completion_ids.
  void validate() const;
  // The column's array; an fp8rl::Error naming `who` and the columns present when it is absent.
  const nlohmann::json& column(const std::string& name, const std::string& who) const;
};

// One reward value per sample; nullopt = no reward for that sample (TRL's None). A function may
// also return NaN or +-Inf: RewardSet reports those rows as non-finite and they are not trained
// on.
using RewardValues = std::vector<std::optional<double>>;

class RewardFunction {
 public:
  virtual ~RewardFunction();
  // The name in the metrics: rewards/<name>/mean.
  virtual const std::string& name() const = 0;
  // Exactly batch.size() values.
  virtual RewardValues score(const RewardBatch& batch) = 0;
};

}  // namespace fp8rl
