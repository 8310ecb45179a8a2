// Row-wise and element-wise ops: embedding, RMSNorm, RoPE, gated activations, add, softcap.
// With Rounding::bf16 each output is rounded as the CUDA kernel stores it (ops/cuda/*.cu:
// __float2bfloat16_rn of the same fp32 expression), and the embedding table is read as the
// bf16 copy Model::to_device uploads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

void embedding(std::span<const int32_t> ids, const TensorView& table, float scale,
               const TensorView& out, Rounding r) {
  const int64_t h = table.dim(1);
  float* o = out.ptr<float>();
  parallel_for(0, int64_t(ids.size()), [&](int64_t t) {
    const size_t base = size_t(ids[size_t(t)]) * size_t(h);
    for (int64_t j = 0; j < h; ++j)
      o[t * h + j] =
          round_as(r, round_as(r, load_as_f32(table.data, table.dtype, base + size_t(j))) * scale);
  });
}

namespace {

// The effective norm weight: w, or 1 + w for Gemma, in f32.
std::vector<float> norm_weight(const TensorView& w, int64_t d, bool plus_one) {
  std::vector<float> weight(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) {
    const float v = load_as_f32(w.data, w.dtype, size_t(j));
    weight[size_t(j)] = plus_one ? 1.0f + v : v;
  }
  return weight;
}

// One row of RMSNorm: out = (in * inv) * weight with inv = 1 / sqrt(sum(in^2) / d + eps).
// in and out may alias. rms_norm, add_rms_norm and rms_norm_rope all normalize through this
// one function, so the fused ops are the unfused ones bit for bit.
void norm_row(const float* in, const float* weight, int64_t d, float eps, float* out,
              Rounding r) {
  float ss = 0.0f;
  for (int64_t j = 0; j < d; ++j) ss += in[j] * in[j];
  const float inv = 1.0f / std::sqrt(ss / float(d) + eps);
  for (int64_t j = 0; j < d; ++j) out[j] = round_as(r, (in[j] * inv) * weight[size_t(j)]);
}

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

void rms_norm(const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out, Rounding rd) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  const std::vector<float> weight = norm_weight(w, d, plus_one);
  const float* xi = x.ptr<float>();
  float* o = out.ptr<float>();
  parallel_for(0, rows,
               [&](int64_t r) { norm_row(xi + r * d, weight.data(), d, eps, o + r * d, rd); });
}

void add_rms_norm(const TensorView& x, const TensorView& delta, const TensorView& w, float eps,
                  bool plus_one, const TensorView& out, Rounding r) {
  add(x, delta, 1.0f, x, r);
  rms_norm(x, w, eps, plus_one, out, r);
}

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

namespace {
template <typename Act>
void gated(const TensorView& gate, const TensorView& up, const TensorView& out, Rounding r,
           Act act) {
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t rows = gate.dim(0), cols = gate.numel() / rows;
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j) o[j] = round_as(r, act(g[j]) * u[j]);
  });
}
}  // namespace

void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out, Rounding r) {
  gated(gate, up, out, r, [](float x) { return x / (1.0f + std::exp(-x)); });
}

void gelu_tanh_mul(const TensorView& gate, const TensorView& up, const TensorView& out,
                   Rounding r) {
  gated(gate, up, out, r, [](float x) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  });
}

void add(const TensorView& a, const TensorView& b, float alpha, const TensorView& out, Rounding r) {
  const float* pa = a.ptr<float>();
  const float* pb = b.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t rows = a.dim(0), cols = a.numel() / rows;
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j) o[j] = round_as(r, std::fma(alpha, pb[j], pa[j]));
  });
}

void softcap(const TensorView& x, float cap, Output kind, Rounding r) {
  if (kind == Output::f32) r = Rounding::none;
  float* p = x.ptr<float>();
  const int64_t rows = x.dim(0), cols = x.numel() / rows;
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j)
      p[j] = round_as(r, cap * std::tanh(p[j] / cap));
  });
}

}  // namespace fp8rl::ops::cpu
