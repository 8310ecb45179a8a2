#include "model/rope.h"

#include <algorithm>
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
  } else if (rope.type == RopeConfig::Type::yarn) {
    // transformers' _compute_yarn_parameters: the correction range in Python doubles, the
    // frequencies and the ramp in fp32 (the range's width rounded to fp32 as torch does).
    const double dim = double(head_dim);
    const auto correction_dim = [&](double rotations) {
      return dim *
             std::log(double(rope.original_max_position_embeddings) / (rotations * 2 * M_PI)) /
             (2 * std::log(rope.theta));
    };
    double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
    if (rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    const float ramp_low = float(low), ramp_width = float(high - low);
    const float factor = float(rope.factor);
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const float pos_freq = std::pow(base, float(2 * i) / float(head_dim));
      const float extrapolation = 1.0f / pos_freq;
      const float interpolation = 1.0f / (factor * pos_freq);
      const float ramp = std::clamp((float(i) - ramp_low) / ramp_width, 0.0f, 1.0f);
      const float extrapolation_factor = 1.0f - ramp;
      f[size_t(i)] =
          interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
  }
  return f;
}

}  // namespace fp8rl
