#include "rl/reward.h"

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

void RewardBatch::validate() const {
  const size_t b = completions.size();
  CHECK(prompts.size() == b && completion_ids.size() == b,
        "reward batch: {} prompts, {} completions and {} completion_ids; they must be equal",
        prompts.size(), b, completion_ids.size());
  CHECK(columns.is_null() || columns.is_object(),
        "reward batch: the columns must be a JSON object of arrays, got a {}", columns.type_name());
  if (columns.is_null()) return;
  for (auto it = columns.begin(); it != columns.end(); ++it) {
    CHECK(it.key() != "prompts" && it.key() != "completions" && it.key() != "completion_ids",
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
