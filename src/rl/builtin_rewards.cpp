#include "rl/builtin_rewards.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "rl/math_answer.h"

namespace fp8rl {

namespace {

// The gold answer as text: a string as is, a number as JSON writes it.
std::string gold_text(const nlohmann::json& gold) {
  return gold.is_string() ? gold.get<std::string>() : gold.dump();
}

// The gold value of a numeric answer: a JSON number, or a string that is a number as a whole,
// or else whose \boxed{} / last number is one ("... #### 72" of GSM8K).
std::optional<double> gold_number(const nlohmann::json& gold) {
  if (gold.is_number()) return gold.get<double>();
  const std::string text = gold.get<std::string>();
  if (auto v = parse_number(text)) return v;
  if (auto answer = extract_math_answer(text)) return parse_number(*answer);
  return std::nullopt;
}

}  // namespace

AnswerMatchReward::AnswerMatchReward(AnswerMatchOptions options) : options_(std::move(options)) {
  CHECK(!options_.column.empty(), "answer_match '{}': the column name is empty", options_.name);
  if (options_.answer_pattern) {
    answer_pattern_.emplace(*options_.answer_pattern, PatternOptions{.dotall = true},
                            fmt::format("answer_match '{}': answer_pattern", options_.name));
  }
}

bool AnswerMatchReward::is_correct(const std::string& completion,
                                   const nlohmann::json& gold) const {
  std::optional<std::string> answer;
  if (answer_pattern_) {
    answer = answer_pattern_->last_capture(completion);
    if (!answer) return false;
  }
  switch (options_.mode) {
    case AnswerMode::exact:
      return answer.value_or(completion) == gold_text(gold);
    case AnswerMode::normalized:
      return normalize_answer(answer.value_or(completion)) == normalize_answer(gold_text(gold));
    case AnswerMode::numeric: {
      const std::optional<std::string> final_answer =
          extract_math_answer(answer ? *answer : completion);
      if (!final_answer) return false;
      std::optional<double> value = parse_number(*final_answer);
      const size_t equals = final_answer->rfind('=');
      if (!value && equals != std::string::npos) {
        // "x = 5": the value is the right-hand side.
        value = parse_number(std::string_view(*final_answer).substr(equals + 1));
      }
      const std::optional<double> expected = gold_number(gold);
      if (value && expected) return numbers_equal(*value, *expected);
      // Not numbers on both sides (\boxed{x+1}, a word answer): compare as text.
      return normalize_answer(*final_answer) == normalize_answer(gold_text(gold));
    }
  }
  return false;
}

RewardValues AnswerMatchReward::score(const RewardBatch& batch) {
  const std::string who = fmt::format("answer_match reward '{}'", options_.name);
  const nlohmann::json& gold = batch.column(options_.column, who);
  RewardValues out(batch.completions.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const nlohmann::json& g = gold[i];
    if (g.is_null()) continue;  // no gold answer: no reward, as TRL's accuracy_reward
    CHECK(g.is_string() || g.is_number(),
          "{}: column '{}' row {} must be a string, a number or null, got a {}", who,
          options_.column, i, g.type_name());
    out[i] =
        is_correct(batch.completions[i], g) ? options_.correct_reward : options_.incorrect_reward;
  }
  return out;
}

RegexReward::RegexReward(RegexRewardOptions options)
    : options_(std::move(options)),
      pattern_(options_.pattern, options_.flags, fmt::format("regex reward '{}'", options_.name)) {}

RewardValues RegexReward::score(const RewardBatch& batch) {
  RewardValues out(batch.completions.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string& c = batch.completions[i];
    bool matched = false;
    switch (options_.match) {
      case RegexMatch::search:
        matched = pattern_.search(c);
        break;
      case RegexMatch::start:
        matched = pattern_.match_start(c);
        break;
      case RegexMatch::full:
        matched = pattern_.full_match(c);
        break;
    }
    out[i] = matched ? options_.match_reward : options_.no_match_reward;
  }
  return out;
}

LengthPenaltyReward::LengthPenaltyReward(LengthPenaltyOptions options)
    : options_(std::move(options)) {
  const std::string& n = options_.name;
  if (options_.mode == LengthPenaltyMode::soft_overlong) {
    CHECK(options_.max_length > 0, "length_penalty '{}': max_length must be > 0, got {}", n,
          options_.max_length);
    CHECK(options_.cache_length > 0 && options_.cache_length <= options_.max_length,
          "length_penalty '{}': cache_length must be in (0, max_length = {}], got {}", n,
          options_.max_length, options_.cache_length);
  } else {
    CHECK(options_.target_length >= 0, "length_penalty '{}': target_length must be >= 0, got {}", n,
          options_.target_length);
    CHECK(std::isfinite(options_.per_token) && options_.per_token >= 0.0,
          "length_penalty '{}': per_token must be a finite number >= 0, got {}", n,
          options_.per_token);
    CHECK(options_.max_penalty >= 0.0, "length_penalty '{}': max_penalty must be >= 0, got {}", n,
          options_.max_penalty);
  }
}

double LengthPenaltyReward::reward(int64_t length) const {
  if (options_.mode == LengthPenaltyMode::soft_overlong) {
    const int64_t free_length = options_.max_length - options_.cache_length;
    if (length <= free_length) return 0.0;
    if (length <= options_.max_length) {
      return double(free_length - length) / double(options_.cache_length);
    }
    return -1.0;
  }
  const int64_t excess = std::max<int64_t>(0, length - options_.target_length);
  return -std::min(options_.max_penalty, options_.per_token * double(excess));
}

RewardValues LengthPenaltyReward::score(const RewardBatch& batch) {
  CHECK(batch.completion_ids.size() == batch.completions.size(),
        "length_penalty '{}': {} completion_ids for {} completions", options_.name,
        batch.completion_ids.size(), batch.completions.size());
  RewardValues out(batch.completions.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = reward(int64_t(batch.completion_ids[i].size()));
  return out;
}

}  // namespace fp8rl
