// config.json -> ModelConfig, read as ModelConfig::load reads it (the JSON policy, then
// from_json).
#include <cmath>

#include "formats/json_read.h"
#include "formats/model_config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fp8rl::fuzz::run([&] {
    const fp8rl::ModelConfig c = fp8rl::ModelConfig::from_json(
        fp8rl::parse_json_text(fp8rl::fuzz::as_text(data, size), "config.json"));
    // What the model builds from an accepted config: sizes derived from its fields must not
    // overflow (UBSan reports it) and must be positive; the numbers it computes with are finite.
    if (c.q_dim() <= 0 || c.kv_dim() <= 0 || int64_t(c.layers.size()) != c.num_layers)
      __builtin_trap();
    if (!std::isfinite(c.rms_norm_eps) || !std::isfinite(c.attention_scale) ||
        !std::isfinite(c.embedding_scale))
      __builtin_trap();
    for (const fp8rl::LayerConfig& l : c.layers)
      if (!std::isfinite(l.rope.theta) || !(l.rope.theta > 0) || !std::isfinite(l.rope.factor))
        __builtin_trap();
  });
}
