// The pairs of a reward-model run, TRL's RewardTrainer format: JSONL rows with `chosen` and
// `rejected` (strings or message lists), an optional `prompt` (explicit or, for message lists,
// implicit: rl/preference_data.h reads those), and an optional numeric `margin`. A sequence is
// the whole prompt + completion as the policy-side reader tokenizes it (a string completion
// ends with EOS, as TRL adds it); a row of two strings without a prompt is each string + EOS.
// Every problem is an fp8rl::Error "DATASET:LINE: what is wrong".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rl/preference_data.h"

namespace fp8rl {

struct RewardPair {
  std::vector<int32_t> chosen, rejected;  // full token sequences
  std::optional<double> margin;
  int64_t line = 0;
};

// The options' max_length bounds each whole sequence (max_prompt_length is not used).
std::vector<RewardPair> read_reward_dataset(const std::string& path,
                                            const tok::Tokenizer& tokenizer,
                                            const ChatTemplateConfig* chat,
                                            const PreferenceDataOptions& options);

}  // namespace fp8rl
