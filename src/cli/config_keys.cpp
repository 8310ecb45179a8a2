#include "cli/config_keys.h"

namespace fp8rl::cli {

namespace {

template <class C>
void add_model_keys(KeyTable<C>& t) {
  t.add("model", &C::model, "Hugging Face model directory").alias("model_name_or_path");
  t.add("adapter", &C::adapter, "PEFT adapter directory to start from (default: a fresh one)");
  // Unsloth's load_in_fp8: true is row scaling, false no FP8.
  t.add_enum("fp8", &C::fp8,
             {{"auto", "auto"},
              {"off", "off"},
              {"row", "row"},
              {"block", "block"},
              {"tensor", "tensor"},
              {"true", "row"},
              {"True", "row"},
              {"false", "off"},
              {"False", "off"}},
             "FP8 scheme of the frozen base: auto (as stored), off, or quantize on load; "
             "load_in_fp8 (Unsloth): true = row, false = off")
      .alias("load_in_fp8");
  t.add_choice("device", &C::device, {"cpu", "cuda"}, "Device to run on");
  t.add("gpu_memory", &C::gpu_memory,
        "GiB of device memory the run may hold (weights, adapter, optimizer state, KV cache, "
        "activations, workspace); the KV cache takes what is left unless kv_memory; null: the "
        "whole GPU");
  t.add("lora_r", &C::lora_r, "LoRA rank");
  t.add("lora_alpha", &C::lora_alpha, "LoRA alpha (scaling alpha / r, or / sqrt(r) with rsLoRA)");
  t.add("lora_dropout", &C::lora_dropout, "Dropout on the LoRA input, in [0, 1)");
  t.add("disable_dropout", &C::disable_dropout,
        "Train without lora_dropout (it stays in the adapter's config)");
  t.add("lora_target_modules", &C::lora_target_modules,
        "Projections with an adapter: names (q_proj, k_proj, v_proj, o_proj, gate_proj, "
        "up_proj, down_proj) or all-linear; null: PEFT's default for the architecture (q_proj, "
        "v_proj)")
      .alias("target_modules");
  t.add("use_rslora", &C::use_rslora, "rsLoRA scaling alpha / sqrt(r)");
  t.add_enum("init_lora_weights", &C::init_lora_weights,
             {{"true", "default"}, {"gaussian", "gaussian"}, {"default", "default"}},
             "LoRA A init: true (PEFT's Kaiming-uniform) or gaussian; B starts at zero");
  t.add("random_state", &C::random_state,
        "Seed of the adapter's initialization (Unsloth's name; null: seed)");
  t.add("max_lora_rank", &C::max_lora_rank,
        "Largest lora_r allowed (Unsloth's from_pretrained key; null: no limit)");
}

// GRPO's and DPO's reference policy (rl/reference_model.h).
template <class C>
void add_reference_key(KeyTable<C>& t) {
  t.add_enum("reference_model", &C::reference_model,
             {{"start", ReferenceModel::start}, {"base", ReferenceModel::base}},
             "Reference policy: start (the adapter continued from, frozen; the base for a fresh "
             "adapter) or base (no adapter)");
}

template <class C>
void add_training_keys(KeyTable<C>& t) {
  t.add("data", &C::data, "Training dataset (JSONL)").alias("dataset_name");
  t.add("chat_template_kwargs", &C::chat_template_kwargs,
        "Extra chat template variables for chat rows (a mapping; JSON text as a flag), e.g. "
        "{enable_thinking: false}");
  t.add("output_dir", &C::output_dir, "Run directory (metrics, checkpoints, adapter)").alias("out");
  t.add("resume_from_checkpoint", &C::resume_from_checkpoint,
        "Resume: a checkpoint directory, or true (bare --resume) for the newest in output_dir")
      .alias("resume")
      .bare_flag();
  t.add("overwrite_output_dir", &C::overwrite_output_dir,
        "Replace the run in output_dir (fp8rl's files only; without it, a run there is an error)");
  t.add("dry_run", &C::dry_run, "Plan the memory and print it; train nothing");
  t.add("gradient_checkpointing", &C::gradient_checkpointing,
        "Recompute each decoder layer in the backward instead of keeping its activations")
      .alias("checkpointing");
  t.add("activation_offloading", &C::activation_offloading,
        "With checkpointing: keep each layer's checkpointed input in host memory")
      .alias("offload");
  t.add("learning_rate", &C::learning_rate, "Peak learning rate").alias("lr");
  t.add("num_train_epochs", &C::num_train_epochs, "Passes over the dataset (unless max_steps)")
      .alias("epochs");
  t.add("max_steps", &C::max_steps, "Optimizer steps; -1: num_train_epochs decides").alias("steps");
  t.add("per_device_train_batch_size", &C::per_device_train_batch_size, "Sequences per micro-batch")
      .alias("batch_size");
  t.add("gradient_accumulation_steps", &C::gradient_accumulation_steps,
        "Micro-batches per optimizer step")
      .alias("grad_accum");
  t.add("max_grad_norm", &C::max_grad_norm, "Global gradient-norm clip; 0: off");
  t.add_enum("lr_scheduler_type", &C::lr_scheduler_type,
             {{"linear", LrSchedulerType::linear},
              {"cosine", LrSchedulerType::cosine},
              {"constant", LrSchedulerType::constant},
              {"constant_with_warmup", LrSchedulerType::constant_with_warmup}},
             "Learning-rate schedule (constant ignores warmup, as in transformers)");
  t.add("warmup_steps", &C::warmup_steps,
        "Linear warmup: steps, or a fraction in [0, 1) of the total steps");
  t.add("warmup_ratio", &C::warmup_ratio,
        "Warmup as a fraction of the total steps; replaces warmup_steps when given (null: off)");
  t.add("weight_decay", &C::weight_decay, "Weight decay (decoupled for AdamW)");
  t.add_enum("optim", &C::optim,
             {{"adamw", OptimizerKind::adamw},
              {"sgd", OptimizerKind::sgd},
              {"adamw_torch", OptimizerKind::adamw},
              {"adamw_torch_fused", OptimizerKind::adamw}},
             "Optimizer")
      .alias("optimizer");
  t.add("adam_beta1", &C::adam_beta1, "AdamW beta1");
  t.add("adam_beta2", &C::adam_beta2, "AdamW beta2");
  t.add("adam_epsilon", &C::adam_epsilon, "AdamW epsilon");
  t.add("seed", &C::seed, "Random seed (data order, adapter init, sampling)");
  t.add("save_steps", &C::save_steps, "Checkpoint every this many steps; 0: only at the end");
  t.add("logging_steps", &C::logging_steps, "Print a progress line every this many steps");
  t.add("eval_dataset", &C::eval_dataset,
        "Held-out dataset (JSONL, the training data's format) evaluated during training");
  t.add_enum(
      "eval_strategy", &C::eval_strategy,
      {{"no", EvalStrategy::no}, {"steps", EvalStrategy::steps}, {"epoch", EvalStrategy::epoch}},
      "When to evaluate: no, every eval_steps steps, or at each epoch's end");
  t.add("eval_steps", &C::eval_steps,
        "Steps between evaluations; below 1 a fraction of the run's steps (null: logging_steps)");
  t.add("per_device_eval_batch_size", &C::per_device_eval_batch_size,
        "Sequences (sft), pairs (dpo), examples (kto) or completions (grpo) per evaluation batch");
  t.add("eval_on_start", &C::eval_on_start, "Also evaluate before the first step (step 0)");
  t.add("report_to", &C::report_to,
        "Trackers of the step metrics besides metrics.jsonl: tensorboard (all means it), or none "
        "/ an empty list");
  t.add("logging_dir", &C::logging_dir,
        "TensorBoard's directory (default: output_dir/runs/<date>_<host>, new per run)");
}

// Why the keys copied from TRL, transformers, accelerate and Unsloth configs that fp8rl
// accepts and ignores change nothing here (printed once per key given).
constexpr const char* kOwnEngine = "fp8rl has its own engine (no vLLM)";
constexpr const char* kOneProcess =
    "fp8rl runs one process with its own data loading (no accelerate, DDP or DeepSpeed)";
constexpr const char* kPrecision =
    "fp8rl's precision is fp8 / load_in_fp8's (an FP8 or BF16 base, fp32 adapter masters)";
constexpr const char* kLocalOnly = "fp8rl writes the run to output_dir only (no Hub)";
constexpr const char* kOwnLogging = "fp8rl logs to metrics.jsonl and the console";
constexpr const char* kNativeLoading = "fp8rl loads the model directory natively";
constexpr const char* kNoPadding = "fp8rl batches without padding";

// A check for an ignored key that only its harmless values may take: any other value would
// change the run in a way fp8rl cannot, so it is an error naming the value.
std::function<void(const nlohmann::json&)> only(std::vector<nlohmann::json> allowed,
                                                std::string why) {
  return [allowed = std::move(allowed), why = std::move(why)](const nlohmann::json& v) {
    for (const nlohmann::json& a : allowed)
      if (v == a) return;
    RAISE("{} is not supported: {}", v.dump(), why);
  };
}

// Keys of TRL's, transformers' and Unsloth's configs that name fp8rl keys another way, and
// plumbing keys with no meaning here (any value, or their harmless values only).
template <class C>
void add_compat_keys(KeyTable<C>& t) {
  // Unsloth's get_peft_model(use_gradient_checkpointing=True | False | "unsloth"): "unsloth"
  // is checkpointing with the checkpointed layer inputs offloaded to host memory.
  KeySpec& ugc = t.translate(
      "use_gradient_checkpointing", KeyType::choice,
      {"gradient_checkpointing", "activation_offloading"},
      [](C& c, const nlohmann::json& v) {
        const std::string s = v.get<std::string>();
        c.gradient_checkpointing = s != "false";
        c.activation_offloading = s == "unsloth";
      },
      "Unsloth's name: true (gradient_checkpointing), false, or unsloth (with "
      "activation_offloading)");
  ugc.choices = {"true", "false", "unsloth"};
  ugc.choice_aliases = {{"True", "true"}, {"False", "false"}};

  t.ignore("use_peft", "fp8rl always trains a LoRA adapter",
           only({true}, "fp8rl trains LoRA adapters only (no full fine-tuning)"));
  t.ignore("load_in_4bit", "fp8rl has no 4-bit path (the base is FP8 or BF16)",
           only({false}, "fp8rl has no 4-bit path; use load_in_fp8 (true = row, or block)"));
  t.ignore("load_in_8bit", "fp8rl's 8-bit path is FP8 (load_in_fp8)",
           only({false}, "bitsandbytes 8-bit is not fp8rl's; use load_in_fp8"));
  t.ignore("fast_inference", "fp8rl always generates with its own engine, on the same weights");
  for (const char* k :
       {"bf16", "fp16", "tf32", "bf16_full_eval", "fp16_full_eval", "torch_dtype", "dtype"})
    t.ignore(k, kPrecision);
  t.ignore("gradient_checkpointing_kwargs", "fp8rl checkpoints whole decoder layers");
  for (const char* k : {"ddp_find_unused_parameters", "ddp_bucket_cap_mb", "ddp_broadcast_buffers",
                        "ddp_backend", "ddp_timeout", "dataloader_num_workers",
                        "dataloader_pin_memory", "dataloader_persistent_workers",
                        "dataloader_prefetch_factor", "dataset_num_proc", "local_rank"})
    t.ignore(k, kOneProcess);
  t.ignore("dataloader_drop_last", kOneProcess,
           only({false}, "fp8rl trains the last short batch, never drops it"));
  t.ignore("push_to_hub", kLocalOnly, only({false}, "fp8rl has no Hub upload"));
  for (const char* k : {"hub_model_id", "hub_strategy", "hub_private_repo", "hub_token"})
    t.ignore(k, kLocalOnly);
  for (const char* k : {"logging_first_step", "log_level", "disable_tqdm", "run_name",
                        "save_total_limit", "save_safetensors", "save_only_model"})
    t.ignore(k, kOwnLogging);
  t.ignore("logging_strategy", kOwnLogging,
           only({"steps"}, "fp8rl logs every logging_steps steps"));
  t.ignore("save_strategy", kOwnLogging,
           only({"steps"}, "fp8rl checkpoints every save_steps steps"));
  for (const char* k : {"model_init_kwargs", "trust_remote_code", "attn_implementation",
                        "torch_compile", "use_liger_kernel", "remove_unused_columns"})
    t.ignore(k, kNativeLoading);
  for (const char* k : {"padding_free", "pad_to_multiple_of"}) t.ignore(k, kNoPadding);
}

// TRL's GRPO CLI reward_funcs: the names of trl/scripts/grpo.py's registry that fp8rl has
// as built-ins, as the script builds them; other names are errors that say what to do.
nlohmann::json reward_funcs_to_rewards(const nlohmann::json& v) {
  const nlohmann::json names = v.is_array() ? v : nlohmann::json::array({v});
  nlohmann::json out = nlohmann::json::array();
  for (const nlohmann::json& n : names) {
    CHECK(n.is_string(), "expected reward function names, got {}", n.dump());
    const std::string name = n.get<std::string>();
    if (name == "think_format_reward") {
      out.push_back({{"type", "regex"},
                     {"pattern", "^<think>(?!.*<think>)(.*?)</think>.*$"},
                     {"match", "start"},
                     {"dotall", true},
                     {"multiline", true},
                     {"name", name}});
    } else if (name == "get_soft_overlong_punishment") {
      // The script's instance: max_completion_len 1280, soft_punish_cache 256.
      out.push_back({{"type", "length_penalty"},
                     {"mode", "soft_overlong"},
                     {"max_length", 1280},
                     {"cache_length", 256},
                     {"name", name}});
    } else if (name == "accuracy_reward" || name == "reasoning_accuracy_reward") {
      RAISE(
          "'{}' is TRL's math_verify reward, not a built-in here: run it through the reward "
          "helper, rewards: [{{reward_process: \"python3 -m fp8rl_reward trl.rewards:{} "
          "--chat\"}}] (docs/REWARDS.md)",
          name, name);
    } else {
      RAISE(
          "'{}' is not a built-in reward (reward_funcs takes think_format_reward, "
          "get_soft_overlong_punishment); a Python function runs through the reward helper, "
          "rewards: [{{reward_process: \"python3 -m fp8rl_reward MODULE:FUNCTION\"}}] "
          "(docs/REWARDS.md)",
          name);
    }
  }
  return out;
}

// The sampling keys of the engine's rounds (GRPO's and online DPO's).
template <class C>
void add_sampling_keys(KeyTable<C>& t) {
  t.add("temperature", &C::temperature, "Sampling temperature");
  t.add("top_p", &C::top_p, "Nucleus sampling mass, in (0, 1]");
  t.add("top_k", &C::top_k, "Top-k sampling; 0: off");
  t.add("min_p", &C::min_p, "Min-p sampling (null: off)");
  t.add("repetition_penalty", &C::repetition_penalty, "Repetition penalty; 1: off");
  t.add("generation_kwargs", &C::generation_kwargs,
        "Sampling fields over the keys above (a mapping, vLLM's names: temperature, top_p, "
        "top_k, min_p, repetition_penalty, min_tokens, stop, stop_token_ids, ignore_eos)");
  t.add("eval_generation_kwargs", &C::eval_generation_kwargs,
        "fp8rl's: sampling fields over the training ones for evaluation only, e.g. "
        "{temperature: 0} for greedy (a mapping, generation_kwargs' names)");
}

// The generation engine's own keys.
template <class C>
void add_engine_keys(KeyTable<C>& t) {
  t.add("kv_memory", &C::kv_memory, "KV cache GiB; 0: the engine's choice");
  t.add_choice("kv_dtype", &C::kv_dtype, {"bf16", "fp8"}, "KV cache dtype");
  t.add("max_num_seqs", &C::max_num_seqs, "Sequences per engine step");
  t.add("max_num_batched_tokens", &C::max_num_batched_tokens,
        "Tokens per engine step (chunked prefill budget)");
  t.add("enable_prefix_caching", &C::enable_prefix_caching,
        "Reuse the KV of prompt prefixes the engine has computed (vLLM's)");
}

template <class C>
void add_reward_funcs_key(KeyTable<C>& t) {
  KeySpec& funcs = t.translate(
      "reward_funcs", KeyType::json, {"rewards"},
      [](C& c, const nlohmann::json& v) { c.rewards = reward_funcs_to_rewards(v); },
      "TRL's CLI names of built-in rewards: think_format_reward, get_soft_overlong_punishment");
  funcs.check = [](const nlohmann::json& v) { reward_funcs_to_rewards(v); };
}

template <class C>
void add_vllm_ignores(KeyTable<C>& t) {
  // TRL's vLLM and generation plumbing: fp8rl's engine plays vLLM's colocated role.
  for (const char* k :
       {"use_vllm", "vllm_mode", "vllm_model_impl", "vllm_enable_sleep_mode",
        "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
        "vllm_group_port", "vllm_gpu_memory_utilization", "vllm_max_model_length",
        "vllm_tensor_parallel_size", "ds3_gather_for_generation", "cache_implementation"})
    t.ignore(k, kOwnEngine);
}

}  // namespace

KeyTable<SftConfig> sft_keys() {
  using C = SftConfig;
  KeyTable<C> t;
  add_training_keys(t);
  add_model_keys(t);
  t.add("max_length", &C::max_length, "Tokens per sequence at most").alias("max_seq_length");
  t.add("truncation", &C::truncation,
        "Cut sequences over max_length to their first tokens (default: an error)");
  t.add("packing", &C::packing, "Fill batches by max_tokens_per_batch, not by sequence count");
  t.add("max_tokens_per_batch", &C::max_tokens_per_batch,
        "Token budget of a packed batch; 0: per_device_train_batch_size * max_length");
  t.add("dataset_text_field", &C::dataset_text_field, "Column of language-modelling rows");
  t.add("completion_only_loss", &C::completion_only_loss,
        "Loss on completions only (null: for prompt/completion rows)");
  t.add("assistant_only_loss", &C::assistant_only_loss,
        "Loss on assistant turns only for messages rows");
  add_compat_keys(t);
  t.ignore("gpu_memory_utilization", "sft runs no generation engine");
  // TRL's SFT default is false, but the Trainer's sampler draws batches at random anyway, as
  // fp8rl does with its (seed, epoch) order.
  t.ignore("shuffle_dataset", "fp8rl draws batches in a (seed, epoch) order either way");
  return t;
}

// GRPOConfig's keys over C (GrpoConfig, or RlooConfig with RLOOConfig's defaults).
template <class C>
KeyTable<C> grpo_table() {
  KeyTable<C> t;
  add_training_keys(t);
  add_model_keys(t);
  // Generation.
  t.add("num_generations", &C::num_generations, "Completions per prompt (G >= 2)");
  t.add("num_generations_eval", &C::num_generations_eval,
        "Completions per eval prompt (null: num_generations)");
  t.add("generation_batch_size", &C::generation_batch_size,
        "Completions per generation round (null: per_device_train_batch_size * "
        "steps_per_generation)");
  t.add("steps_per_generation", &C::steps_per_generation,
        "Micro-steps per generation round (null: gradient_accumulation_steps)");
  t.add("num_iterations", &C::num_iterations, "Updates per generated batch (mu)");
  t.add("max_prompt_length", &C::max_prompt_length, "Prompt tokens at most (null: no limit)");
  t.add("truncation", &C::truncation,
        "Cut prompts over max_prompt_length to their last tokens (default: an error)");
  t.add("max_completion_length", &C::max_completion_length, "Completion tokens at most");
  add_sampling_keys(t);
  // Loss.
  t.add("beta", &C::beta, "KL coefficient (k3, to the reference_model)");
  add_reference_key(t);
  t.add("epsilon", &C::epsilon, "Lower clip of the ratio: 1 - epsilon");
  t.add("epsilon_high", &C::epsilon_high,
        "Upper clip: 1 + epsilon_high (null: epsilon); cispo: the absolute ratio cap");
  t.add("delta", &C::delta,
        "Two-sided clipping: cap the unclipped ratio at delta too (null: off; TRL advises > 1 + "
        "epsilon)");
  t.add_enum("loss_type", &C::loss_type,
             {{"dapo", GrpoLossType::dapo},
              {"grpo", GrpoLossType::grpo},
              {"bnpo", GrpoLossType::bnpo},
              {"dr_grpo", GrpoLossType::dr_grpo},
              {"cispo", GrpoLossType::cispo},
              {"sapo", GrpoLossType::sapo},
              {"luspo", GrpoLossType::luspo},
              {"rloo", GrpoLossType::rloo}},
             "Loss aggregation (rloo: TRL's RLOOTrainer loss, the ratio of whole-sequence "
             "probabilities clipped, mean over completions)");
  t.add("sapo_temperature_neg", &C::sapo_temperature_neg,
        "sapo: the soft gate's temperature where the advantage is <= 0");
  t.add("sapo_temperature_pos", &C::sapo_temperature_pos,
        "sapo: the soft gate's temperature where the advantage is > 0");
  t.add_enum(
      "importance_sampling_level", &C::importance_sampling_level,
      {{"token", ImportanceSamplingLevel::token}, {"sequence", ImportanceSamplingLevel::sequence}},
      "Ratio per token, or per sequence (GSPO)");
  t.add_enum("scale_rewards", &C::scale_rewards,
             {{"group", ScaleRewards::group},
              {"batch", ScaleRewards::batch},
              {"none", ScaleRewards::none},
              {"true", ScaleRewards::group},
              {"false", ScaleRewards::none}},
             "Advantage divisor: the group's std, the batch's, or none (true = group, "
             "false = none)");
  t.add_enum("advantage_estimator", &C::advantage_estimator,
             {{"grpo", AdvantageEstimator::grpo},
              {"rloo", AdvantageEstimator::rloo},
              {"reinforce_plus_plus", AdvantageEstimator::reinforce_plus_plus},
              {"reinforce_plus_plus_baseline", AdvantageEstimator::reinforce_plus_plus_baseline}},
             "Baseline: grpo; rloo (leave-one-out, TRL's RLOOTrainer: beta is a KL penalty in "
             "the reward); reinforce_plus_plus(_baseline): whitened over the batch's tokens");
  t.add("normalize_advantages", &C::normalize_advantages,
        "rloo: whiten the advantages over the batch (RLOOConfig's)");
  t.add("reward_clip_range", &C::reward_clip_range,
        "rloo: clamp each reward to [low, high] before the KL penalty (RLOOConfig's; empty: off)");
  t.add("mask_truncated_completions", &C::mask_truncated_completions,
        "Leave completions cut at max_completion_length out of the loss");
  t.add("top_entropy_quantile", &C::top_entropy_quantile,
        "Policy loss on the top quantile of tokens by entropy only, in [0, 1]; 1: all");
  t.add("reward_weights", &C::reward_weights, "One weight per reward (default: all 1)");
  // Rewards.
  t.add("rewards", &C::rewards, "Reward specs (a list; in YAML, or JSON text as a flag)");
  t.add("reward_process", &C::reward_process,
        "Command of an external reward process; replaces `rewards`");
  // Multi-turn episodes.
  t.add("environment", &C::environment,
        "Command of an environment process: every sample an episode of turns "
        "(docs/ENVIRONMENTS.md)");
  t.add("environment_server", &C::environment_server,
        "Command of an agent program that asks the run's OpenAI endpoint (OPENAI_BASE_URL) for "
        "its episodes' completions and reports their rewards (docs/ENVIRONMENTS.md)");
  t.add("max_turns", &C::max_turns, "Assistant turns an episode takes at most");
  t.add("environment_timeout_s", &C::environment_timeout_s,
        "Seconds an exchange with the environment may take (environment_server: its silence "
        "while none of its requests runs)");
  t.add("tools", &C::tools,
        "Python functions (MODULE:FUNCTION list) the model may call, TRL's tools; served by "
        "python3 -m fp8rl_reward.tools as the environment (docs/ENVIRONMENTS.md)");
  t.add("max_tool_calling_iterations", &C::max_tool_calling_iterations,
        "Tool rounds an episode takes at most (TRL's; null: no limit but the completion budget)");
  // Engine-vs-trainer mismatch.
  t.add("vllm_importance_sampling_correction", &C::vllm_importance_sampling_correction,
        "Correct the engine-vs-trainer logprob mismatch by importance sampling");
  t.add_enum("vllm_importance_sampling_mode", &C::vllm_importance_sampling_mode,
             {{"sequence_mask", RolloutCorrectionMode::sequence_mask},
              {"sequence_truncate", RolloutCorrectionMode::sequence_truncate},
              {"token_mask", RolloutCorrectionMode::token_mask},
              {"token_truncate", RolloutCorrectionMode::token_truncate}},
             "Correction: truncate or mask ratios over the cap, per token or per sequence");
  t.add("vllm_importance_sampling_cap", &C::vllm_importance_sampling_cap,
        "Importance-ratio cap C (>= 1)")
      .alias("vllm_importance_sampling_clip_max");
  t.add("on_policy_exact", &C::on_policy_exact,
        "Trainer logprobs equal the engine's exactly (checked; no IS correction; on CUDA: "
        "batch-invariant kernels, slower)");
  t.add("routing_replay", &C::routing_replay,
        "MoE models: the trainer uses the experts the engine chose for each token");
  // Engine.
  add_engine_keys(t);
  // Logging.
  t.add("log_completions", &C::log_completions,
        "Print each round's completions kept in samples.jsonl to stderr");
  t.add("num_completions_to_print", &C::num_completions_to_print,
        "Completions per round kept in samples.jsonl (and printed with log_completions): the "
        "first N rounded up to whole groups of num_generations; null (TRL's default): all");
  // Unsloth's from_pretrained keys of the engine.
  t.add("gpu_memory_utilization", &C::gpu_memory_utilization,
        "KV pool's share of the device memory left after the weights (null: 0.9); exclusive "
        "with kv_memory");
  t.add("max_seq_length", &C::max_seq_length,
        "Limit on max_prompt_length + max_completion_length (Unsloth's name; null: none)");
  add_compat_keys(t);
  add_reward_funcs_key(t);
  add_vllm_ignores(t);
  t.ignore("shuffle_dataset", "fp8rl always shuffles the prompts per (seed, epoch)",
           only({true}, "fp8rl always shuffles the prompts"));
  return t;
}

KeyTable<GrpoConfig> grpo_keys() {
  return grpo_table<GrpoConfig>();
}

KeyTable<RlooConfig> rloo_keys() {
  return grpo_table<RlooConfig>();
}

KeyTable<OnlineDpoConfig> online_dpo_keys() {
  using C = OnlineDpoConfig;
  KeyTable<C> t;
  add_training_keys(t);
  add_model_keys(t);
  // Generation.
  t.add("max_new_tokens", &C::max_completion_length, "Completion tokens at most")
      .alias("max_completion_length");
  t.add("max_length", &C::max_length,
        "Tokens of prompt + completion at most: a prompt over max_length - max_new_tokens is an "
        "error unless truncation");
  t.add("truncation", &C::truncation,
        "Cut prompts over max_length - max_new_tokens to their last tokens (TRL cuts silently)");
  add_sampling_keys(t);
  // Loss.
  t.add("beta", &C::dpo_beta, "DPO beta: a number, or one per epoch (the last for later epochs)");
  add_reference_key(t);
  t.add_enum("loss_type", &C::dpo_loss_type,
             {{"sigmoid", DpoLossType::sigmoid}, {"ipo", DpoLossType::ipo}},
             "Loss on each pair's summed log-probabilities: sigmoid (DPO) or ipo");
  t.add("missing_eos_penalty", &C::missing_eos_penalty,
        "Subtracted from the reward of a completion without EOS (null: none)");
  t.add("reward_weights", &C::reward_weights, "One weight per reward (default: all 1)");
  // Rewards.
  t.add("rewards", &C::rewards,
        "Reward specs (a list; in YAML, or JSON text as a flag); {type: reward_model, model: DIR} "
        "for a reward model");
  t.add("reward_process", &C::reward_process,
        "Command of an external reward process; replaces `rewards`");
  KeySpec& path = t.translate(
      "reward_model_path", KeyType::string, {"rewards"},
      [](C& c, const nlohmann::json& v) {
        if (!v.is_null())
          c.rewards = nlohmann::json::array({{{"type", "reward_model"}, {"model", v}}});
      },
      "TRL's: a reward model directory, as rewards: [{type: reward_model, model: DIR}]");
  path.nullable = true;
  add_reward_funcs_key(t);
  t.ignore("judge", "online dpo scores pairs with rewards",
           only({nullptr},
                "pairwise judges are not supported: score the completions with "
                "`rewards` (reward functions or {type: reward_model, model: DIR})"));
  add_engine_keys(t);
  t.add("log_completions", &C::log_completions,
        "Print each round's completions kept in samples.jsonl to stderr");
  t.add("num_completions_to_print", &C::num_completions_to_print,
        "Completions per round kept in samples.jsonl (whole pairs; null: all)");
  t.add("gpu_memory_utilization", &C::gpu_memory_utilization,
        "KV pool's share of the device memory left after the weights (null: 0.9); exclusive "
        "with kv_memory");
  add_compat_keys(t);
  add_vllm_ignores(t);
  return t;
}

KeyTable<DpoConfig> dpo_keys() {
  using C = DpoConfig;
  KeyTable<C> t;
  add_training_keys(t);
  add_model_keys(t);
  t.add("beta", &C::beta, "DPO beta (IPO's tau)");
  add_reference_key(t);
  std::vector<std::pair<std::string, DpoLossType>> losses;
  for (DpoLossType l : dpo_loss_types()) losses.emplace_back(std::string(dpo_loss_type_name(l)), l);
  losses.emplace_back("aot_pair", DpoLossType::aot_unpaired);  // TRL's earlier name
  t.add_enum("loss_type", &C::loss_type, losses, "DPO loss (TRL's loss types, rl/dpo_loss.h)");
  t.add("label_smoothing", &C::label_smoothing,
        "Label noise ε in [0, 0.5): sigmoid (cDPO), robust, aot, aot_unpaired; exo_pair's ε (> 0)");
  t.add("discopop_tau", &C::discopop_tau, "DiscoPOP's τ (loss_type discopop)");
  t.add("ld_alpha", &C::ld_alpha,
        "LD-DPO: weight of the tokens beyond the shorter completion, in [0, 1] (null: off)");
  t.add("max_length", &C::max_length, "Tokens of prompt + completion at most")
      .alias("max_seq_length");
  t.add("max_prompt_length", &C::max_prompt_length, "Prompt tokens at most (null: no limit)");
  t.add("truncation", &C::truncation, "Cut rows over the limits (default: an error)");
  add_compat_keys(t);
  t.ignore("gpu_memory_utilization", "dpo runs no generation engine");
  return t;
}

KeyTable<KtoConfig> kto_keys() {
  using C = KtoConfig;
  KeyTable<C> t;
  add_training_keys(t);
  add_model_keys(t);
  t.add("beta", &C::beta, "KTO beta (higher: closer to the reference)");
  t.add("desirable_weight", &C::desirable_weight, "Weight of the desirable examples' losses");
  t.add("undesirable_weight", &C::undesirable_weight, "Weight of the undesirable examples' losses");
  add_reference_key(t);
  t.add_enum("loss_type", &C::loss_type,
             {{"kto", KtoLossType::kto}, {"apo_zero_unpaired", KtoLossType::apo_zero_unpaired}},
             "KTO loss: kto (with the batch's KL estimate) or apo_zero_unpaired");
  t.add("max_length", &C::max_length, "Tokens of prompt + completion at most")
      .alias("max_seq_length");
  t.add("truncation", &C::truncation,
        "Keep the first max_length tokens of a longer row (default: an error)");
  add_compat_keys(t);
  t.ignore("gpu_memory_utilization", "kto runs no generation engine");
  t.ignore("precompute_ref_log_probs",
           "fp8rl computes each example's reference log-probs once and keeps them");
  t.ignore("precompute_ref_batch_size", "fp8rl computes the reference log-probs per batch");
  t.ignore("train_sampling_strategy", "kto reads the examples in file order",
           only({"sequential"},
                "kto's KL estimate pairs each example with its batch's "
                "neighbours in file order (TRL's sequential sampling)"));
  t.ignore("sync_ref_model", "fp8rl's reference is the base or the starting adapter",
           only({false}, "TR-DPO's reference sync is not supported with LoRA (as in TRL)"));
  for (const char* k : {"ref_model_mixup_alpha", "ref_model_sync_steps"})
    t.ignore(k, "without sync_ref_model");
  return t;
}

KeyTable<RewardConfig> reward_keys() {
  using C = RewardConfig;
  KeyTable<C> t;
  add_training_keys(t);
  add_model_keys(t);
  t.add("max_length", &C::max_length, "Tokens of each chosen or rejected sequence at most")
      .alias("max_seq_length");
  t.add("truncation", &C::truncation, "Cut sequences over max_length (default: an error)");
  t.add("center_rewards_coefficient", &C::center_rewards_coefficient,
        "Weight of mean((r_chosen + r_rejected)^2) in the loss, >= 0 (null: off)");
  add_compat_keys(t);
  t.ignore("gpu_memory_utilization", "reward runs no generation engine");
  return t;
}

KeyTable<PpoConfig> ppo_keys() {
  using C = PpoConfig;
  KeyTable<C> t;
  add_training_keys(t);
  add_model_keys(t);
  // Rollout.
  t.add("num_ppo_epochs", &C::num_ppo_epochs, "Passes over each rollout batch (>= 1)");
  t.add("num_mini_batches", &C::num_mini_batches,
        "Mini-batches (optimizer steps) per pass; must divide per_device_train_batch_size x "
        "gradient_accumulation_steps");
  t.add("total_episodes", &C::total_episodes,
        "Prompts to train on (null: num_train_epochs x the dataset; max_steps > 0 overrides)");
  t.add("local_rollout_forward_batch_size", &C::local_rollout_forward_batch_size,
        "Responses per chunk of the rollout's logprob and value passes");
  t.add("response_length", &C::response_length, "New tokens per response at most");
  t.add("stop_token", &C::stop_token,
        "eos: responses end at (and keep) the EOS token; null: every response runs "
        "response_length tokens");
  t.add("stop_token_id", &C::stop_token_id,
        "Responses end at this token id (exclusive with stop_token)");
  t.add("temperature", &C::temperature, "Sampling temperature (> 0; the logprobs' too)");
  t.add("missing_eos_penalty", &C::missing_eos_penalty,
        "Subtracted from the score of a response without EOS (>= 0; null: none)");
  t.add("max_prompt_length", &C::max_prompt_length, "Prompt tokens at most (null: no limit)");
  t.add("truncation", &C::truncation,
        "Cut prompts over max_prompt_length to their last tokens (default: an error)");
  // Loss.
  t.add("cliprange", &C::cliprange, "Policy ratio clip: [1 - c, 1 + c] (> 0)");
  t.add("cliprange_value", &C::cliprange_value, "Value clip around the rollout's values (> 0)");
  t.add("vf_coef", &C::vf_coef, "Weight of the value loss (>= 0)");
  t.add("gamma", &C::gamma, "Discount, in [0, 1]");
  t.add("lam", &C::lam, "GAE lambda, in [0, 1]");
  t.add("kl_coef", &C::kl_coef, "Per-token KL penalty in the rewards (>= 0)");
  t.add_choice("kl_estimator", &C::kl_estimator, {"k1", "k3"},
               "KL estimator: k1 (logp - ref) or k3");
  t.add("whiten_rewards", &C::whiten_rewards, "Whiten the per-token rewards over the batch");
  add_reference_key(t);
  t.add("value_adapter", &C::value_adapter,
        "Reward-model adapter (SEQ_CLS, fp8rl reward's output) the value model starts from; "
        "empty: a fresh adapter and head");
  // Rewards.
  t.add("rewards", &C::rewards, "Reward specs (a list; in YAML, or JSON text as a flag)");
  t.add("reward_process", &C::reward_process,
        "Command of an external reward process; replaces `rewards`");
  t.add("reward_weights", &C::reward_weights, "One weight per reward (default: all 1)");
  // Engine.
  t.add("kv_memory", &C::kv_memory, "KV cache GiB; 0: the engine's choice");
  t.add_choice("kv_dtype", &C::kv_dtype, {"bf16", "fp8"}, "KV cache dtype");
  t.add("max_num_seqs", &C::max_num_seqs, "Sequences per engine step");
  t.add("max_num_batched_tokens", &C::max_num_batched_tokens,
        "Tokens per engine step (chunked prefill budget)");
  add_compat_keys(t);
  t.ignore("gpu_memory_utilization", "ppo sizes the engine's KV pool with kv_memory");
  for (const char* k : {"sft_model_path", "reward_model_path"})
    t.ignore(k,
             "fp8rl's policy is `model`; a reward model is a `rewards` entry (type: "
             "reward_model)");
  for (const char* k : {"model_adapter_name", "ref_adapter_name"})
    t.ignore(k, "fp8rl's reference is reference_model (the base or the starting adapter)");
  t.ignore("num_sample_generations", "fp8rl logs each update's metrics, no sample tables");
  t.ignore("ds3_gather_for_generation", kOwnEngine);
  // GRPO's multi-turn keys: PPO's responses are single-turn for now.
  for (const char* k : {"environment", "tools", "environment_server"})
    t.ignore(k, "ppo samples single-turn responses",
             only({nullptr, "", nlohmann::json::array()},
                  "ppo has no environments or tools yet; multi-turn episodes run in fp8rl grpo"));
  return t;
}

}  // namespace fp8rl::cli
