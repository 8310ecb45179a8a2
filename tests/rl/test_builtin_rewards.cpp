#include <gtest/gtest.h>

#include "core/check.h"
#include "rl/builtin_rewards.h"

namespace fp8rl {
namespace {

RewardBatch batch_of(std::vector<std::string> completions, nlohmann::json answers = nullptr) {
  RewardBatch b;
  b.prompts.assign(completions.size(), "Q");
  for (const auto& c : completions) b.completion_ids.emplace_back(c.size(), 1);
  b.completions = std::move(completions);
  b.columns = nlohmann::json::object();
  if (!answers.is_null()) b.columns["answer"] = answers;
  return b;
}

TEST(AnswerMatch, ExactComparesWholeCompletion) {
  AnswerMatchReward r({.mode = AnswerMode::exact});
  const auto v = r.score(batch_of({"42", " 42", "41", "x"}, {"42", "42", "42", nullptr}));
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0], 1.0);
  EXPECT_EQ(v[1], 0.0);  // exact: whitespace matters
  EXPECT_EQ(v[2], 0.0);
  EXPECT_EQ(v[3], std::nullopt);  // no gold answer: no reward
}

TEST(AnswerMatch, NormalizedIgnoresCaseSpacesAndTrailingPeriod) {
  AnswerMatchReward r(
      {.mode = AnswerMode::normalized, .correct_reward = 2.0, .incorrect_reward = -1.0});
  const auto v = r.score(batch_of({"  The  CAPITAL is Paris.", "Paris", "London"},
                                  {"the capital is paris", "paris.", "paris"}));
  EXPECT_EQ(v[0], 2.0);
  EXPECT_EQ(v[1], 2.0);
  EXPECT_EQ(v[2], -1.0);
}

TEST(AnswerMatch, NumericTakesBoxedOrLastNumber) {
  AnswerMatchReward r({.mode = AnswerMode::numeric});
  const auto v = r.score(batch_of(
      {"2 + 2 = 4, so the answer is \\boxed{1,000}",  // boxed wins over later numbers? none here
       "we get 3 then 7 and finally 0.75",            // last number
       "\\boxed{\\frac{3}{4}} and then 9",            // boxed wins over the last number
       "the answer is 1000.0.", "the answer is 999", "no number at all", "\\boxed{x+1}",
       "\\boxed{X + 1}", "\\boxed{x = 5}", "\\boxed{x = 6}"},
      {"1000", "3/4", 0.75, 1000, "1000", "5", "x+1", "x + 1", 5, 5}));
  const std::vector<std::optional<double>> want = {1.0, 1.0, 1.0, 1.0, 0.0,
                                                   0.0, 1.0, 1.0, 1.0, 0.0};
  EXPECT_EQ(v, want);
}

TEST(AnswerMatch, NumericGoldMayBeAFullSolution) {
  // GSM8K's raw answer column ends in "#### 72": its last number is the gold value.
  AnswerMatchReward r({.mode = AnswerMode::numeric});
  const auto v = r.score(
      batch_of({"\\boxed{72}", "\\boxed{71}"}, {"She sold 48/2 = 24 clips.\n#### 72", "#### 72"}));
  EXPECT_EQ(v[0], 1.0);
  EXPECT_EQ(v[1], 0.0);
}

TEST(AnswerMatch, AnswerPatternExtractsTheAnswer) {
  AnswerMatchReward exact(
      {.mode = AnswerMode::exact, .answer_pattern = "<answer>\\s*(.*?)\\s*</answer>"});
  const auto v = exact.score(
      batch_of({"<reasoning>r</reasoning>\n<answer>\n7\n</answer>",
                "<answer>1</answer><answer>7</answer>", "7 without tags", "<answer>8</answer>"},
               {"7", "7", "7", "7"}));
  const std::vector<std::optional<double>> want = {1.0, 1.0, 0.0, 0.0};
  EXPECT_EQ(v, want);
  AnswerMatchReward numeric(
      {.mode = AnswerMode::numeric, .answer_pattern = "<answer>(.*?)</answer>"});
  // The number outside the tags does not count.
  const auto n = numeric.score(
      batch_of({"<answer>1,000</answer> 5", "<answer>x</answer> 1000"}, {1000, 1000}));
  EXPECT_EQ(n[0], 1.0);
  EXPECT_EQ(n[1], 0.0);
}

TEST(AnswerMatch, MissingOrBadColumnIsAnError) {
  AnswerMatchReward r({.column = "solution"});
  EXPECT_THROW(r.score(batch_of({"a"}, {"a"})), Error);
  AnswerMatchReward ok({});
  EXPECT_THROW(ok.score(batch_of({"a"}, nlohmann::json::array({nlohmann::json::array()}))), Error);
}

TEST(RegexReward, SearchStartAndFull) {
  const std::string format = "<think>.*?</think>";
  const auto texts = batch_of({"<think>a\nb</think> answer", "x <think>a</think>", "no tags"});
  RegexReward search({.pattern = format, .match = RegexMatch::search, .flags = {.dotall = true}});
  RegexReward start({.pattern = format, .match = RegexMatch::start, .flags = {.dotall = true}});
  RegexReward full({.pattern = format + ".*",
                    .match = RegexMatch::full,
                    .flags = {.dotall = true},
                    .match_reward = 0.5,
                    .no_match_reward = -0.5});
  RegexReward no_dotall({.pattern = format, .match = RegexMatch::start});
  using V = std::vector<std::optional<double>>;
  EXPECT_EQ(search.score(texts), (V{1.0, 1.0, 0.0}));
  EXPECT_EQ(start.score(texts), (V{1.0, 0.0, 0.0}));
  EXPECT_EQ(full.score(texts), (V{0.5, -0.5, -0.5}));
  EXPECT_EQ(no_dotall.score(texts), (V{0.0, 0.0, 0.0}));  // '.' stops at the newline
}

TEST(RegexReward, UnslothStrictFormat) {
  // Unsloth's GSM8K GRPO notebook's strict_format_reward_func, with re.match.
  RegexReward strict(
      {.pattern = "^<reasoning>\\n.*?\\n</reasoning>\\n<answer>\\n.*?\\n</answer>\\n$",
       .match = RegexMatch::start,
       .match_reward = 0.5});
  using V = std::vector<std::optional<double>>;
  EXPECT_EQ(strict.score(batch_of({"<reasoning>\nr\n</reasoning>\n<answer>\n7\n</answer>\n",
                                   "<reasoning>r</reasoning><answer>7</answer>"})),
            (V{0.5, 0.0}));
}

TEST(RegexReward, InvalidUtf8AndBadPatterns) {
  RegexReward r({.pattern = "ok$"});
  using V = std::vector<std::optional<double>>;
  EXPECT_EQ(r.score(batch_of({std::string("\xff\xfe is ok"), std::string("\xc3 no")})),
            (V{1.0, 0.0}));
  EXPECT_THROW(RegexReward({.pattern = "(unclosed"}), Error);
}

TEST(LengthPenalty, SoftOverlongIsDapoFormula) {
  // L_max = 20, L_cache = 4: free up to 16 tokens, then linear to -1 at 20, -1 beyond.
  LengthPenaltyReward r(
      {.mode = LengthPenaltyMode::soft_overlong, .max_length = 20, .cache_length = 4});
  EXPECT_EQ(r.reward(0), 0.0);
  EXPECT_EQ(r.reward(16), 0.0);
  EXPECT_EQ(r.reward(17), -0.25);
  EXPECT_EQ(r.reward(18), -0.5);
  EXPECT_EQ(r.reward(20), -1.0);
  EXPECT_EQ(r.reward(21), -1.0);
  RewardBatch b = batch_of({"a", "b"});
  b.completion_ids = {std::vector<int32_t>(10, 1), std::vector<int32_t>(19, 1)};
  using V = std::vector<std::optional<double>>;
  EXPECT_EQ(r.score(b), (V{0.0, -0.75}));
}

TEST(LengthPenalty, LinearWithCap) {
  LengthPenaltyReward r({.mode = LengthPenaltyMode::linear,
                         .target_length = 10,
                         .per_token = 0.1,
                         .max_penalty = 0.5});
  EXPECT_EQ(r.reward(5), 0.0);
  EXPECT_EQ(r.reward(10), 0.0);
  EXPECT_DOUBLE_EQ(r.reward(12), -0.2);
  EXPECT_EQ(r.reward(100), -0.5);
}

TEST(LengthPenalty, RejectsBadOptions) {
  EXPECT_THROW(LengthPenaltyReward({.max_length = 10, .cache_length = 11}), Error);
  EXPECT_THROW(LengthPenaltyReward({.max_length = 10, .cache_length = 0}), Error);
  EXPECT_THROW(LengthPenaltyReward({.mode = LengthPenaltyMode::linear, .per_token = -1}), Error);
}

}  // namespace
}  // namespace fp8rl
