#include "rl/reward_config.h"

#include <algorithm>
#include <set>

#include "core/check.h"
#include "core/spelling.h"
#include "formats/json_read.h"
#include "formats/quant_config.h"
#include "rl/builtin_rewards.h"
#include "rl/reward_model.h"
#include "rl/reward_process.h"

namespace fp8rl {

namespace {

using Json = nlohmann::json;

// Far above a useful scoring batch; keeps a typo from sizing a huge KV pool.
constexpr int64_t kMaxRewardBatchTokens = int64_t{1} << 22;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// One entry of the list: typed reads of its fields, and a check that no other field is there.
class Entry {
 public:
  Entry(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}

  const std::string& where() const { return where_; }

  bool has(const std::string& key) {
    known_.push_back(key);
    return j_.contains(key);
  }
  std::string string(const std::string& key, const std::string& fallback, bool required = false) {
    if (!present(key, required)) return fallback;
    const Json& v = j_.at(key);
    CHECK(v.is_string(), "{}: '{}' must be a string, got {}", where_, key, json_excerpt(v));
    return v.get<std::string>();
  }
  double number(const std::string& key, double fallback, bool required = false) {
    if (!present(key, required)) return fallback;
    const Json& v = j_.at(key);
    CHECK(v.is_number(), "{}: '{}' must be a number, got {}", where_, key, json_excerpt(v));
    return v.get<double>();
  }
  double finite(const std::string& key, double fallback, bool required = false) {
    const double x = number(key, fallback, required);
    CHECK(std::isfinite(x), "{}: '{}' must be finite, got {}", where_, key, x);
    return x;
  }
  int64_t integer(const std::string& key, int64_t fallback, bool required = false) {
    if (!present(key, required)) return fallback;
    const Json& v = j_.at(key);
    CHECK(v.is_number_integer() &&
              (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : true),
          "{}: '{}' must be an integer, got {}", where_, key, json_excerpt(v));
    return v.get<int64_t>();
  }
  bool boolean(const std::string& key, bool fallback) {
    if (!present(key, false)) return fallback;
    const Json& v = j_.at(key);
    CHECK(v.is_boolean(), "{}: '{}' must be true or false, got {}", where_, key, json_excerpt(v));
    return v.get<bool>();
  }
  // One of `choices`.
  std::string choice(const std::string& key, const std::vector<std::string>& choices,
                     const std::string& fallback) {
    const std::string v = string(key, fallback);
    CHECK(std::find(choices.begin(), choices.end(), v) != choices.end(),
          "{}: '{}' must be one of {}, got '{}'", where_, key, join(choices), v);
    return v;
  }

  // Every field of the entry must have been read (or named by has()).
  void reject_unknown() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (std::find(known_.begin(), known_.end(), it.key()) != known_.end()) continue;
      const std::optional<std::string> nearest = nearest_spelling(it.key(), known_);
      RAISE("{}: unknown field '{}'{} (fields: {})", where_, it.key(),
            nearest ? fmt::format("; did you mean '{}'?", *nearest) : "", join(known_));
    }
  }

 private:
  bool present(const std::string& key, bool required) {
    known_.push_back(key);
    const bool there = j_.contains(key);
    CHECK(there || !required, "{}: the field '{}' is required", where_, key);
    return there;
  }

  const Json& j_;
  std::string where_;
  std::vector<std::string> known_;
};

std::unique_ptr<RewardFunction> make_answer_match(Entry& e, const std::string& name) {
  AnswerMatchOptions o;
  o.name = name;
  o.column = e.string("column", o.column);
  const std::string mode = e.choice("mode", {"exact", "normalized", "numeric"}, "exact");
  o.mode = mode == "exact"        ? AnswerMode::exact
           : mode == "normalized" ? AnswerMode::normalized
                                  : AnswerMode::numeric;
  if (e.has("answer_pattern")) o.answer_pattern = e.string("answer_pattern", "");
  o.correct_reward = e.finite("correct_reward", o.correct_reward);
  o.incorrect_reward = e.finite("incorrect_reward", o.incorrect_reward);
  e.reject_unknown();
  return std::make_unique<AnswerMatchReward>(std::move(o));
}

std::unique_ptr<RewardFunction> make_regex(Entry& e, const std::string& name) {
  RegexRewardOptions o;
  o.name = name;
  o.pattern = e.string("pattern", "", /*required=*/true);
  const std::string match = e.choice("match", {"search", "start", "full"}, "search");
  o.match = match == "search"  ? RegexMatch::search
            : match == "start" ? RegexMatch::start
                               : RegexMatch::full;
  o.flags.dotall = e.boolean("dotall", false);
  o.flags.multiline = e.boolean("multiline", false);
  o.flags.ignore_case = e.boolean("ignore_case", false);
  o.match_reward = e.finite("match_reward", o.match_reward);
  o.no_match_reward = e.finite("no_match_reward", o.no_match_reward);
  e.reject_unknown();
  return std::make_unique<RegexReward>(std::move(o));
}

std::unique_ptr<RewardFunction> make_length_penalty(Entry& e, const std::string& name) {
  LengthPenaltyOptions o;
  o.name = name;
  const std::string mode = e.choice("mode", {"soft_overlong", "linear"}, "soft_overlong");
  if (mode == "soft_overlong") {
    o.mode = LengthPenaltyMode::soft_overlong;
    o.max_length = e.integer("max_length", 0, /*required=*/true);
    o.cache_length = e.integer("cache_length", 0, /*required=*/true);
  } else {
    o.mode = LengthPenaltyMode::linear;
    o.target_length = e.integer("target_length", 0, /*required=*/true);
    o.per_token = e.finite("per_token", 0.0, /*required=*/true);
    o.max_penalty = e.number("max_penalty", o.max_penalty);
  }
  e.reject_unknown();
  return std::make_unique<LengthPenaltyReward>(std::move(o));
}

std::unique_ptr<RewardFunction> make_process(Entry& e, const std::string& name) {
  RewardProcessOptions o;
  o.name = name;
  o.command = e.string("reward_process", "", /*required=*/true);
  CHECK(!o.command.empty(), "{}: 'reward_process' must be a non-empty command line", e.where());
  o.timeout_s = e.finite("timeout_s", o.timeout_s);
  CHECK(o.timeout_s > 0, "{}: 'timeout_s' must be > 0, got {}", e.where(), o.timeout_s);
  CHECK(o.timeout_s <= kMaxRewardTimeoutS, "{}: 'timeout_s' must be <= {}, got {}", e.where(),
        kMaxRewardTimeoutS, o.timeout_s);
  e.reject_unknown();
  return std::make_unique<RewardProcess>(std::move(o));
}

std::unique_ptr<RewardFunction> make_reward_model(Entry& e, const std::string& name) {
  RewardModelOptions o;
  o.name = name;
  o.model = e.string("model", "", /*required=*/true);
  CHECK(!o.model.empty(), "{}: 'model' must name a model directory", e.where());
  o.adapter = e.string("adapter", "");
  const std::string fp8 = e.choice("fp8", {"auto", "off", "tensor", "row", "block"}, "auto");
  if (fp8 != "auto") o.fp8 = parse_scheme(fp8);
  o.max_batch_tokens = e.integer("max_batch_tokens", o.max_batch_tokens);
  CHECK(o.max_batch_tokens >= 1 && o.max_batch_tokens <= kMaxRewardBatchTokens,
        "{}: 'max_batch_tokens' must be in [1, {}], got {}", e.where(), kMaxRewardBatchTokens,
        o.max_batch_tokens);
  e.reject_unknown();
  try {
    return std::make_unique<RewardModelReward>(std::move(o));
  } catch (const Error& err) {
    RAISE("{}: {}", e.where(), err.what());
  }
}

}  // namespace

RewardSet make_reward_set(const Json& spec) {
  CHECK(spec.is_array(), "rewards: expected a list of reward entries, got {}", json_excerpt(spec));
  CHECK(!spec.empty(), "rewards: the list of rewards is empty");
  RewardSet set;
  for (size_t i = 0; i < spec.size(); ++i) {
    const Json& j = spec[i];
    CHECK(j.is_object(), "rewards[{}]: expected an object such as {{type: answer_match}}, got {}",
          i, json_excerpt(j));
    const bool process = j.contains("reward_process");
    std::string type = "reward_process";
    if (!process || j.contains("type")) {
      CHECK(j.contains("type") && j.at("type").is_string(),
            "rewards[{}]: every entry needs a 'type' (answer_match, regex, length_penalty, "
            "reward_model) or is "
            "{{reward_process: COMMAND}}; got {}",
            i, json_excerpt(j));
      type = j.at("type").get<std::string>();
    }
    Entry e(j, fmt::format("rewards[{}] ({})", i, type));
    e.has("type");
    const std::string name = e.string("name", type);
    CHECK(!name.empty(), "{}: 'name' must not be empty", e.where());
    const double weight = e.finite("weight", 1.0);
    std::unique_ptr<RewardFunction> f;
    if (type == "answer_match") {
      f = make_answer_match(e, name);
    } else if (type == "regex") {
      f = make_regex(e, name);
    } else if (type == "length_penalty") {
      f = make_length_penalty(e, name);
    } else if (type == "reward_process") {
      f = make_process(e, name);
    } else if (type == "reward_model") {
      f = make_reward_model(e, name);
    } else {
      RAISE(
          "rewards[{}]: unknown type '{}' (types: answer_match, regex, length_penalty, "
          "reward_model; or an "
          "entry {{reward_process: COMMAND}})",
          i, type);
    }
    set.add(std::move(f), weight);
  }
  return set;
}

RewardSet make_reward_process_set(const std::string& command, double timeout_s) {
  RewardProcessOptions o;
  o.command = command;
  o.timeout_s = timeout_s;
  RewardSet set;
  set.add(std::make_unique<RewardProcess>(std::move(o)));
  return set;
}

}  // namespace fp8rl
