// Rotary embedding frequencies per layer, computed as HF transformers does (fp32).
#pragma once

#include <vector>

#include "formats/model_config.h"

namespace fp8rl {

// inv_freq [head_dim / 2] for a rope configuration: default, linear (frequencies divided by
// the factor), llama3 (long wavelengths divided by the factor, a smooth blend between) or yarn
// (the same split by rotations over the original context, a linear ramp between). YaRN's
// attention factor is not in the frequencies: see attention_params (model/forward.h).
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

}  // namespace fp8rl
