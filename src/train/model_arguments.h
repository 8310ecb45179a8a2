// The model and adapter keys every fp8rl run shares: the model directory, the FP8 scheme and
// device it runs in, and the LoRA adapter to train, the latter named as TRL's ModelConfig
// (lora_r, lora_alpha, ...) with TRL's defaults unless a comment says why not.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/adapter.h"

namespace fp8rl {

struct ModelArguments {
  std::string model;    // Hugging Face model directory
  std::string adapter;  // a PEFT adapter directory to start from; empty: a fresh adapter
  // "auto" (as stored), "off", "row", "block", "tensor" (cli::parse_fp8_option).
  std::string fp8 = "auto";
  std::string device = "cpu";  // "cpu" | "cuda" (cli::parse_device)

  int64_t lora_r = 16;
  double lora_alpha = 32;
  double lora_dropout = 0.05;
  // TRL's default (None) lets PEFT pick per-architecture defaults (q_proj, v_proj for Llama);
  // fp8rl adapts all seven projections, as Unsloth's FP8 RL recipes and QLoRA do: for the
  // same r it learns more per step, and the benchmarks of docs/PERFORMANCE.md use it.
  std::vector<std::string> lora_target_modules = {"all-linear"};
  bool use_rslora = false;
  // PEFT's init_lora_weights: "default" (PEFT's True: A Kaiming-uniform, B zero) | "gaussian".
  std::string init_lora_weights = "default";

  // Throws fp8rl::Error naming the key, its value and the allowed values.
  void validate() const;
  // With `adapter` set, the adapter's own settings (its adapter_config.json: r, lora_alpha,
  // lora_dropout, target_modules, use_rslora) replace these keys, as PEFT continues an adapter
  // with its config; a key in `given` (set by the config file or a flag) whose value differs
  // is an error naming both values. Without `adapter`, nothing changes.
  void adopt_adapter_config(const std::set<std::string>& given);
  // PEFT's LoraConfig of these keys (for a fresh adapter; --adapter brings its own).
  LoraConfig lora_config() const;
};

}  // namespace fp8rl
