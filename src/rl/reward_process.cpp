#include "rl/reward_process.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "core/check.h"
#include "formats/json_read.h"
#include "rl/child_process.h"

namespace fp8rl {

namespace {

using Json = nlohmann::json;

// A number or one of the strings JSON lacks numbers for; nullopt for anything else.
std::optional<double> protocol_number(const Json& r) {
  if (r.is_number()) return r.get<double>();
  if (!r.is_string()) return std::nullopt;
  const std::string& s = r.get_ref<const std::string&>();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

// The reply's optional "metrics" and "extra" (TRL's log_metric and log_extra).
RewardLogs parse_logs(const Json& reply, int64_t expected, const std::string& who) {
  RewardLogs logs;
  if (reply.contains("metrics")) {
    const Json& m = reply.at("metrics");
    CHECK(m.is_object(), "{}: 'metrics' must be an object {{name: value}}, got {}", who,
          json_excerpt(m, 200));
    for (auto it = m.begin(); it != m.end(); ++it) {
      CHECK(!it.key().empty(), "{}: a metric has an empty name", who);
      std::vector<double> values;
      const Json items = it->is_array() ? *it : Json::array({*it});
      for (const Json& v : items) {
        const std::optional<double> x = protocol_number(v);
        CHECK(x.has_value(),
              "{}: metric '{}' must be a number (or \"NaN\", \"Infinity\", \"-Infinity\") or "
              "a list of them, got {}",
              who, it.key(), json_excerpt(*it, 80));
        values.push_back(*x);
      }
      if (!values.empty()) logs.metrics.emplace_back(it.key(), std::move(values));
    }
  }
  if (reply.contains("extra")) {
    const Json& e = reply.at("extra");
    CHECK(e.is_object(),
          "{}: 'extra' must be an object {{column: [one value per completion]}}, got {}", who,
          json_excerpt(e, 200));
    for (auto it = e.begin(); it != e.end(); ++it) {
      CHECK(!it.key().empty(), "{}: an extra column has an empty name", who);
      CHECK(it->is_array() && int64_t(it->size()) == expected,
            "{}: extra column '{}' must be a list of {} values (one per completion), got {}", who,
            it.key(), expected,
            it->is_array() ? fmt::format("{} values", it->size()) : json_excerpt(*it, 80));
    }
    logs.extra = e;
  }
  return logs;
}

}  // namespace

RewardProcess::RewardProcess(RewardProcessOptions options)
    : options_(std::move(options)),
      who_(fmt::format("reward process '{}' (`{}`)", options_.name, options_.command)) {
  CHECK(options_.timeout_s > 0 && options_.timeout_s <= kMaxRewardTimeoutS,
        "{}: timeout_s must be a positive number of seconds up to {}, got {}", who_,
        kMaxRewardTimeoutS, options_.timeout_s);
  child_ = std::make_unique<ChildProcess>(options_.command, who_);
}

RewardProcess::~RewardProcess() = default;

std::string RewardProcess::request_line(const RewardBatch& batch) {
  std::string line = "{\"prompts\":";
  line += json_line(Json(batch.prompts));
  line += ",\"completions\":";
  line += json_line(Json(batch.completions));
  line += ",\"completion_ids\":";
  line += json_line(Json(batch.completion_ids));
  if (batch.columns.is_object()) {
    for (auto it = batch.columns.begin(); it != batch.columns.end(); ++it) {
      line += ',';
      line += json_line(Json(it.key()));
      line += ':';
      line += json_line(*it);
    }
  }
  // Only when set, so a text batch outside a run is the line it always was.
  if (!batch.prompt_messages.is_null()) {
    line += ",\"prompt_messages\":";
    line += json_line(batch.prompt_messages);
  }
  if (!batch.completion_messages.is_null()) {
    line += ",\"completion_messages\":";
    line += json_line(batch.completion_messages);
  }
  if (!batch.trainer_state.is_null()) {
    line += ",\"trainer_state\":";
    line += json_line(batch.trainer_state);
  }
  line += "}\n";
  return line;
}

RewardReply RewardProcess::parse_reply(std::string_view line, int64_t expected,
                                       const std::string& who) {
  const std::string what = fmt::format("the answer of {}", who);
  Json reply;
  try {
    reply = parse_json_text(line, what);
  } catch (const Error& e) {
    RAISE("{}: not a JSON object {{\"rewards\": [...]}}: {} (the line: '{}')", who, e.what(),
          printable_excerpt(line));
  }
  CHECK(reply.is_object() && reply.contains("rewards"),
        "{}: expected one line {{\"rewards\": [...]}}, got {}", who, json_excerpt(reply, 200));
  for (auto it = reply.begin(); it != reply.end(); ++it)
    CHECK(it.key() == "rewards" || it.key() == "metrics" || it.key() == "extra",
          "{}: the answer may hold only the keys 'rewards', 'metrics' and 'extra', got '{}' in {}",
          who, it.key(), json_excerpt(reply, 200));
  const Json& rewards = reply.at("rewards");
  CHECK(rewards.is_array(), "{}: 'rewards' must be an array, got {}", who,
        json_excerpt(rewards, 200));
  CHECK(int64_t(rewards.size()) == expected,
        "{}: answered {} rewards for a batch of {} completions", who, rewards.size(), expected);
  RewardReply out;
  out.rewards.resize(rewards.size());
  for (size_t i = 0; i < rewards.size(); ++i) {
    const Json& r = rewards[i];
    if (r.is_null()) continue;
    out.rewards[i] = protocol_number(r);
    CHECK(out.rewards[i].has_value(),
          "{}: rewards[{}] is {}; expected a number, null, \"NaN\", \"Infinity\" or "
          "\"-Infinity\"",
          who, i, json_excerpt(r, 80));
  }
  out.logs = parse_logs(reply, expected, who);
  return out;
}

RewardValues RewardProcess::score(const RewardBatch& batch) {
  logs_ = RewardLogs{};
  batch.validate();
  const auto timeout = std::chrono::milliseconds(int64_t(std::ceil(options_.timeout_s * 1000.0)));
  const std::string line = child_->exchange(request_line(batch), timeout, options_.max_reply_bytes);
  try {
    RewardReply reply = parse_reply(line, batch.size(), who_);
    logs_ = std::move(reply.logs);
    return std::move(reply.rewards);
  } catch (const Error&) {
    // A process that answered wrongly once cannot be trusted to stay in step.
    child_->kill();
    throw;
  }
}

RewardLogs RewardProcess::take_logs() {
  return std::exchange(logs_, RewardLogs{});
}

}  // namespace fp8rl
