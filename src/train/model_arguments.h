// The model and adapter keys every fp8rl run shares: the model directory, the FP8 scheme and
// device it runs in, and the LoRA adapter to train, the latter named as TRL's ModelConfig
// (lora_r, lora_alpha, ...) with TRL's defaults unless a comment says why not.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/adapter.h"

namespace fp8rl {

// PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for the model types fp8rl runs
// (config.json's model_type); nullopt for another (PEFT then asks for target_modules).
std::optional<std::vector<std::string>> peft_default_target_modules(const std::string& model_type);

struct ModelArguments {
  std::string model;    // Hugging Face model directory
  std::string adapter;  // a PEFT adapter directory to start from; empty: a fresh adapter
  // "auto" (as stored), "off", "row", "block", "tensor" (cli::parse_fp8_option).
  std::string fp8 = "auto";
  std::string device = "cpu";  // "cpu" | "cuda" (cli::parse_device)
  // GiB of device memory the run may hold (ops/memory_budget.h); null: the whole device.
  std::optional<double> gpu_memory;

  int64_t lora_r = 16;
  double lora_alpha = 32;
  double lora_dropout = 0.05;
  // TRL's disable_dropout: the adapter keeps lora_dropout in its config (as PEFT saves it) but
  // trains without it. DPOConfig's default is true, GRPOConfig's false; SFTConfig has no such
  // key (false here).
  bool disable_dropout = false;
  // null (TRL's None): PEFT's default for the model's architecture (q_proj, v_proj for every
  // architecture fp8rl runs), filled in by resolve_target_modules before the run starts.
  // all-linear adapts all seven projections, as Unsloth's recipes and the examples do.
  std::optional<std::vector<std::string>> lora_target_modules;
  bool use_rslora = false;
  // PEFT's init_lora_weights: "default" (PEFT's True: A Kaiming-uniform, B zero) | "gaussian".
  std::string init_lora_weights = "default";
  // Unsloth's get_peft_model(random_state=...): the seed of the adapter's initialization
  // alone; null: `seed` (which also orders the data and seeds sampling).
  std::optional<int64_t> random_state;
  // Unsloth's from_pretrained(max_lora_rank=...), vLLM's limit on the rank it serves: a rank
  // above it is an error there, so it is one here; null: no limit.
  std::optional<int64_t> max_lora_rank;
  // Not a key: set by fp8rl reward, whose fresh adapter carries a score head (PEFT's task_type
  // SEQ_CLS, LoraConfig::sequence_classification).
  bool sequence_classification = false;

  // Throws fp8rl::Error naming the key, its value and the allowed values.
  void validate() const;
  // With `adapter` set, the adapter's own settings (its adapter_config.json: r, lora_alpha,
  // lora_dropout, target_modules, use_rslora) replace these keys, as PEFT continues an adapter
  // with its config; a key in `given` (set by the config file or a flag) whose value differs
  // is an error naming both values. Without `adapter`, nothing changes.
  void adopt_adapter_config(const std::set<std::string>& given);
  // PEFT's LoraConfig of these keys (for a fresh adapter; --adapter brings its own);
  // lora_target_modules must be resolved.
  LoraConfig lora_config() const;
  // An unset lora_target_modules becomes PEFT's default for the model directory's
  // config.json model_type (peft_default_target_modules); an error when PEFT has none. Nothing
  // changes when the key is set, or when `adapter` is (its own config decides), or when the
  // model has no readable config.json (loading it reports that).
  void resolve_target_modules();
  // The LoRA dropout of the training passes: lora_dropout unless disable_dropout.
  double training_lora_dropout() const { return disable_dropout ? 0.0 : lora_dropout; }
  // The seed of a fresh adapter's initialization.
  uint64_t adapter_init_seed(int64_t seed) const { return uint64_t(random_state.value_or(seed)); }

 private:
  LoraConfig lora_config_unchecked() const;
};

}  // namespace fp8rl
