#include "rl/environment_process.h"

#include <cmath>
#include <map>
#include <utility>

#include "core/check.h"
#include "formats/json_read.h"
#include "rl/child_process.h"
#include "rl/reward_process.h"

namespace fp8rl {

namespace {

using Json = nlohmann::json;

// The reply's "episodes" entries by position in `ids`: each id answered exactly once, and each
// entry an object holding only `allowed` keys; beside "episodes" the reply may hold `optional`
// (a top-level key). `kind` names the request ("reset", "step").
std::vector<const Json*> reply_entries(const Json& reply, const std::vector<std::string>& ids,
                                       const std::vector<std::string>& allowed,
                                       const char* optional, const char* kind,
                                       const std::string& who) {
  CHECK(reply.is_object() && reply.contains("episodes"),
        "{}: expected one line {{\"episodes\": [...]}} answering the {} request, got {}", who, kind,
        json_excerpt(reply, 200));
  for (auto it = reply.begin(); it != reply.end(); ++it)
    CHECK(it.key() == "episodes" || (*optional != '\0' && it.key() == optional),
          "{}: the answer to a {} request may hold only 'episodes'{}, got '{}'", who, kind,
          *optional != '\0' ? fmt::format(" and '{}'", optional) : "", it.key());
  const Json& episodes = reply.at("episodes");
  CHECK(episodes.is_array(), "{}: 'episodes' must be a list, got {}", who,
        json_excerpt(episodes, 200));
  CHECK(episodes.size() == ids.size(), "{}: answered {} episodes to a {} request of {}", who,
        episodes.size(), kind, ids.size());
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < ids.size(); ++i) position.emplace(ids[i], i);
  std::vector<const Json*> out(ids.size(), nullptr);
  for (size_t k = 0; k < episodes.size(); ++k) {
    const Json& e = episodes[k];
    CHECK(e.is_object(), "{}: episodes[{}] must be an object, got {}", who, k, json_excerpt(e));
    const auto id = e.find("id");
    CHECK(id != e.end() && id->is_string(), "{}: episodes[{}] has no string 'id': {}", who, k,
          json_excerpt(e, 200));
    const std::string& name = id->get_ref<const std::string&>();
    const auto at = position.find(name);
    CHECK(at != position.end(), "{}: episodes[{}] has id {}, which this {} request did not send",
          who, k, json_excerpt(*id), kind);
    CHECK(out[at->second] == nullptr, "{}: episode {} is answered twice", who, json_excerpt(*id));
    for (auto f = e.begin(); f != e.end(); ++f) {
      bool known = f.key() == "id";
      for (const std::string& a : allowed) known = known || f.key() == a;
      CHECK(known, "{}: episode {}: unknown key '{}' in the answer to a {} request (expected {})",
            who, json_excerpt(*id), f.key(), kind, fmt::join(allowed, ", "));
    }
    out[at->second] = &e;
  }
  return out;
}

Json parse_reply_json(std::string_view line, const char* kind, const std::string& who) {
  try {
    return parse_json_text(line, fmt::format("the answer of {}", who));
  } catch (const Error& e) {
    RAISE(
        "{}: the answer to a {} request is not a JSON object {{\"episodes\": [...]}}: {} (the "
        "line: '{}')",
        who, kind, e.what(), printable_excerpt(line));
  }
}

}  // namespace

void check_chat_messages(const Json& messages, const std::string& what) {
  CHECK(messages.is_array(), "{} must be a list of {{role, content}} messages, got {}", what,
        json_excerpt(messages));
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
          "{}[{}] must be a {{role, content}} object with a string role, got {}", what, i,
          json_excerpt(m));
    const auto c = m.find("content");
    CHECK(c != m.end() && (c->is_string() || c->is_array() || c->is_null()),
          "{}[{}] needs a 'content' (a string, a list or null), got {}", what, i, json_excerpt(m));
  }
}

EnvironmentProcess::EnvironmentProcess(EnvironmentOptions options)
    : options_(std::move(options)), who_(fmt::format("{} `{}`", options_.kind, options_.command)) {
  CHECK(!options_.command.empty(), "{}: the command is empty", options_.kind);
  CHECK(options_.timeout_s > 0 && options_.timeout_s <= kMaxRewardTimeoutS,
        "{}: environment_timeout_s must be a positive number of seconds up to {}, got {}", who_,
        kMaxRewardTimeoutS, options_.timeout_s);
  child_ = std::make_unique<ChildProcess>(options_.command, who_, options_.variables);
}

EnvironmentProcess::~EnvironmentProcess() = default;

std::string EnvironmentProcess::reset_line(const std::vector<EpisodeStart>& episodes) {
  Json list = Json::array();
  for (const EpisodeStart& e : episodes) list.push_back({{"id", e.id}, {"row", e.row}});
  return "{\"type\":\"reset\",\"episodes\":" + json_line(list) + "}\n";
}

std::string EnvironmentProcess::step_line(const std::vector<EpisodeTurn>& turns) {
  Json list = Json::array();
  for (const EpisodeTurn& t : turns)
    list.push_back({{"id", t.id}, {"completion", t.completion}, {"messages", t.messages}});
  return "{\"type\":\"step\",\"episodes\":" + json_line(list) + "}\n";
}

EnvironmentReset EnvironmentProcess::parse_reset_reply(std::string_view line,
                                                       const std::vector<std::string>& ids,
                                                       const std::string& who) {
  const Json reply = parse_reply_json(line, "reset", who);
  const std::vector<const Json*> entries =
      reply_entries(reply, ids, {"messages"}, "tools", "reset", who);
  EnvironmentReset out;
  if (reply.contains("tools") && !reply["tools"].is_null()) {
    const Json& tools = reply["tools"];
    CHECK(tools.is_array(), "{}: 'tools' must be a list of JSON schemas, got {}", who,
          json_excerpt(tools));
    for (size_t k = 0; k < tools.size(); ++k)
      CHECK(tools[k].is_object(), "{}: tools[{}] must be a JSON schema (an object), got {}", who, k,
            json_excerpt(tools[k]));
    if (!tools.empty()) out.tools = tools;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& e = *entries[i];
    if (!e.contains("messages") || e["messages"].is_null()) {
      out.openings.emplace_back(nullptr);
      continue;
    }
    const std::string what = fmt::format("{}: episode \"{}\": 'messages'", who, ids[i]);
    check_chat_messages(e["messages"], what);
    CHECK(!e["messages"].empty(), "{} is empty (leave it out to open with the row's prompt)", what);
    out.openings.push_back(e["messages"]);
  }
  return out;
}

EnvironmentStep EnvironmentProcess::parse_step_reply(std::string_view line,
                                                     const std::vector<std::string>& ids,
                                                     const std::string& who) {
  const Json reply = parse_reply_json(line, "step", who);
  const std::vector<const Json*> entries =
      reply_entries(reply, ids, {"messages", "reward", "done"}, "metrics", "step", who);
  EnvironmentStep step;
  if (reply.contains("metrics")) {
    const Json& metrics = reply["metrics"];
    CHECK(metrics.is_object(), "{}: 'metrics' must be an object {{name: number}}, got {}", who,
          json_excerpt(metrics));
    for (const auto& [name, value] : metrics.items()) {
      CHECK(value.is_number(), "{}: metric '{}' must be a number, got {}", who, name,
            json_excerpt(value));
      step.metrics[name] = value.get<double>();
    }
  }
  std::vector<EpisodeStepReply>& out = step.episodes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& e = *entries[i];
    for (const char* key : {"messages", "reward", "done"})
      CHECK(e.contains(key),
            "{}: episode \"{}\": the step answer has no '{}' (it needs "
            "'messages', 'reward' and 'done')",
            who, ids[i], key);
    EpisodeStepReply r;
    check_chat_messages(e["messages"], fmt::format("{}: episode \"{}\": 'messages'", who, ids[i]));
    r.messages = e["messages"];
    const Json& reward = e["reward"];
    CHECK(reward.is_null() || reward.is_number(),
          "{}: episode \"{}\": 'reward' must be a number or null, got {}", who, ids[i],
          json_excerpt(reward));
    if (reward.is_number()) r.reward = reward.get<double>();
    CHECK(e["done"].is_boolean(), "{}: episode \"{}\": 'done' must be true or false, got {}", who,
          ids[i], json_excerpt(e["done"]));
    r.done = e["done"].get<bool>();
    out.push_back(std::move(r));
  }
  return step;
}

std::vector<double> EnvironmentProcess::parse_rewards_reply(std::string_view line,
                                                            const std::vector<std::string>& ids,
                                                            const std::string& who) {
  const Json reply = parse_reply_json(line, "reset", who);
  const std::vector<const Json*> entries = reply_entries(reply, ids, {"reward"}, "", "reset", who);
  std::vector<double> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& e = *entries[i];
    CHECK(e.contains("reward") && e["reward"].is_number(),
          "{}: episode \"{}\": the answer needs a number 'reward', got {}", who, ids[i],
          e.contains("reward") ? json_excerpt(e["reward"]) : std::string("none"));
    out.push_back(e["reward"].get<double>());
  }
  return out;
}

std::string EnvironmentProcess::exchange(const std::string& line,
                                         const std::function<bool()>& waiting_on_us) {
  const auto timeout = std::chrono::milliseconds(int64_t(std::ceil(options_.timeout_s * 1000.0)));
  return child_->exchange(line, timeout, options_.max_reply_bytes, waiting_on_us);
}

std::vector<double> EnvironmentProcess::run_agents(const std::vector<EpisodeStart>& episodes,
                                                   const std::function<bool()>& waiting_on_us) {
  std::vector<std::string> ids;
  for (const EpisodeStart& e : episodes) ids.push_back(e.id);
  const std::string answer = exchange(reset_line(episodes), waiting_on_us);
  try {
    return parse_rewards_reply(answer, ids, who_);
  } catch (const Error&) {
    child_->kill();
    throw;
  }
}

EnvironmentReset EnvironmentProcess::reset(const std::vector<EpisodeStart>& episodes) {
  std::vector<std::string> ids;
  for (const EpisodeStart& e : episodes) ids.push_back(e.id);
  const std::string answer = exchange(reset_line(episodes));
  try {
    return parse_reset_reply(answer, ids, who_);
  } catch (const Error&) {
    child_->kill();  // an environment that answered wrongly once cannot be trusted to stay in step
    throw;
  }
}

EnvironmentStep EnvironmentProcess::step(const std::vector<EpisodeTurn>& turns) {
  std::vector<std::string> ids;
  for (const EpisodeTurn& t : turns) ids.push_back(t.id);
  const std::string answer = exchange(step_line(turns));
  try {
    return parse_step_reply(answer, ids, who_);
  } catch (const Error&) {
    child_->kill();
    throw;
  }
}

}  // namespace fp8rl
