#include "rl/ppo_config.h"

#include <cmath>

#include "core/check.h"
#include "train/config_checks.h"

namespace fp8rl {

void PpoConfig::validate() const {
  namespace c = config_checks;
  TrainingArguments::validate();
  ModelArguments::validate();
  c::at_least<int64_t>("num_ppo_epochs", num_ppo_epochs, 1);
  c::at_least<int64_t>("num_mini_batches", num_mini_batches, 1);
  if (total_episodes) c::at_least<int64_t>("total_episodes", *total_episodes, 1);
  c::at_least<int64_t>("local_rollout_forward_batch_size", local_rollout_forward_batch_size, 1);
  c::at_least<int64_t>("response_length", response_length, 1);
  CHECK(!stop_token || *stop_token == "eos",
        "stop_token = '{}' is not supported (must be 'eos' or null)", *stop_token);
  CHECK(!(stop_token && stop_token_id), "stop_token and stop_token_id are exclusive: set one");
  if (stop_token_id) c::at_least<int64_t>("stop_token_id", *stop_token_id, 0);
  c::positive("temperature", temperature);
  if (missing_eos_penalty) c::at_least("missing_eos_penalty", *missing_eos_penalty, 0.0);
  if (max_prompt_length) c::at_least<int64_t>("max_prompt_length", *max_prompt_length, 1);
  c::positive("cliprange", cliprange);
  c::positive("cliprange_value", cliprange_value);
  c::at_least("vf_coef", vf_coef, 0.0);
  c::in_closed("gamma", gamma, 0.0, 1.0);
  c::in_closed("lam", lam, 0.0, 1.0);
  c::at_least("kl_coef", kl_coef, 0.0);
  parse_kl_estimator(kl_estimator);
  for (const double w : reward_weights)
    CHECK(std::isfinite(w), "reward_weights: {} is not finite", w);
  CHECK(reward_weights.empty() || int64_t(reward_weights.size()) == num_reward_functions(),
        "reward_weights has {} values for {} reward functions", reward_weights.size(),
        num_reward_functions());
  CHECK(kv_memory >= 0, "kv_memory = {} is out of range (must be >= 0)", kv_memory);
  CHECK(kv_dtype == "bf16" || kv_dtype == "fp8", "kv_dtype = '{}' (must be bf16 or fp8)", kv_dtype);
  c::at_least<int64_t>("max_num_seqs", max_num_seqs, 1);
  c::at_least<int64_t>("max_num_batched_tokens", max_num_batched_tokens, 1);
  CHECK(batch_size() % num_mini_batches == 0,
        "num_mini_batches = {} must divide the batch (per_device_train_batch_size {} x "
        "gradient_accumulation_steps {} = {} prompts)",
        num_mini_batches, per_device_train_batch_size, gradient_accumulation_steps, batch_size());
  // TRL's assertion: whitening a mini-batch's rewards needs a few of them.
  CHECK(!whiten_rewards || mini_batch_size() >= 8,
        "whiten_rewards needs mini-batches of at least 8 prompts, got {} (batch {} / "
        "num_mini_batches {})",
        mini_batch_size(), batch_size(), num_mini_batches);
}

int64_t PpoConfig::total_updates(size_t rows) const {
  if (max_steps > 0) return max_steps;
  const int64_t episodes = total_episodes.value_or(int64_t(num_train_epochs * double(rows)));
  return std::max<int64_t>(1, (episodes + batch_size() - 1) / batch_size());
}

SamplingParams PpoConfig::sampling_params() const {
  SamplingParams s;
  s.temperature = temperature;
  s.max_tokens = int(response_length);
  s.processed_logprobs = true;
  // TRL sets the policy's generation_config.eos_token_id to the stop token (None without one):
  // without a stop token the response runs to response_length.
  if (!stop_token) s.ignore_eos = true;
  if (stop_token_id) s.stop_token_ids = {int32_t(*stop_token_id)};
  return s;
}

PpoAdvantageConfig PpoConfig::advantage_config() const {
  PpoAdvantageConfig a;
  a.kl_coef = kl_coef;
  a.kl_estimator = parse_kl_estimator(kl_estimator);
  a.whiten_rewards = whiten_rewards;
  a.gamma = gamma;
  a.lam = lam;
  return a;
}

int64_t PpoConfig::num_reward_functions() const {
  if (!reward_process.empty()) return 1;
  return rewards.is_array() ? int64_t(rewards.size()) : 0;
}

}  // namespace fp8rl
