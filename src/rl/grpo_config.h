// `fp8rl grpo`'s configuration: TRL's GRPOConfig keys fp8rl implements, by TRL's names, with
// TRL's meanings and defaults (trl/trainer/grpo_config.py), on top of the shared
// TrainingArguments and model/LoRA keys, plus the
// generation engine's keys and the rewards. A comment marks each deviation from TRL.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "rl/advantages.h"
#include "rl/grpo_loss.h"
#include "rl/online_dpo.h"
#include "rl/reference_model.h"
#include "rl/rollout_correction.h"
#include "train/model_arguments.h"
#include "train/training_arguments.h"

namespace fp8rl {

// The loss type, importance-sampling level, reward scaling and rollout-correction mode are
// the enums of the modules that implement them (rl/grpo_loss.h, rl/advantages.h,
// rl/rollout_correction.h).

struct GrpoConfig : TrainingArguments, ModelArguments {
  GrpoConfig() { learning_rate = 1e-6; }  // GRPOConfig's override of transformers' 5e-5

  // Generation. per_device_train_batch_size counts completions, not prompts (as TRL).
  int64_t num_generations = 8;  // G, completions per prompt (>= 2)
  // Completions per eval prompt (null: num_generations). per_device_eval_batch_size counts
  // completions and must hold whole groups of these, as in TRL.
  std::optional<int64_t> num_generations_eval;
  // Completions per generation round; null: per_device_train_batch_size * steps_per_generation.
  // Exclusive with steps_per_generation.
  std::optional<int64_t> generation_batch_size;
  // Micro-steps per generation round; null: gradient_accumulation_steps (or derived from
  // generation_batch_size).
  std::optional<int64_t> steps_per_generation;
  int64_t num_iterations = 1;  // μ: updates per generated batch
  // TRL removed max_prompt_length in v0.28 (it kept the last 512 tokens, silently). fp8rl keeps
  // the key with the old default and makes a longer prompt an error naming the row unless
  // `truncation` is set (a silent cut would train on prompts the user never wrote); null: no
  // limit.
  std::optional<int64_t> max_prompt_length = 512;
  bool truncation = false;              // cut prompts over max_prompt_length to their last tokens
  int64_t max_completion_length = 512;  // TRL main's default (256 up to TRL 1.9)
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;            // 0: off
  std::optional<double> min_p;  // null: off
  double repetition_penalty = 1.0;
  // TRL's generation_kwargs: fields of the engine's SamplingParams (vLLM's names: temperature,
  // top_p, top_k, min_p, repetition_penalty, min_tokens, stop, stop_token_ids, ignore_eos) that
  // override the keys above; null: none. Fields the trainer sets (n, max_tokens, seed,
  // logprobs) are errors naming the key that owns them. Unlike TRL, whose training logprobs
  // keep `temperature`, an overriding temperature applies to the trainer's logprobs too: the
  // loss is then about the distribution that sampled.
  nlohmann::json generation_kwargs = nullptr;
  // fp8rl's, not TRL's (whose evaluation samples as training does): sampling fields over the
  // training sampling for evaluation only, generation_kwargs' names, e.g. {temperature: 0} for
  // greedy decoding (allowed here: no trainer logprobs are taken of eval completions).
  nlohmann::json eval_generation_kwargs = nullptr;

  // Loss.
  double beta = 0.0;  // k3 KL coefficient to the reference_model
  ReferenceModel reference_model = ReferenceModel::start;
  double epsilon = 0.2;
  std::optional<double> epsilon_high;  // null: epsilon. cispo: the absolute cap on the ratio
  // Two-sided clipping: the unclipped ratio is capped at delta as well (null: off), for every
  // advantage sign, in the clipped loss types; TRL recommends delta > 1 + epsilon.
  std::optional<double> delta;
  double sapo_temperature_neg = 1.05;  // sapo's gate temperature where A <= 0
  double sapo_temperature_pos = 1.0;   // and where A > 0
  // Only the top quantile of active tokens by the policy's entropy enter the policy term (per
  // micro-batch, as TRL on one process); 1: every token.
  double top_entropy_quantile = 1.0;
  GrpoLossType loss_type = GrpoLossType::dapo;
  ImportanceSamplingLevel importance_sampling_level = ImportanceSamplingLevel::token;
  ScaleRewards scale_rewards = ScaleRewards::group;
  // The baseline (verl's names): grpo; rloo, TRL's RLOOTrainer, where beta is a sequence-level
  // KL penalty in the reward instead of a loss term; reinforce_plus_plus(_baseline).
  AdvantageEstimator advantage_estimator = AdvantageEstimator::grpo;
  bool normalize_advantages = false;  // RLOOConfig's: whiten rloo's advantages over the batch
  // RLOOConfig's: each reward (the functions' weighted sum) clamped to [low, high] before the
  // KL penalty and the baseline; empty: no clip, else [low, high].
  std::vector<double> reward_clip_range;
  bool mask_truncated_completions = false;
  // fp8rl online-dpo (rl/online_dpo_config.h): each prompt's two completions, the better by
  // reward chosen, train TRL's OnlineDPOTrainer loss (rl/online_dpo.h) in place of the GRPO
  // family's; null: GRPO's. No key of grpo's sets it.
  std::optional<OnlineDpoOptions> online_dpo;
  std::vector<double> reward_weights;  // empty: all 1.0; else one per reward function

  // Rewards. `rewards`: a JSON list of reward specs (built-ins or {reward_process: COMMAND}),
  // interpreted by the rewards module. `reward_process`: a command line that replaces them
  // with one external reward process (the --reward-process flag).
  nlohmann::json rewards = nlohmann::json::array();
  std::string reward_process;
  // Multi-turn episodes (rl/environment_process.h, docs/ENVIRONMENTS.md): a command line run
  // through /bin/sh -c for the run (empty: single-turn completions), the turns an episode takes
  // at most, and the seconds each exchange with it may take.
  std::string environment;
  int64_t max_turns = 10;
  double environment_timeout_s = 300;
  // TRL's `tools`: MODULE:FUNCTION specs, served by the fp8rl_reward.tools helper as the run's
  // environment (rl/tools_environment.h); TRL's max_tool_calling_iterations bounds the tool
  // rounds (null: only the completion budget does).
  std::vector<std::string> tools;
  std::optional<int64_t> max_tool_calling_iterations;
  // An agent program as the environment (rl/agent_environment.h): a command line started once
  // per run with OPENAI_BASE_URL of the chat-completions endpoint the run serves it, reporting
  // each episode's reward; empty: none.
  std::string environment_server;
  // Episodes against an environment, tools or an agent program.
  bool multi_turn() const {
    return !environment.empty() || !tools.empty() || !environment_server.empty();
  }
  // The environment's command line (the tools helper's with `tools`).
  std::string environment_command() const;
  // The assistant turns an episode takes at most: max_turns, or with tools the turn after the
  // last allowed tool round.
  int64_t episode_turns() const;
  // The engine reuses cached KV blocks of a prompt it has seen (vLLM's enable_prefix_caching);
  // a turn of an episode finds the previous turn's KV there.
  bool enable_prefix_caching = true;

  // Engine-vs-trainer logprob mismatch: TRL's vLLM importance-sampling correction, same names.
  bool vllm_importance_sampling_correction = true;
  RolloutCorrectionMode vllm_importance_sampling_mode = RolloutCorrectionMode::sequence_mask;
  double vllm_importance_sampling_cap = 3.0;  // C; TRL main renamed it ..._clip_max (an alias)
  // The trainer's logprobs equal the engine's bit for bit (checked every round; an error
  // otherwise), so no importance-sampling correction is applied. CPU only for now.
  bool on_policy_exact = false;
  // MoE models: the trainer's passes use the experts the engine chose for each token (routing
  // replay, as verl and slime do), recomputing only their weights. CPU only for now.
  bool routing_replay = false;

  // The generation engine (engine/engine.h EngineOptions).
  double kv_memory = 0;                   // GiB of KV cache; 0: the engine's choice
  std::string kv_dtype = "bf16";          // "bf16" | "fp8"
  int64_t max_num_seqs = 256;             // sequences per engine step
  int64_t max_num_batched_tokens = 2048;  // tokens per engine step (chunked prefill)
  // Unsloth's from_pretrained(gpu_memory_utilization=...): the KV pool's share of the device
  // memory left after the weights and the step plan (EngineOptions::kv_memory_fraction);
  // null: the engine's 0.9, or all of what gpu_memory leaves. Exclusive with kv_memory.
  std::optional<double> gpu_memory_utilization;
  // Unsloth's from_pretrained(max_seq_length=...), vLLM's max_model_len: a limit that
  // max_prompt_length + max_completion_length must fit; null: none.
  std::optional<int64_t> max_seq_length;

  // Logging (TRL's names).
  bool log_completions = false;
  // Completions of each round written to samples.jsonl (and printed with log_completions):
  // null, TRL's default, all of them; N, the first N rounded up to whole groups of
  // num_generations (samples_per_round).
  std::optional<int64_t> num_completions_to_print;

  // Every range, then TRL's batch relations (GRPOConfig.__post_init__, one process):
  // generation_batch_size and steps_per_generation not both set; generation_batch_size a
  // multiple of per_device_train_batch_size and of num_generations; num_generations >= 2;
  // reward_weights one per reward function. Throws fp8rl::Error naming key, value and range.
  void validate() const;

  // TRL's derived values (what __post_init__ writes back), computed from the keys as given.
  int64_t resolved_steps_per_generation() const;
  int64_t resolved_generation_batch_size() const;
  int64_t prompts_per_generation() const {
    return resolved_generation_batch_size() / num_generations;
  }
  double resolved_epsilon_high() const { return epsilon_high.value_or(epsilon); }
  AdvantageOptions advantage_options() const {
    return {advantage_estimator, scale_rewards, normalize_advantages};
  }
  // The reference's logprobs: GRPO's KL term or RLOO's penalty (beta), or online DPO's loss.
  bool needs_reference() const { return beta != 0.0 || online_dpo.has_value(); }
  // TRL's RLOOTrainer takes beta into the reward (and out of the loss).
  bool kl_in_reward() const {
    return advantage_estimator == AdvantageEstimator::rloo && beta != 0.0;
  }
  // The engine's sampling of a round's completions (but the per-prompt seed): the keys above,
  // then generation_kwargs over them. Throws fp8rl::Error naming a bad field.
  SamplingParams sampling_params() const;
  // The engine's sampling of eval completions: sampling_params() with n =
  // resolved_num_generations_eval(), then eval_generation_kwargs over it.
  SamplingParams eval_sampling_params() const;
  int64_t resolved_num_generations_eval() const {
    return num_generations_eval.value_or(num_generations);
  }
  // How many of a round's `round_size` completions (whole groups of num_generations, one
  // prompt's after another) samples.jsonl keeps: all when num_completions_to_print is null,
  // else the fewest whole groups holding at least that many. A cut group would show rewards
  // whose advantages its missing completions explain, and a mean unlike the logged reward.
  int64_t samples_per_round(int64_t round_size) const;
  // 1 with reward_process, else the length of `rewards`.
  int64_t num_reward_functions() const;
};

}  // namespace fp8rl
