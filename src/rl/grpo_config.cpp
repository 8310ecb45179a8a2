#include "rl/grpo_config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "formats/json_read.h"
#include "rl/tools_environment.h"
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
  if (delta) c::positive("delta", *delta);
  c::positive("sapo_temperature_neg", sapo_temperature_neg);
  c::positive("sapo_temperature_pos", sapo_temperature_pos);
  c::in_closed("top_entropy_quantile", top_entropy_quantile, 0.0, 1.0);
  if (loss_type == GrpoLossType::luspo) {
    // LUSPO weights each completion's sequence-level loss by its length; once a per-token factor
    // enters, TRL's mean runs over the padded (completion x longest length) grid, padding
    // included, which has no counterpart here.
    CHECK(importance_sampling_level == ImportanceSamplingLevel::sequence,
          "loss_type luspo needs importance_sampling_level: sequence, got {}",
          importance_sampling_level_name(importance_sampling_level));
    CHECK(beta == 0.0, "loss_type luspo needs beta: 0 (a per-token KL term), got {}", beta);
    CHECK(top_entropy_quantile == 1.0,
          "loss_type luspo needs top_entropy_quantile: 1 (a per-token mask), got {}",
          top_entropy_quantile);
    CHECK(!vllm_importance_sampling_correction || on_policy_exact ||
              vllm_importance_sampling_mode == RolloutCorrectionMode::sequence_mask ||
              vllm_importance_sampling_mode == RolloutCorrectionMode::sequence_truncate,
          "loss_type luspo needs a sequence_* vllm_importance_sampling_mode (per-token weights), "
          "got {}",
          rollout_correction_mode_name(vllm_importance_sampling_mode));
  }
  if (loss_type == GrpoLossType::rloo) {
    // TRL's RLOOTrainer loss: beta lives in the reward, and the loss has no delta, entropy
    // mask or rollout correction.
    CHECK(beta == 0.0 || advantage_estimator == AdvantageEstimator::rloo,
          "loss_type rloo takes beta = {} into the reward, which advantage_estimator rloo does, "
          "not {}",
          beta, advantage_estimator_name(advantage_estimator));
    CHECK(!delta, "loss_type rloo takes no delta (TRL's RLOO has none)");
    CHECK(top_entropy_quantile == 1.0, "loss_type rloo needs top_entropy_quantile: 1, got {}",
          top_entropy_quantile);
    CHECK(!vllm_importance_sampling_correction || on_policy_exact,
          "loss_type rloo takes no rollout correction (TRL's RLOO has none): set "
          "vllm_importance_sampling_correction: false");
  }
  if (online_dpo) {
    // One round per optimizer step, its pairs whole in each micro-batch, sampled by the adapter
    // being trained: TRL's OnlineDPOTrainer generates inside each training step.
    CHECK(num_generations == 2, "online dpo samples 2 completions per prompt, got {}",
          num_generations);
    CHECK(per_device_train_batch_size % 2 == 0,
          "online dpo: per_device_train_batch_size ({}) must hold whole pairs",
          per_device_train_batch_size);
    CHECK(beta == 0.0 && num_iterations == 1 && !generation_batch_size && !steps_per_generation &&
              !vllm_importance_sampling_correction && !on_policy_exact && !multi_turn() &&
              !routing_replay && advantage_estimator == AdvantageEstimator::grpo &&
              reward_clip_range.empty() && !mask_truncated_completions,
          "online dpo runs TRL's OnlineDPOTrainer: GRPO's beta, num_iterations, "
          "generation_batch_size, steps_per_generation, rollout correction, environments, "
          "routing_replay, advantage estimators, reward_clip_range and "
          "mask_truncated_completions do not apply");
  }
  if (!reward_clip_range.empty()) {
    CHECK(advantage_estimator == AdvantageEstimator::rloo,
          "reward_clip_range (RLOOConfig's) needs advantage_estimator rloo, got {}",
          advantage_estimator_name(advantage_estimator));
    CHECK(reward_clip_range.size() == 2 && reward_clip_range[0] <= reward_clip_range[1],
          "reward_clip_range must be [low, high] with low <= high, got {} values",
          reward_clip_range.size());
  }
  // scale_rewards is GRPO's divisor; the other estimators have their own normalization.
  CHECK(advantage_estimator == AdvantageEstimator::grpo || scale_rewards == ScaleRewards::group,
        "scale_rewards {} applies to advantage_estimator grpo only, not {}",
        scale_rewards_name(scale_rewards), advantage_estimator_name(advantage_estimator));
  CHECK(!normalize_advantages || advantage_estimator == AdvantageEstimator::rloo,
        "normalize_advantages (RLOOConfig's) needs advantage_estimator rloo, got {}",
        advantage_estimator_name(advantage_estimator));
  (void)sampling_params();  // generation_kwargs' fields and the merged ranges
  if (num_generations_eval) c::at_least<int64_t>("num_generations_eval", *num_generations_eval, 1);
  if (evaluates()) {
    (void)eval_sampling_params();
    CHECK(per_device_eval_batch_size % resolved_num_generations_eval() == 0,
          "per_device_eval_batch_size ({}) must be divisible by the number of generations used "
          "for evaluation ({}{}): an eval batch holds whole groups",
          per_device_eval_batch_size, resolved_num_generations_eval(),
          num_generations_eval ? "" : " = num_generations");
  }
  for (double w : reward_weights)
    CHECK(std::isfinite(w), "reward_weights holds {}, not a finite number", w);

  CHECK(rewards.is_array(), "rewards must be a list of reward specs, got {}", rewards.dump());
  CHECK(num_reward_functions() >= 1 || !environment.empty() || !environment_server.empty(),
        "no reward: give `rewards` (a list of reward specs), `reward_process` (a command), an "
        "`environment` whose steps reward the episodes or an `environment_server`{}",
        tools.empty() ? "" : " (the tools helper gives no reward)");
  c::at_least<int64_t>("max_turns", max_turns, 1);
  CHECK(tools.empty() || environment.empty(),
        "`tools` with an `environment`: the tools are served as the run's environment; give one "
        "of them");
  CHECK(environment_server.empty() || (environment.empty() && tools.empty()),
        "`environment_server` with `{}`: the agent program is the run's environment; give one "
        "of them",
        environment.empty() ? "tools" : "environment");
  CHECK(environment_server.empty() || max_turns == 10,
        "max_turns = {} with `environment_server`: the agent program decides when its episodes "
        "end (max_completion_length bounds their tokens)",
        max_turns);
  check_tool_specs(tools);
  CHECK(tools.empty() || max_turns == 10,
        "max_turns = {} with `tools`: the tool rounds are bounded by max_tool_calling_iterations "
        "(TRL's; an episode takes at most that many + 1 turns)",
        max_turns);
  CHECK(!max_tool_calling_iterations || !tools.empty(),
        "max_tool_calling_iterations without `tools`: there are no tool rounds to bound");
  if (max_tool_calling_iterations)
    c::at_least<int64_t>("max_tool_calling_iterations", *max_tool_calling_iterations, 0);
  CHECK(environment_timeout_s > 0 && environment_timeout_s <= 1e9,
        "environment_timeout_s must be a positive number of seconds up to 1e9, got {}",
        environment_timeout_s);
  CHECK(!multi_turn() || !routing_replay,
        "routing_replay with an environment: replaying the experts of multi-turn episodes is not "
        "supported");
  CHECK(!multi_turn() || !evaluates(),
        "eval_strategy = {} with an environment or tools: evaluations run single-turn completions, "
        "not "
        "episodes; set eval_strategy: no",
        eval_strategy_name(eval_strategy));
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

namespace {

// generation_kwargs' (or eval_generation_kwargs') fields over `s`; `key` names the key in errors.
SamplingParams apply_generation_kwargs(const nlohmann::json& kwargs, std::string_view key,
                                       std::string_view n_owner, SamplingParams s) {
  CHECK(kwargs.is_object(), "{} = {} is not a mapping of sampling fields (e.g. {{min_tokens: 4}})",
        key, json_excerpt(kwargs));
  // The trainer's own: the group size, the memory plan and dr_grpo's L_max, the per-prompt
  // streams of a resumable run, the logprobs the loss reads.
  const std::pair<const char*, const char*> owned[] = {
      {"n", n_owner.data()},
      {"max_tokens", "max_completion_length"},
      {"max_new_tokens", "max_completion_length"},  // TRL's transformers-path name
      {"seed", "seed"},
      {"logprobs", "nothing: the trainer reads the sampled tokens' logprobs itself"},
      {"processed_logprobs", "nothing: the trainer reads the sampled tokens' logprobs itself"}};
  for (const auto& [field, owner] : owned)
    CHECK(!kwargs.contains(field), "{}.{} = {} is set by the trainer; use {}", key, field,
          json_excerpt(kwargs.at(field)), owner);
  try {
    s = sampling_params_from_json(kwargs, s);
    s.validate();
  } catch (const Error& e) {
    std::string_view what = e.what();
    if (what.starts_with("sampling: ")) what.remove_prefix(10);
    RAISE("{}: {}", key, what);
  }
  return s;
}

}  // namespace

SamplingParams GrpoConfig::eval_sampling_params() const {
  SamplingParams s = sampling_params();
  s.n = int(resolved_num_generations_eval());
  s.processed_logprobs = false;  // nothing reads them
  if (eval_generation_kwargs.is_null()) return s;
  return apply_generation_kwargs(eval_generation_kwargs, "eval_generation_kwargs",
                                 "num_generations_eval", s);
}

SamplingParams GrpoConfig::sampling_params() const {
  SamplingParams s;
  s.n = int(num_generations);
  s.temperature = temperature;
  s.top_p = top_p;
  s.top_k = int(top_k);
  s.min_p = min_p.value_or(0.0);
  s.repetition_penalty = repetition_penalty;
  s.max_tokens = int(max_completion_length);
  s.processed_logprobs = true;
  if (generation_kwargs.is_null()) return s;
  s = apply_generation_kwargs(generation_kwargs, "generation_kwargs", "num_generations", s);
  CHECK(s.temperature > 0.0,
        "generation_kwargs.temperature must be > 0, got {}: the trainer's logprobs divide the "
        "logits by it",
        s.temperature);
  return s;
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

int64_t GrpoConfig::samples_per_round(int64_t round_size) const {
  if (!num_completions_to_print) return round_size;
  const int64_t n = *num_completions_to_print, g = num_generations;
  if (n >= round_size) return round_size;  // also keeps the rounding below from overflowing
  return std::min(round_size, (n / g + (n % g != 0)) * g);
}

std::string GrpoConfig::environment_command() const {
  return tools.empty() ? environment : tools_command(tools);
}

int64_t GrpoConfig::episode_turns() const {
  if (tools.empty()) return max_turns;
  // No bound (TRL's None): the completion budget ends the episode, one token a turn at least.
  return max_tool_calling_iterations ? *max_tool_calling_iterations + 1
                                     : std::numeric_limits<int64_t>::max();
}

int64_t GrpoConfig::num_reward_functions() const {
  if (!reward_process.empty()) return 1;
  return rewards.is_array() ? int64_t(rewards.size()) : 0;
}

}  // namespace fp8rl
