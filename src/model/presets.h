// Named model configurations for `fp8rl init` and benchmarks: tiny test sizes, a ~100M model
// for CPU baselines, and the published configs of real models (random weights, real shapes).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "formats/model_config.h"

namespace fp8rl {

// Preset names are "<arch>-<size>", e.g. "qwen3-tiny", "qwen3-8b", "llama-3.1-8b".
std::vector<std::string> preset_names();
// The HF config.json of a preset (transformers-4 field names, which transformers 5 also reads).
nlohmann::json preset_config_json(const std::string& name);
inline ModelConfig preset_config(const std::string& name) {
  return ModelConfig::from_json(preset_config_json(name));
}

// Writes a random-initialized bf16 checkpoint (config.json, generation_config.json,
// model.safetensors or shards) as HF initializes one: linears and embeddings ~ N(0, 0.02),
// norms at their neutral value. Deterministic in `seed`.
void write_random_checkpoint(const nlohmann::json& config, const std::string& out_dir,
                             uint64_t seed);

}  // namespace fp8rl
