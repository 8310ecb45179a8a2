// Row-wise and element-wise ops: embedding, RMSNorm, RoPE, gated activations, add, softcap.
// With Rounding::bf16 each output is rounded as the CUDA kernel stores it (ops/cuda/*.cu:
// __float2bfloat16_rn of the same fp32 expression), and the embedding table is read as the
// bf16 copy Model::to_device uploads.
#include <cmath>

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

void rms_norm(const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out, Rounding r) {
  const int64_t rows = x.dim(0), d = x.dim(1);
  std::vector<float> weight(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) {
    const float v = load_as_f32(w.data, w.dtype, size_t(j));
    weight[size_t(j)] = plus_one ? 1.0f + v : v;
  }
  const float* xi = x.ptr<float>();
  float* o = out.ptr<float>();
  parallel_for(0, rows, [&](int64_t i) {
    const float* row = xi + i * d;
    float ss = 0.0f;
    for (int64_t j = 0; j < d; ++j) ss += row[j] * row[j];
    const float inv = 1.0f / std::sqrt(ss / float(d) + eps);
    for (int64_t j = 0; j < d; ++j) o[i * d + j] = round_as(r, (row[j] * inv) * weight[size_t(j)]);
  });
}

void rope(const TensorView& x, std::span<const int32_t> positions, const TensorView& inv_freq,
          Rounding r) {
  const int64_t t_count = x.dim(0), heads = x.dim(1), d = x.dim(2), half = d / 2;
  const float* f = inv_freq.ptr<float>();
  float* data = x.ptr<float>();
  parallel_for(0, t_count, [&](int64_t t) {
    // cos/sin of the same fp32 angle HF computes: position * inv_freq, in fp32.
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(positions[size_t(t)]) * f[i];
      c[size_t(i)] = std::cos(angle);
      s[size_t(i)] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = data + (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = round_as(r, a * c[size_t(i)] - b * s[size_t(i)]);
        v[i + half] = round_as(r, b * c[size_t(i)] + a * s[size_t(i)]);
      }
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

void add(const TensorView& a, const TensorView& b, const TensorView& out, Rounding r) {
  const float* pa = a.ptr<float>();
  const float* pb = b.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t rows = a.dim(0), cols = a.numel() / rows;
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j) o[j] = round_as(r, pa[j] + pb[j]);
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
