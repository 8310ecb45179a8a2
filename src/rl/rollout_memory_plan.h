// Where a rollout trainer's (GRPO's, PPO's) step memory goes, planned when the trainer is made
// (--dry-run prints it): the engine's KV pool, the training passes over the longest
// micro-batch and the reward models' scoring of a round take turns in one standby region, the
// largest of them.
#pragma once

#include <algorithm>
#include <cstddef>

#include "rl/reward_model.h"
#include "train/logprob_pass.h"

namespace fp8rl {

class Engine;
class LoraAdapter;
class StandbyRegion;
class TrainStep;

struct RolloutMemoryPlan {
  PassPlan pass;               // the largest training pass (its dry run)
  size_t engine_kv_bytes = 0;  // the engine's KV pool
  size_t standby_region_bytes = 0;
  size_t optimizer_state_bytes = 0;
  size_t reference_adapter_bytes = 0;  // the frozen starting adapter (ReferenceModel::start)
  // The loaded reward models: their scoring of a round, a phase of the standby region, and
  // their own weights and adapters.
  RewardModelsPlan reward_models;

  // The scratch arena's peak: the pass's or the scoring's, which take turns.
  size_t scratch_bytes() const {
    return std::max(pass.scratch_bytes, reward_models.scoring.scratch_bytes);
  }
};

// The plan of a trainer made of these parts (`reference` null: none).
RolloutMemoryPlan rollout_memory_plan(const PassPlan& largest_pass, const Engine& engine,
                                      const StandbyRegion& region,
                                      const RewardModelsPlan& reward_models,
                                      const TrainStep& train_step, const LoraAdapter* reference);

}  // namespace fp8rl
