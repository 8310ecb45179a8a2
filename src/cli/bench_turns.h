// bench grpo --turns T: what multi-turn rollouts cost against single-turn ones of the same
// tokens. An in-process synthetic environment: every episode (P prompts x G samples) takes T
// turns of C / T sampled tokens each (no stop), and after each turn but the last the environment
// appends M fixed tokens (a user message of M tokens), as GRPO's episodes run
// (rl/episode_rollout.h): each turn one generate() over the live episodes, each request the
// episode's whole sequence so far, the prefix cache holding the earlier turns. The single-turn
// rollout samples C + (T - 1) x M tokens per completion (n = G per prompt, as GRPO's rounds),
// so both hold the same completion + environment tokens.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace fp8rl::cli {

class BenchModel;

struct TurnsBenchOptions {
  int64_t prompts = 1, generations = 8, prompt_tokens = 128;
  int64_t completion_tokens = 512;  // the model's tokens of an episode, over its turns
  int64_t turns = 2;
  int64_t env_tokens = 32;  // appended after each turn but the last
  int64_t steps = 3;        // rollouts of each kind; the first is a warm-up when steps > 1
  double kv_memory_gib = 0;
  std::string kv_dtype = "bf16";
  uint64_t seed = 0;
};

// Runs both rollouts `steps` times on the bench's model and fresh adapter; the JSON keys are
// multi_turn/..., single_turn/... and multi_turn_over_single_turn (rollout seconds' ratio).
nlohmann::json bench_turns(BenchModel& bench, const TurnsBenchOptions& o);

}  // namespace fp8rl::cli
