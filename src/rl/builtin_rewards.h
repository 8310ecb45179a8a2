// The built-in reward functions: answer match against a dataset column, regex (format) match,
// and length penalties. Each scores one sample at a time; none keeps state between batches.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "rl/pattern.h"
#include "rl/reward.h"

namespace fp8rl {

enum class AnswerMode {
  exact,       // byte-equal strings
  normalized,  // equal after normalize_answer (trim, case-fold, collapse spaces, trailing '.')
  numeric,     // math: equal values (math_answer.h; "x = 5" counts as 5), else equal
               // normalised strings
};

struct AnswerMatchOptions {
  std::string name = "answer_match";
  std::string column = "answer";  // the gold answer: a string, a number, or null (no reward)
  AnswerMode mode = AnswerMode::exact;
  // When set, the completion's answer is group 1 of the last match of this pattern (DOTALL;
  // e.g. "<answer>(.*?)</answer>"), and a completion without a match is incorrect. Otherwise
  // it is the whole completion (exact, normalized) or extract_math_answer's answer (numeric).
  std::optional<std::string> answer_pattern{};
  double correct_reward = 1.0;
  double incorrect_reward = 0.0;
};

class AnswerMatchReward final : public RewardFunction {
 public:
  explicit AnswerMatchReward(AnswerMatchOptions options);
  const std::string& name() const override { return options_.name; }
  RewardValues score(const RewardBatch& batch) override;
  // Whether `completion` answers `gold` (a string or number), under the options.
  bool is_correct(const std::string& completion, const nlohmann::json& gold) const;

 private:
  AnswerMatchOptions options_;
  std::optional<Pattern> answer_pattern_;
};

enum class RegexMatch {
  search,  // anywhere in the completion (Python's re.search; anchor with ^ and $ as needed)
  start,   // at the start (Python's re.match, as the Unsloth format rewards use it)
  full,    // the whole completion (re.fullmatch)
};

struct RegexRewardOptions {
  std::string name = "regex";
  std::string pattern;
  RegexMatch match = RegexMatch::search;
  PatternOptions flags{};
  double match_reward = 1.0;
  double no_match_reward = 0.0;
};

class RegexReward final : public RewardFunction {
 public:
  explicit RegexReward(RegexRewardOptions options);
  const std::string& name() const override { return options_.name; }
  RewardValues score(const RewardBatch& batch) override;

 private:
  RegexRewardOptions options_;
  Pattern pattern_;
};

enum class LengthPenaltyMode {
  // DAPO's soft overlong punishment (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement
  // Learning System at Scale", eq. 13; TRL's get_soft_overlong_punishment), with L_max =
  // max_length and L_cache = cache_length:
  //   R(y) = 0                             if |y| <= L_max - L_cache
  //        = ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
  //        = -1                            if |y| > L_max
  // added to the task reward (the combination sums it with the other functions).
  soft_overlong,
  // R(y) = -min(max_penalty, per_token * max(0, |y| - target_length)).
  linear,
};

struct LengthPenaltyOptions {
  std::string name = "length_penalty";
  LengthPenaltyMode mode = LengthPenaltyMode::soft_overlong;
  int64_t max_length = 0;     // soft_overlong: L_max, in tokens (the max_completion_length)
  int64_t cache_length = 0;   // soft_overlong: L_cache, 0 < L_cache <= L_max
  int64_t target_length = 0;  // linear: tokens allowed without penalty
  double per_token = 0.0;     // linear: penalty per token beyond the target
  double max_penalty = std::numeric_limits<double>::infinity();  // linear: the cap
};

class LengthPenaltyReward final : public RewardFunction {
 public:
  explicit LengthPenaltyReward(LengthPenaltyOptions options);
  const std::string& name() const override { return options_.name; }
  RewardValues score(const RewardBatch& batch) override;
  // The reward of a completion of `length` tokens.
  double reward(int64_t length) const;

 private:
  LengthPenaltyOptions options_;
};

}  // namespace fp8rl
