// Multi-turn rollouts: every GRPO sample is an episode between the model and an environment
// (rl/environment_process.h). The live episodes' next turns are one engine generate() call and
// the environment hears about them in one step request; an episode ends when the environment
// says done, at max_turns, or when its completion budget (max_completion_length, the model's
// context) cannot hold another turn (truncated). Each turn's request is the episode's whole
// sequence so far: the engine's prefix cache holds the full blocks of the previous turn's KV,
// so only the environment's tokens and the tail of the last partial block are prefilled. When
// the reset gives tools, every render carries them and each turn's calls are parsed into its
// assistant message (rl/tool_turn.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace fp8rl {

namespace tok {
class Tokenizer;
}
class Engine;
class EnvironmentProcess;
class ConversationTokens;

struct EpisodeInput {
  std::string id;                   // unique in the run
  nlohmann::json row;               // the dataset row (every column), for the reset request
  std::vector<int32_t> prompt_ids;  // the row's prompt, the opening unless the reset gives one
  nlohmann::json prompt_messages;   // the row's messages (null: a text prompt)
  uint64_t seed = 0;                // the episode's sampling stream (each turn keyed from it)
};

struct EpisodeOptions {
  SamplingParams sampling;  // n and max_tokens are set per turn
  int64_t max_turns = 10;
  int64_t max_completion_length = 512;  // the episode's completion tokens, model's and env's
  int64_t max_prompt_length = 0;        // an opening the environment gives at most; 0: any
  int64_t max_context = 0;              // the model's
};

struct EpisodeResult {
  std::vector<int32_t> prompt_ids;  // the opening
  nlohmann::json opening;           // its messages (null: a text prompt)
  std::vector<int32_t> ids;         // [n] every later token: model turns and environment tokens
  std::vector<float> logp;          // [n] the engine's processed logprobs (0 for env tokens)
  std::vector<uint8_t> sampled;     // [n] 1: the model's token, 0: the environment's
  nlohmann::json messages;          // the conversation after the opening (null: text prompt)
  std::string last_completion;      // the last turn's text
  std::vector<int32_t> last_ids;    // the last turn's ids
  std::optional<double> reward;     // the sum of the non-null step rewards; null if none
  int64_t turns = 0;
  bool truncated = false;           // ended because the budget could not hold the next turn
  int64_t rerender_mismatches = 0;  // turns whose re-render did not reproduce the tokens
};

struct EpisodeStats {
  double environment_seconds = 0;
  int64_t engine_calls = 0;
  int64_t prefill_tokens = 0, prefix_hit_tokens = 0;  // the engine's, over the episodes
  // The step answers' "metrics": each name's sum and number of answers that gave it.
  std::map<std::string, std::pair<double, int64_t>> environment_metrics;
};

// Runs `inputs` to their end. `chat` may be null for text prompts (a text episode then cannot
// take environment messages: an error). `tokenizer` decodes each turn for the environment.
std::vector<EpisodeResult> run_episodes(Engine& engine, EnvironmentProcess& env,
                                        const ConversationTokens* chat,
                                        const tok::Tokenizer& tokenizer,
                                        const std::vector<EpisodeInput>& inputs,
                                        const EpisodeOptions& options, EpisodeStats& stats);

}  // namespace fp8rl
