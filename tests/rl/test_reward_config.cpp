#include <gtest/gtest.h>

#include "core/check.h"
#include "rl/reward_config.h"

namespace fp8rl {
namespace {

using Json = nlohmann::json;

std::string error_of(const Json& spec) {
  try {
    make_reward_set(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RewardConfig, BuildsEveryBuiltinWithWeightsAndNames) {
  const Json spec = Json::parse(R"([
    {"type": "answer_match", "column": "answer", "mode": "numeric", "weight": 2.0},
    {"type": "regex", "pattern": "\\\\boxed\\{", "weight": 0.5, "name": "boxed"},
    {"type": "length_penalty", "max_length": 20, "cache_length": 4},
    {"type": "length_penalty", "name": "linear", "mode": "linear", "target_length": 3,
     "per_token": 0.1}
  ])");
  RewardSet set = make_reward_set(spec);
  EXPECT_EQ(set.names(),
            (std::vector<std::string>{"answer_match", "boxed", "length_penalty", "linear"}));
  EXPECT_EQ(set.weights(), (std::vector<double>{2.0, 0.5, 1.0, 1.0}));
  RewardBatch b;
  b.prompts = {"q", "q"};
  b.completions = {"so \\boxed{1,000}", "maybe 7"};
  b.completion_ids = {std::vector<int32_t>(18, 1), std::vector<int32_t>(2, 1)};
  b.columns = {{"answer", {"1000", "8"}}};
  const CombinedRewards c = set.score(b);
  // Row 0: 2*1 (numeric match) + 0.5*1 (boxed) + (16-18)/4 (soft overlong) - 0.1*(18-3) = 0.5.
  EXPECT_DOUBLE_EQ(c.total[0], 0.5);
  // Row 1: 0 + 0 + 0 + 0.
  EXPECT_DOUBLE_EQ(c.total[1], 0.0);
}

TEST(RewardConfig, RejectsUnknownTypesAndFields) {
  EXPECT_NE(
      error_of(Json::parse(R"([{"type": "answer_mach"}])")).find("unknown type 'answer_mach'"),
      std::string::npos);
  const std::string typo = error_of(Json::parse(R"([{"type": "regex", "patern": "x"}])"));
  EXPECT_NE(typo.find("the field 'pattern' is required"), std::string::npos) << typo;
  const std::string field =
      error_of(Json::parse(R"([{"type": "regex", "pattern": "x", "dotal": true}])"));
  EXPECT_NE(field.find("unknown field 'dotal'; did you mean 'dotall'?"), std::string::npos)
      << field;
  // Fields of the other length-penalty mode are unknown in this one.
  EXPECT_NE(error_of(Json::parse(R"([{"type": "length_penalty", "max_length": 8,
                                      "cache_length": 2, "per_token": 1}])"))
                .find("unknown field 'per_token'"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"([{"type": "answer_match", "mode": "fuzzy"}])"))
                .find("'mode' must be one of exact, normalized, numeric"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"([{"type": "answer_match", "weight": "1"}])"))
                .find("'weight' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"([{"column": "answer"}])")).find("needs a 'type'"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"([{"type": "regex", "pattern": "("}])")).find("invalid regex"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"([{"type": "regex", "pattern": "a"},
                                     {"type": "regex", "pattern": "b"}])"))
                .find("two reward functions are named 'regex'"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"type": "regex"})")).find("expected a list"),
            std::string::npos);
  EXPECT_NE(error_of(Json::array()).find("empty"), std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"([{"reward_process": "cat", "timeout_s": 0}])"))
                .find("'timeout_s' must be > 0"),
            std::string::npos);
  // 1e19 s would overflow the milliseconds of the wait into a negative timeout.
  EXPECT_NE(error_of(Json::parse(R"([{"reward_process": "cat", "timeout_s": 1e19}])"))
                .find("'timeout_s' must be <= 1000000000, got 1e+19"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"([{"reward_process": "cat", "timeout": 5}])"))
                .find("did you mean 'timeout_s'?"),
            std::string::npos);
  // A valid spec gives no error (the control of the checks above).
  EXPECT_EQ(error_of(Json::parse(R"([{"type": "regex", "pattern": "a", "dotall": true}])")), "");
}

TEST(RewardConfig, RewardProcessEntry) {
  RewardSet set = make_reward_set(Json::parse(
      R"([{"reward_process": "while read l; do echo '{\"rewards\": [0.25]}'; done",
           "name": "sh", "weight": 4}])"));
  RewardBatch b;
  b.prompts = {"q"};
  b.completions = {"c"};
  b.completion_ids = {{1}};
  EXPECT_EQ(set.names(), std::vector<std::string>{"sh"});
  EXPECT_EQ(set.score(b).total[0], 1.0);
  RewardSet flag = make_reward_process_set("while read l; do echo '{\"rewards\": [3]}'; done");
  EXPECT_EQ(flag.names(), std::vector<std::string>{"reward_process"});
  EXPECT_EQ(flag.score(b).total[0], 3.0);
}

}  // namespace
}  // namespace fp8rl
