// The rewards of a run from their configuration: a list of entries (the run config's YAML
// converted to JSON), each one reward function with an optional weight (default 1.0) and name
// (default its type, the metrics key rewards/<name>/mean):
//   {type: answer_match, column: answer, mode: exact|normalized|numeric, answer_pattern: RE,
//    correct_reward: 1.0, incorrect_reward: 0.0}
//   {type: regex, pattern: RE, match: search|start|full, dotall: false, multiline: false,
//    ignore_case: false, match_reward: 1.0, no_match_reward: 0.0}
//   {type: length_penalty, mode: soft_overlong, max_length: L_max, cache_length: L_cache}
//   {type: length_penalty, mode: linear, target_length: T, per_token: p, max_penalty: m}
//   {reward_process: COMMAND, timeout_s: 300}
//   {type: reward_model, model: DIR, adapter: DIR, fp8: auto|off|tensor|row|block,
//    max_batch_tokens: 4096}   (rl/reward_model.h; loaded by load_reward_models)
// Unknown types and fields, wrong value types and out-of-range values are fp8rl::Errors that
// name the entry (and the nearest valid field name).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "rl/reward_set.h"

namespace fp8rl {

// `spec`: a JSON array of entry objects. Reward processes start here.
RewardSet make_reward_set(const nlohmann::json& spec);

// One reward process replacing the configured rewards (the flag --reward-process COMMAND).
RewardSet make_reward_process_set(const std::string& command, double timeout_s = 300);

}  // namespace fp8rl
