#include "model/rope.h"

#include <cmath>

namespace fp8rl {

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  std::vector<float> f(static_cast<size_t>(head_dim / 2));
  // fp32 throughout, the order of operations of transformers' _compute_default_rope_parameters.
  const float base = float(rope.theta);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float exponent = float(2 * i) / float(head_dim);
    f[size_t(i)] = 1.0f / std::pow(base, exponent);
  }
  if (rope.type == RopeConfig::Type::linear) {
    for (float& v : f) v = v / float(rope.factor);
  } else if (rope.type == RopeConfig::Type::llama3) {
    const float factor = float(rope.factor);
    const float old_len = float(rope.original_max_position_embeddings);
    const float low_wavelen = old_len / float(rope.low_freq_factor);
    const float high_wavelen = old_len / float(rope.high_freq_factor);
    for (float& v : f) {
      const float wavelen = 2.0f * float(M_PI) / v;
      if (wavelen > low_wavelen) {
        v = v / factor;
      } else if (wavelen >= high_wavelen) {
        const float smooth = (old_len / wavelen - float(rope.low_freq_factor)) /
                             float(rope.high_freq_factor - rope.low_freq_factor);
        v = (1.0f - smooth) * v / factor + smooth * v;
      }
    }
  }
  return f;
}

}  // namespace fp8rl
