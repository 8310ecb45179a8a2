#include "rl/rollout_batch.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

namespace {

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

}  // namespace

RewardBatch reward_batch(const std::vector<PromptExample>& data, const std::vector<size_t>& prompts,
                         const std::vector<RequestOutput>& outs, const tok::Tokenizer* tokenizer,
                         std::vector<uint8_t>& truncated, const std::string& command) {
  RewardBatch batch;
  batch.columns = nlohmann::json::object();
  // The dataset is all chat or all text (read_prompt_dataset): conversational rows give the
  // functions their message lists, as TRL's is_conversational does.
  const bool conversational = !data[prompts[0]].messages.is_null();
  if (conversational) batch.prompt_messages = nlohmann::json::array();
  for (size_t i = 0; i < prompts.size(); ++i)
    for (const CompletionOutput& c : outs[i].completions) {
      truncated.push_back(c.finish == FinishReason::length);
      batch.prompts.push_back(data[prompts[i]].text);
      if (conversational) batch.prompt_messages.push_back(data[prompts[i]].messages);
      batch.completions.push_back(
          tokenizer != nullptr ? tokenizer->decode(c.ids, /*skip_special=*/true) : std::string());
      batch.completion_ids.push_back(c.ids);
      for (const auto& [key, value] : data[prompts[i]].columns.items())
        batch.columns[key].push_back(value);
    }
  // Columns some rows lack: null for those rows, so every column has one value per sample.
  for (auto& [key, col] : batch.columns.items())
    CHECK(col.size() == batch.completions.size(), "{}: dataset column '{}' is missing in some rows",
          command, key);
  return batch;
}

void completion_metrics(const std::vector<std::vector<int32_t>>& ids,
                        const std::vector<uint8_t>& truncated, nlohmann::json& m,
                        const std::vector<std::vector<uint8_t>>& sampled) {
  std::vector<double> lens, term;
  int64_t clipped = 0;
  for (size_t c = 0; c < ids.size(); ++c) {
    const double len = sampled.empty()
                           ? double(ids[c].size())
                           : double(std::accumulate(sampled[c].begin(), sampled[c].end(), 0));
    lens.push_back(len);
    if (truncated[c])
      ++clipped;
    else
      term.push_back(len);
  }
  m["completions/mean_length"] = mean_of(lens);
  m["completions/min_length"] = *std::min_element(lens.begin(), lens.end());
  m["completions/max_length"] = *std::max_element(lens.begin(), lens.end());
  m["completions/clipped_ratio"] = double(clipped) / double(ids.size());
  m["completions/mean_terminated_length"] = mean_of(term);
}

}  // namespace fp8rl
