#include "rl/rollout_memory_plan.h"

#include "engine/engine.h"
#include "model/adapter.h"
#include "ops/standby_region.h"
#include "train/train_step.h"

namespace fp8rl {

RolloutMemoryPlan rollout_memory_plan(const PassPlan& largest_pass, const Engine& engine,
                                      const StandbyRegion& region,
                                      const RewardModelsPlan& reward_models,
                                      const TrainStep& train_step, const LoraAdapter* reference) {
  RolloutMemoryPlan p;
  p.pass = largest_pass;
  p.engine_kv_bytes = engine.stats().kv_bytes;
  p.standby_region_bytes = region.size();
  p.reward_models = reward_models;
  p.optimizer_state_bytes = train_step.optimizer().state_bytes();
  if (reference != nullptr) p.reference_adapter_bytes = reference->nbytes();
  return p;
}

}  // namespace fp8rl
