#include "rl/grpo_config.h"

#include <cmath>

#include "core/check.h"
#include "train/config_checks.h"

namespace fp8rl {

void GrpoConfig::validate() const {
  namespace c = config_checks;
  TrainingArguments::validate();
  ModelArguments::validate();

  c::at_least<int64_t>("num_generations", num_generations, 2);
  if (generation_batch_size)
    c::at_least<int64_t>("generation_batch_size", *generation_batch_size, 1);
  if (steps_per_generation) c::at_least<int64_t>("steps_per_generation", *steps_per_generation, 1);
  c::at_least<int64_t>("num_iterations", num_iterations, 1);
  if (max_prompt_length) c::at_least<int64_t>("max_prompt_length", *max_prompt_length, 1);
  c::at_least<int64_t>("max_completion_length", max_completion_length, 1);
  c::positive("temperature", temperature);
  c::in_left_open("top_p", top_p, 0.0, 1.0);
  c::at_least<int64_t>("top_k", top_k, 0);
  if (min_p) c::in_closed("min_p", *min_p, 0.0, 1.0);
  c::positive("repetition_penalty", repetition_penalty);

  c::at_least("beta", beta, 0.0);
  // 1 - epsilon is the lower clip bound of the ratio, so epsilon < 1 keeps it positive.
  c::in_open("epsilon", epsilon, 0.0, 1.0);
  if (epsilon_high) c::positive("epsilon_high", *epsilon_high);
  for (double w : reward_weights)
    CHECK(std::isfinite(w), "reward_weights holds {}, not a finite number", w);

  CHECK(rewards.is_array(), "rewards must be a list of reward specs, got {}", rewards.dump());
  CHECK(num_reward_functions() >= 1,
        "no reward: give `rewards` (a list of reward specs) or `reward_process` (a command)");
  CHECK(reward_weights.empty() || int64_t(reward_weights.size()) == num_reward_functions(),
        "reward_weights has {} values, but there are {} reward functions{}", reward_weights.size(),
        num_reward_functions(),
        reward_process.empty() ? "" : " (reward_process replaces `rewards` with one)");

  // A ratio cap below 1 would cut or mask samples the engine and trainer agree on exactly.
  c::at_least("vllm_importance_sampling_cap", vllm_importance_sampling_cap, 1.0);

  c::at_least("kv_memory", kv_memory, 0.0);
  CHECK(kv_dtype == "bf16" || kv_dtype == "fp8", "kv_dtype = '{}' is not one of bf16, fp8",
        kv_dtype);
  c::at_least<int64_t>("max_num_seqs", max_num_seqs, 1);
  c::at_least<int64_t>("max_num_batched_tokens", max_num_batched_tokens, 1);
  if (gpu_memory_utilization) {
    c::in_left_open("gpu_memory_utilization", *gpu_memory_utilization, 0.0, 1.0);
    CHECK(kv_memory == 0,
          "gpu_memory_utilization = {} and kv_memory = {} GiB both size the KV "
          "pool: give one",
          *gpu_memory_utilization, kv_memory);
  }
  if (max_seq_length) {
    const int64_t prompt = max_prompt_length.value_or(0);
    CHECK(prompt + max_completion_length <= *max_seq_length,
          "max_prompt_length ({}) + max_completion_length ({}) exceed max_seq_length ({})",
          max_prompt_length ? std::to_string(prompt) : std::string("null"), max_completion_length,
          *max_seq_length);
  }
  if (num_completions_to_print)
    c::at_least<int64_t>("num_completions_to_print", *num_completions_to_print, 0);

  // TRL's batch relations, in __post_init__'s order and with its messages.
  CHECK(!(generation_batch_size && steps_per_generation),
        "generation_batch_size ({}) and steps_per_generation ({}) can not both be set",
        *generation_batch_size, *steps_per_generation);
  if (generation_batch_size)
    CHECK(*generation_batch_size % per_device_train_batch_size == 0,
          "generation_batch_size ({}) must be divisible by the global batch size "
          "per_device_train_batch_size ({})",
          *generation_batch_size, per_device_train_batch_size);
  const int64_t gbs = resolved_generation_batch_size();
  CHECK(gbs % num_generations == 0,
        "generation_batch_size ({}{}) must be divisible by num_generations ({}): a generation "
        "round holds whole groups",
        gbs, generation_batch_size ? "" : " = per_device_train_batch_size * steps_per_generation",
        num_generations);
}

int64_t GrpoConfig::resolved_steps_per_generation() const {
  if (steps_per_generation) return *steps_per_generation;
  if (generation_batch_size) return *generation_batch_size / per_device_train_batch_size;
  return gradient_accumulation_steps;
}

int64_t GrpoConfig::resolved_generation_batch_size() const {
  if (generation_batch_size) return *generation_batch_size;
  return per_device_train_batch_size * resolved_steps_per_generation();
}

int64_t GrpoConfig::num_reward_functions() const {
  if (!reward_process.empty()) return 1;
  return rewards.is_array() ? int64_t(rewards.size()) : 0;
}

}  // namespace fp8rl
