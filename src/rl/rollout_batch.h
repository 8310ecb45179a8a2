// What the online trainers (grpo, ppo) build from a round of the engine's completions: the
// reward functions' batch, with the dataset's columns, and TRL's completion-length metrics.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "rl/prompt_data.h"
#include "rl/reward.h"

namespace fp8rl {

namespace tok {
class Tokenizer;
}

// The reward functions' batch of the completions `outs` (outs[i]: those of data[prompts[i]]),
// in order, with the dataset's columns; truncated[c] (appended): completion c was cut at
// max_tokens. The tokenizer decodes the completions (null: text ""). `command` names the
// trainer in errors.
RewardBatch reward_batch(const std::vector<PromptExample>& data, const std::vector<size_t>& prompts,
                         const std::vector<RequestOutput>& outs, const tok::Tokenizer* tokenizer,
                         std::vector<uint8_t>& truncated, const std::string& command);

// TRL's completion-length metrics of a batch into m: completions/mean_length, min_length,
// max_length, clipped_ratio, mean_terminated_length. Multi-turn episodes count the model's
// tokens only (`sampled`, TRL's tool_mask), when given.
void completion_metrics(const std::vector<std::vector<int32_t>>& ids,
                        const std::vector<uint8_t>& truncated, nlohmann::json& m,
                        const std::vector<std::vector<uint8_t>>& sampled = {});

}  // namespace fp8rl
