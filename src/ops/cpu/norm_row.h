// One row of RMSNorm, shared by norm.cpp (rms_norm, add_rms_norm and their fused quantizers)
// and rope.cpp (rms_norm_rope): every op normalizes through the one function, so the fused
// ops are the unfused ones bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

// The effective norm weight: w, or 1 + w for Gemma, in f32.
std::vector<float> norm_weight(const TensorView& w, int64_t d, bool plus_one);

// One row of RMSNorm: out = (in * inv) * weight with inv = 1 / sqrt(sum(in^2) / d + eps).
// in and out may alias.
void norm_row(const float* in, const float* weight, int64_t d, float eps, float* out, Rounding r);

}  // namespace fp8rl::ops::cpu
