// Rotary position embedding on the CPU (the reference of ops/cuda/rope.cu): rope in place, and
// rms_norm_rope (Qwen3 / Gemma's per-head q/k norm, then rope) into out; on the CPU ops.cpp
// runs rope_store_kv as rms_norm_rope then store_kv (paged_attention.cpp). With Rounding::bf16
// each output is rounded as the CUDA kernel stores it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/norm_row.h"

namespace fp8rl::ops::cpu {

namespace {

// cos/sin of the same fp32 angle HF computes: position * inv_freq, in fp32.
void rope_angles(int32_t position, const float* inv_freq, int64_t half, std::vector<float>& c,
                 std::vector<float>& s) {
  c.resize(size_t(half));
  s.resize(size_t(half));
  for (int64_t i = 0; i < half; ++i) {
    const float angle = float(position) * inv_freq[i];
    c[size_t(i)] = std::cos(angle);
    s[size_t(i)] = std::sin(angle);
  }
}

// Rotates one head's D = 2 * half values in place (rotate-half layout).
void rope_head(float* v, const std::vector<float>& c, const std::vector<float>& s, int64_t half,
               Rounding r) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = v[i], b = v[i + half];
    v[i] = round_as(r, a * c[size_t(i)] - b * s[size_t(i)]);
    v[i + half] = round_as(r, b * c[size_t(i)] + a * s[size_t(i)]);
  }
}

}  // namespace

void rope(const TensorView& x, std::span<const int32_t> positions, const TensorView& inv_freq,
          Rounding r) {
  const int64_t t_count = x.dim(0), heads = x.dim(1), d = x.dim(2), half = d / 2;
  const float* f = inv_freq.ptr<float>();
  float* data = x.ptr<float>();
  parallel_for(0, t_count, [&](int64_t t) {
    std::vector<float> c, s;
    rope_angles(positions[size_t(t)], f, half, c, s);
    for (int64_t h = 0; h < heads; ++h) rope_head(data + (t * heads + h) * d, c, s, half, r);
  });
}

// rms_norm (when w is given) then rope, head by head, through the same row functions as the
// two ops, so the result is theirs bit for bit; out may have its own token stride.
void rms_norm_rope(const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   std::span<const int32_t> positions, const TensorView& inv_freq,
                   const TensorView& out, Rounding r) {
  const int64_t t_count = x.dim(0), heads = x.dim(1), d = x.dim(2), half = d / 2;
  const std::vector<float> weight = w.empty() ? std::vector<float>() : norm_weight(w, d, plus_one);
  const float* f = inv_freq.ptr<float>();
  const float* xi = x.ptr<float>();
  float* o = out.ptr<float>();
  parallel_for(0, t_count, [&](int64_t t) {
    std::vector<float> c, s;
    rope_angles(positions[size_t(t)], f, half, c, s);
    for (int64_t h = 0; h < heads; ++h) {
      const float* in = xi + t * x.strides[0] + h * d;
      float* v = o + t * out.strides[0] + h * d;
      if (!weight.empty())
        norm_row(in, weight.data(), d, eps, v, r);
      else if (v != in)
        std::copy(in, in + d, v);
      rope_head(v, c, s, half, r);
    }
  });
}

}  // namespace fp8rl::ops::cpu
