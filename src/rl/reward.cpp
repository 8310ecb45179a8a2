#include "rl/reward.h"

#include <algorithm>

#include "core/check.h"

namespace fp8rl {

RewardFunction::~RewardFunction() = default;

namespace {

std::string column_names(const nlohmann::json& columns) {
  if (!columns.is_object() || columns.empty()) return "none";
  std::string out;
  for (auto it = columns.begin(); it != columns.end(); ++it) {
    if (!out.empty()) out += ", ";
    out += it.key();
  }
  return out;
}

}  // namespace

const std::vector<std::string>& RewardBatch::reserved_names() {
  static const std::vector<std::string> names = {
      "prompts",         "completions",         "completion_ids",
      "prompt_messages", "completion_messages", "trainer_state"};
  return names;
}

void RewardBatch::validate() const {
  const size_t b = completions.size();
  CHECK(prompts.size() == b && completion_ids.size() == b,
        "reward batch: {} prompts, {} completions and {} completion_ids; they must be equal",
        prompts.size(), b, completion_ids.size());
  CHECK(prompt_messages.is_null() || (prompt_messages.is_array() && prompt_messages.size() == b),
        "reward batch: prompt_messages must be null or an array of {} message lists, got {}", b,
        prompt_messages.is_array() ? fmt::format("{} entries", prompt_messages.size())
                                   : prompt_messages.type_name());
  CHECK(completion_messages.is_null() ||
            (completion_messages.is_array() && completion_messages.size() == b),
        "reward batch: completion_messages must be null or an array of {} message lists, got {}", b,
        completion_messages.is_array() ? fmt::format("{} entries", completion_messages.size())
                                       : completion_messages.type_name());
  CHECK(trainer_state.is_null() || trainer_state.is_object(),
        "reward batch: trainer_state must be null or an object, got a {}",
        trainer_state.type_name());
  CHECK(columns.is_null() || columns.is_object(),
        "reward batch: the columns must be a JSON object of arrays, got a {}", columns.type_name());
  if (columns.is_null()) return;
  const std::vector<std::string>& reserved = reserved_names();
  for (auto it = columns.begin(); it != columns.end(); ++it) {
    CHECK(std::find(reserved.begin(), reserved.end(), it.key()) == reserved.end(),
          "reward batch: a dataset column may not be named '{}' (the reward protocol uses that "
          "name)",
          it.key());
    CHECK(it->is_array() && it->size() == b,
          "reward batch: column '{}' must be an array of {} values (one per completion), got {}",
          it.key(), b, it->is_array() ? fmt::format("{} values", it->size()) : it->type_name());
  }
}

const nlohmann::json& RewardBatch::column(const std::string& name, const std::string& who) const {
  const bool present = columns.is_object() && columns.contains(name);
  CHECK(present, "{}: the batch has no column '{}' (columns: {})", who, name,
        column_names(columns));
  const nlohmann::json& c = columns.at(name);
  CHECK(c.is_array() && int64_t(c.size()) == size(),
        "{}: column '{}' must be an array of {} values", who, name, size());
  return c;
}

}  // namespace fp8rl
