// The key tables of fp8rl's run configs: every key by TRL's name (and PEFT's / TRL
// ModelConfig's for LoRA), its aliases (--lr, --steps, --epochs, --batch-size, --grad-accum,
// --lora-r, --lora-alpha, --target-modules, --resume, ...) and help.
#pragma once

#include "cli/run_config.h"
#include "rl/dpo_config.h"
#include "rl/grpo_config.h"
#include "rl/kto_config.h"
#include "rl/online_dpo_config.h"
#include "rl/ppo_config.h"
#include "rl/reward_trainer_config.h"
#include "rl/rloo_config.h"
#include "train/sft_config.h"

namespace fp8rl::cli {

KeyTable<SftConfig> sft_keys();
KeyTable<GrpoConfig> grpo_keys();
KeyTable<RlooConfig> rloo_keys();
KeyTable<OnlineDpoConfig> online_dpo_keys();
KeyTable<DpoConfig> dpo_keys();
KeyTable<KtoConfig> kto_keys();
KeyTable<RewardConfig> reward_keys();
KeyTable<PpoConfig> ppo_keys();

}  // namespace fp8rl::cli
