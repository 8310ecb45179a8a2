// `fp8rl ppo`'s configuration: TRL's PPOConfig keys (trl/experimental/ppo/ppo_config.py) with
// TRL's meanings and defaults, on top of the shared TrainingArguments and model/LoRA keys, plus
// the generation engine's keys, the rewards and the value model's starting adapter. A comment
// marks each deviation from TRL.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "rl/ppo_loss.h"
#include "rl/reference_model.h"
#include "train/model_arguments.h"
#include "train/training_arguments.h"

namespace fp8rl {

struct PpoConfig : TrainingArguments, ModelArguments {
  PpoConfig() { learning_rate = 3e-6; }  // PPOConfig's override of transformers' 5e-5

  // Rollout. One update samples one response for each of batch_size() prompts.
  int64_t num_ppo_epochs = 4;    // passes over each rollout batch
  int64_t num_mini_batches = 1;  // optimizer steps per pass (batch_size() / this prompts each)
  // Episodes (prompts) to train on; null: num_train_epochs x the dataset's rows. max_steps > 0
  // (updates) overrides it.
  std::optional<int64_t> total_episodes;
  // Responses per chunk of the rollout's logprob and value passes.
  int64_t local_rollout_forward_batch_size = 64;
  int64_t response_length = 53;  // new tokens at most
  // "eos": generation stops at (and the response keeps) the tokenizer's EOS; stop_token_id: at
  // that id. Neither (TRL's default): every response runs response_length tokens, EOS or not.
  std::optional<std::string> stop_token;
  std::optional<int64_t> stop_token_id;
  double temperature = 0.7;
  // Subtracted from the score of a response without an EOS token; null: none.
  std::optional<double> missing_eos_penalty;
  std::optional<int64_t> max_prompt_length;  // fp8rl's: a longer prompt is an error (null: none)
  bool truncation = false;                   // cut prompts over max_prompt_length instead

  // The loss and the rollout's arithmetic (rl/ppo_loss.h).
  double cliprange = 0.2;
  double cliprange_value = 0.2;
  double vf_coef = 0.1;
  double gamma = 1.0;
  double lam = 0.95;
  double kl_coef = 0.05;
  std::string kl_estimator = "k1";  // "k1" | "k3"
  bool whiten_rewards = false;
  // TRL's reference for a PEFT policy is the model with the adapter disabled; fp8rl's default
  // is its start (the same for a fresh adapter), as GRPO's.
  ReferenceModel reference_model = ReferenceModel::start;

  // The value model: a SEQ_CLS adapter (LoRA + a one-label score head) over the policy's base,
  // of the policy adapter's rank and targets. value_adapter: a reward model's adapter directory
  // (fp8rl reward's output) to start from, as TRL starts the value model from the reward model;
  // empty: a fresh adapter (B = 0, the head normal with std initializer_range).
  std::string value_adapter;

  // Rewards, as GRPO's: `rewards` specs (built-ins, reward_model, reward processes) or one
  // external reward_process that replaces them. Their weighted sum is the score.
  nlohmann::json rewards = nlohmann::json::array();
  std::string reward_process;
  std::vector<double> reward_weights;  // empty: all 1.0; else one per reward function

  // The generation engine (engine/engine.h EngineOptions), as GRPO's.
  double kv_memory = 0;
  std::string kv_dtype = "bf16";
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;

  // Every range (one error naming key, value and range), then TRL's batch relation:
  // batch_size() a multiple of num_mini_batches.
  void validate() const;
  // Prompts per update: per_device_train_batch_size x gradient_accumulation_steps (TRL's
  // local_batch_size on one process).
  int64_t batch_size() const { return per_device_train_batch_size * gradient_accumulation_steps; }
  int64_t mini_batch_size() const { return batch_size() / num_mini_batches; }
  // Updates of a run over `rows` prompts: max_steps, else ceil(total_episodes / batch_size()).
  int64_t total_updates(size_t rows) const;
  // The engine's sampling of a response (but the seed).
  SamplingParams sampling_params() const;
  PpoAdvantageConfig advantage_config() const;
  int64_t num_reward_functions() const;
};

}  // namespace fp8rl
