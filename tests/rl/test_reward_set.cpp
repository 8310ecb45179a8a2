#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "core/check.h"
#include "core/nan.h"
#include "rl/reward_set.h"

namespace fp8rl {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr auto None = std::nullopt;

// A reward function that returns fixed values.
class Fixed final : public RewardFunction {
 public:
  Fixed(std::string name, RewardValues values)
      : name_(std::move(name)), values_(std::move(values)) {}
  const std::string& name() const override { return name_; }
  RewardValues score(const RewardBatch&) override { return values_; }

 private:
  std::string name_;
  RewardValues values_;
};

RewardBatch empty_batch(size_t n) {
  RewardBatch b;
  b.prompts.assign(n, "p");
  b.completions.assign(n, "c");
  b.completion_ids.assign(n, {1});
  return b;
}

TEST(RewardSet, WeightedNansumWithNoneAndUnscorableRows) {
  // Hand-computed: weights (1, 0.5).
  //   row 0: 1*1 + 0.5*2 = 2      row 1: None + 0.5*4 = 2 (None skipped, as nansum)
  //   row 2: 1*3 + None = 3       row 3: None, None -> unscorable (NaN, not in the stats)
  RewardSet set;
  set.add(std::make_unique<Fixed>("a", RewardValues{1.0, None, 3.0, None}), 1.0);
  set.add(std::make_unique<Fixed>("b", RewardValues{2.0, 4.0, None, None}), 0.5);
  const CombinedRewards c = set.score(empty_batch(4));
  EXPECT_EQ(c.total[0], 2.0);
  EXPECT_EQ(c.total[1], 2.0);
  EXPECT_EQ(c.total[2], 3.0);
  EXPECT_TRUE(std::isnan(c.total[3]));
  EXPECT_EQ(c.rows[3], RewardRow::unscorable);
  EXPECT_EQ(c.num_unscorable, 1);
  EXPECT_EQ(c.num_non_finite, 0);
  // Per function: a over {1, 3}: mean 2, std sqrt(2); b over {2, 4}: mean 3, std sqrt(2).
  EXPECT_EQ(c.function_stats[0].mean, 2.0);
  EXPECT_DOUBLE_EQ(c.function_stats[0].std, std::sqrt(2.0));
  EXPECT_EQ(c.function_stats[1].mean, 3.0);
  // Totals over the 3 scored rows {2, 2, 3}: mean 7/3, unbiased std sqrt(1/3).
  EXPECT_DOUBLE_EQ(c.total_stats.mean, 7.0 / 3.0);
  EXPECT_DOUBLE_EQ(c.total_stats.std, std::sqrt(1.0 / 3.0));
  EXPECT_EQ(c.total_stats.count, 3);

  std::map<std::string, double> m;
  for (const auto& [k, v] : c.metrics()) m[k] = v;
  EXPECT_EQ(m.at("rewards/a/mean"), 2.0);
  EXPECT_EQ(m.at("rewards/b/mean"), 3.0);
  EXPECT_DOUBLE_EQ(m.at("reward"), 7.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.at("reward_std"), std::sqrt(1.0 / 3.0));
  EXPECT_EQ(m.at("rewards/unscorable_count"), 1.0);
}

TEST(RewardSet, NonFiniteRowsAreReportedNotSummed) {
  RewardSet set;
  set.add(std::make_unique<Fixed>("a", RewardValues{1.0, kNaN, 1.0, -kInf}), 1.0);
  set.add(std::make_unique<Fixed>("b", RewardValues{1.0, 1.0, kInf, None}), 1.0);
  const CombinedRewards c = set.score(empty_batch(4));
  EXPECT_EQ(c.total[0], 2.0);
  for (int i : {1, 2, 3}) {
    EXPECT_TRUE(std::isnan(c.total[i])) << i;
    EXPECT_EQ(c.rows[i], RewardRow::non_finite) << i;
  }
  EXPECT_EQ(c.num_non_finite, 3);
  EXPECT_EQ(c.num_unscorable, 0);
  // The stats skip non-finite values: a over {1, 1}, b over {1, 1}, totals over {2}.
  EXPECT_EQ(c.function_stats[0].count, 2);
  EXPECT_EQ(c.function_stats[1].count, 2);
  EXPECT_EQ(c.total_stats.mean, 2.0);
  EXPECT_TRUE(std::isnan(c.total_stats.std));  // one value: no unbiased std
  for (const auto& [k, v] : c.metrics()) EXPECT_FALSE(std::isnan(v)) << k;
}

TEST(RewardSet, WeightsOverrideAndValidation) {
  RewardSet set;
  set.add(std::make_unique<Fixed>("a", RewardValues{1.0}), 1.0);
  set.add(std::make_unique<Fixed>("b", RewardValues{1.0}), 1.0);
  set.set_weights({2.0, -1.0});
  EXPECT_EQ(set.score(empty_batch(1)).total[0], 1.0);
  EXPECT_THROW(set.set_weights({1.0}), Error);
  EXPECT_THROW(set.set_weights({1.0, kNaN}), Error);
  EXPECT_THROW(set.add(std::make_unique<Fixed>("a", RewardValues{1.0}), 1.0), Error);  // name
  EXPECT_THROW(set.score(empty_batch(2)), Error);  // functions return 1 value for 2 rows
}

// A reward function that logs fixed metrics and extra columns, as a Python function's
// log_metric / log_extra reach fp8rl through its reward process.
class Logging final : public RewardFunction {
 public:
  Logging(std::string name, RewardLogs logs) : name_(std::move(name)), logs_(std::move(logs)) {}
  const std::string& name() const override { return name_; }
  RewardValues score(const RewardBatch& b) override { return RewardValues(size_t(b.size()), 1.0); }
  RewardLogs take_logs() override { return logs_; }

 private:
  std::string name_;
  RewardLogs logs_;
};

TEST(RewardSet, LoggedMetricsAreMeansOverEveryFunctionAndExtraColumnsPassThrough) {
  // As TRL's _pending_metrics: one list per name across functions, its mean per batch.
  // "x": {1, 2} from f and {6} from g -> 3, not the mean of the means (1.5 + 6) / 2 = 3.75.
  RewardLogs f_logs;
  f_logs.metrics = {{"x", {1.0, 2.0}}, {"only_f", {5.0}}};
  f_logs.extra = {{"gold", {"a", "b"}}};
  RewardLogs g_logs;
  g_logs.metrics = {{"x", {6.0}}};
  g_logs.extra = {{"parsed", {1, nullptr}}};
  RewardSet set;
  set.add(std::make_unique<Logging>("f", f_logs));
  set.add(std::make_unique<Logging>("g", g_logs));
  set.add(std::make_unique<Fixed>("silent", RewardValues{0.0, 0.0}));
  const CombinedRewards c = set.score(empty_batch(2));
  using Metrics = std::vector<std::pair<std::string, double>>;
  EXPECT_EQ(c.logged_metrics, (Metrics{{"x", 3.0}, {"only_f", 5.0}}));
  EXPECT_NE(c.logged_metrics[0].second, 3.75);  // the control: not the mean of means
  EXPECT_EQ(c.logged_extra, nlohmann::json({{"gold", {"a", "b"}}, {"parsed", {1, nullptr}}}));
  // The logs are not the rewards' metrics.
  for (const auto& [k, v] : c.metrics()) EXPECT_NE(k, "x");
}

TEST(RewardSet, AnExtraColumnTwoFunctionsLogHoldsTheLaterOnesValues) {
  // As TRL's completions table, which keeps the last batch's worth of each column.
  RewardLogs first, second;
  first.extra = {{"gold", {"a", "b"}}, {"first_only", {1, 2}}};
  second.extra = {{"gold", {"c", "d"}}};
  RewardSet set;
  set.add(std::make_unique<Logging>("first", first));
  set.add(std::make_unique<Logging>("second", second));
  EXPECT_EQ(set.score(empty_batch(2)).logged_extra,
            nlohmann::json({{"gold", {"c", "d"}}, {"first_only", {1, 2}}}));
}

TEST(RewardSet, AnExtraColumnOfTheWrongLengthIsAnErrorNamingTheFunction) {
  RewardLogs short_column;
  short_column.extra = {{"gold", {"a"}}};
  RewardSet one;
  one.add(std::make_unique<Logging>("short", short_column));
  try {
    one.score(empty_batch(2));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'short' logged 1 values of the extra column 'gold' for "
                                         "a batch of 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(RewardSet, BatchValidation) {
  RewardSet set;
  set.add(std::make_unique<Fixed>("a", RewardValues{1.0}), 1.0);
  RewardBatch b = empty_batch(1);
  b.columns = {{"answer", {"x", "y"}}};
  EXPECT_THROW(set.score(b), Error);  // a column of 2 values for 1 row
  b.columns = {{"completions", {"x"}}};
  EXPECT_THROW(set.score(b), Error);  // a reserved name
  b.columns = {{"trainer_state", {"x"}}};
  EXPECT_THROW(set.score(b), Error);  // a reserved name
  b.columns = nullptr;
  b.prompt_messages = nlohmann::json::array();
  EXPECT_THROW(set.score(b), Error);  // no message list for the row
  b.prompt_messages = {nlohmann::json::array({{{"role", "user"}, {"content", "q"}}})};
  b.trainer_state = 3;
  EXPECT_THROW(set.score(b), Error);  // not an object
  b.trainer_state = {{"global_step", 3}};
  EXPECT_NO_THROW(set.score(b));
  b.columns = {{"answer", {"x"}}};
  EXPECT_NO_THROW(set.score(b));
  EXPECT_THROW(RewardSet().score(b), Error);  // no function
}

}  // namespace
}  // namespace fp8rl
