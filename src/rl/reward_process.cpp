#include "rl/reward_process.h"

#include <cmath>
#include <limits>

#include "core/check.h"
#include "formats/json_read.h"
#include "rl/child_process.h"

namespace fp8rl {

namespace {

using Json = nlohmann::json;

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

RewardProcess::RewardProcess(RewardProcessOptions options)
    : options_(std::move(options)),
      who_(fmt::format("reward process '{}' (`{}`)", options_.name, options_.command)) {
  CHECK(options_.timeout_s > 0 && std::isfinite(options_.timeout_s),
        "{}: timeout_s must be a positive number of seconds, got {}", who_, options_.timeout_s);
  child_ = std::make_unique<ChildProcess>(options_.command, who_);
}

RewardProcess::~RewardProcess() = default;

std::string RewardProcess::request_line(const RewardBatch& batch) {
  std::string line = "{\"prompts\":";
  line += dump(Json(batch.prompts));
  line += ",\"completions\":";
  line += dump(Json(batch.completions));
  line += ",\"completion_ids\":";
  line += dump(Json(batch.completion_ids));
  if (batch.columns.is_object()) {
    for (auto it = batch.columns.begin(); it != batch.columns.end(); ++it) {
      line += ',';
      line += dump(Json(it.key()));
      line += ':';
      line += dump(*it);
    }
  }
  line += "}\n";
  return line;
}

RewardValues RewardProcess::parse_reply(std::string_view line, int64_t expected,
                                        const std::string& who) {
  const std::string what = fmt::format("the answer of {}", who);
  Json reply;
  try {
    reply = parse_json_text(line, what);
  } catch (const Error& e) {
    RAISE("{}: not a JSON object {{\"rewards\": [...]}}: {} (the line: '{}')", who, e.what(),
          std::string(line.substr(0, 200)));
  }
  CHECK(reply.is_object() && reply.contains("rewards"),
        "{}: expected one line {{\"rewards\": [...]}}, got {}", who, json_excerpt(reply, 200));
  CHECK(reply.size() == 1, "{}: the answer may hold only the key 'rewards', got {}", who,
        json_excerpt(reply, 200));
  const Json& rewards = reply.at("rewards");
  CHECK(rewards.is_array(), "{}: 'rewards' must be an array, got {}", who,
        json_excerpt(rewards, 200));
  CHECK(int64_t(rewards.size()) == expected,
        "{}: answered {} rewards for a batch of {} completions", who, rewards.size(), expected);
  RewardValues out(rewards.size());
  for (size_t i = 0; i < rewards.size(); ++i) {
    const Json& r = rewards[i];
    if (r.is_null()) continue;
    if (r.is_number()) {
      out[i] = r.get<double>();
    } else if (r.is_string() && r.get<std::string>() == "NaN") {
      out[i] = std::numeric_limits<double>::quiet_NaN();
    } else if (r.is_string() && r.get<std::string>() == "Infinity") {
      out[i] = std::numeric_limits<double>::infinity();
    } else if (r.is_string() && r.get<std::string>() == "-Infinity") {
      out[i] = -std::numeric_limits<double>::infinity();
    } else {
      RAISE(
          "{}: rewards[{}] is {}; expected a number, null, \"NaN\", \"Infinity\" or "
          "\"-Infinity\"",
          who, i, json_excerpt(r, 80));
    }
  }
  return out;
}

RewardValues RewardProcess::score(const RewardBatch& batch) {
  batch.validate();
  const auto timeout = std::chrono::milliseconds(int64_t(std::ceil(options_.timeout_s * 1000.0)));
  const std::string line = child_->exchange(request_line(batch), timeout, options_.max_reply_bytes);
  try {
    return parse_reply(line, batch.size(), who_);
  } catch (const Error&) {
    // A process that answered wrongly once cannot be trusted to stay in step.
    child_->kill();
    throw;
  }
}

}  // namespace fp8rl
