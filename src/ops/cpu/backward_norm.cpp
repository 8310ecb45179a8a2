// Backward of the row-wise and element-wise ops: RMSNorm, RoPE, gated activations, softcap;
// and LoRA's dropout mask.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/backward_ops.h"
#include "ops/uniform_hash.h"

namespace fp8rl::ops::cpu {

void inv_rms(const TensorView& x, float eps, const TensorView& out) {
  const int64_t d = x.dim(x.rank() - 1), rows = x.numel() / std::max<int64_t>(d, 1);
  const float* xp = x.ptr<const float>();
  float* o = out.ptr<float>();
  // The forward's expression (norm.cpp norm_row), so the value is the one it used.
  parallel_for(0, rows, [&](int64_t r) {
    const float* in = xp + r * d;
    float ss = 0.0f;
    for (int64_t j = 0; j < d; ++j) ss += in[j] * in[j];
    o[r] = 1.0f / std::sqrt(ss / float(d) + eps);
  });
}

void rms_norm_backward(const TensorView& x, const TensorView& w, const TensorView& inv_rms,
                       bool plus_one, const TensorView& dy, const TensorView& dx,
                       const TensorView& dw) {
  const int64_t d = x.dim(x.rank() - 1), rows = x.numel() / std::max<int64_t>(d, 1);
  std::vector<float> weight(static_cast<size_t>(d));
  for (int64_t j = 0; j < d; ++j) {
    const float v = load_as_f32(w.data, w.dtype, size_t(j));
    weight[size_t(j)] = plus_one ? 1.0f + v : v;
  }
  const float* xp = x.ptr<const float>();
  const float* ir = inv_rms.ptr<const float>();
  const float* g = dy.ptr<const float>();
  // dw first: dx may overwrite dy. Columns in chunks of 16, rows summed in order.
  if (!dw.empty()) {
    constexpr int64_t kCols = 16;
    float* dwp = dw.ptr<float>();
    parallel_for(0, (d + kCols - 1) / kCols, [&](int64_t c) {
      const int64_t j0 = c * kCols, j1 = std::min(d, j0 + kCols);
      float acc[kCols] = {};
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += g[r * d + j] * (xp[r * d + j] * ir[r]);
      for (int64_t j = j0; j < j1; ++j) dwp[j] += acc[j - j0];
    });
  }
  float* o = dx.ptr<float>();
  parallel_for(0, rows, [&](int64_t r) {
    const float* xr = xp + r * d;
    const float* gr = g + r * d;
    const float inv = ir[r];
    float dot = 0.0f;  // sum_j (dy_j w_j) x_hat_j
    for (int64_t j = 0; j < d; ++j) dot += (gr[j] * weight[size_t(j)]) * (xr[j] * inv);
    const float mean = dot / float(d);
    float* out = o + r * d;
    for (int64_t j = 0; j < d; ++j)
      out[j] = inv * (gr[j] * weight[size_t(j)] - (xr[j] * inv) * mean);
  });
}

void rope_backward(const TensorView& dy, const int32_t* positions, const TensorView& inv_freq) {
  const int64_t t_count = dy.dim(0), heads = dy.dim(1), d = dy.dim(2), half = d / 2;
  const float* f = inv_freq.ptr<const float>();
  float* data = dy.ptr<float>();
  parallel_for(0, t_count, [&](int64_t t) {
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(positions[t]) * f[i];  // the forward's fp32 angle
      c[size_t(i)] = std::cos(angle);
      s[size_t(i)] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = data + (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[size_t(i)] + b * s[size_t(i)];
        v[i + half] = b * c[size_t(i)] - a * s[size_t(i)];
      }
    }
  });
}

namespace {
// act_and_grad(g) -> {act(g), act'(g)}.
template <typename Act>
void gated_backward(const TensorView& gate, const TensorView& up, const TensorView& dout,
                    const TensorView& dgate, const TensorView& dup, Act act_and_grad) {
  const float* g = gate.ptr<const float>();
  const float* u = up.ptr<const float>();
  const float* d = dout.ptr<const float>();
  float* dg = dgate.ptr<float>();
  float* du = dup.ptr<float>();
  const int64_t rows = gate.dim(0), cols = gate.numel() / std::max<int64_t>(rows, 1);
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j) {
      const float gj = g[j], uj = u[j], dj = d[j];  // read all before writing (aliasing)
      const auto [a, da] = act_and_grad(gj);
      dg[j] = dj * uj * da;
      du[j] = dj * a;
    }
  });
}
}  // namespace

void silu_mul_backward(const TensorView& gate, const TensorView& up, const TensorView& dout,
                       const TensorView& dgate, const TensorView& dup) {
  gated_backward(gate, up, dout, dgate, dup, [](float x) {
    const float s = 1.0f / (1.0f + std::exp(-x));
    return std::pair<float, float>(x / (1.0f + std::exp(-x)), s * (1.0f + x * (1.0f - s)));
  });
}

void gelu_tanh_mul_backward(const TensorView& gate, const TensorView& up, const TensorView& dout,
                            const TensorView& dgate, const TensorView& dup) {
  gated_backward(gate, up, dout, dgate, dup, [](float x) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    constexpr float kCubic = 0.044715f;
    const float t = std::tanh(kSqrt2OverPi * (x + kCubic * x * x * x));
    const float a = 0.5f * x * (1.0f + t);
    const float da = 0.5f * (1.0f + t) +
                     0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    return std::pair<float, float>(a, da);
  });
}

void softcap_backward(const TensorView& y, float cap, const TensorView& dy, const TensorView& dx) {
  const float* yp = y.ptr<const float>();
  const float* g = dy.ptr<const float>();
  float* o = dx.ptr<float>();
  const int64_t rows = y.dim(0), cols = y.numel() / std::max<int64_t>(rows, 1);
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j) {
      const float t = yp[j] / cap;
      o[j] = g[j] * (1.0f - t * t);
    }
  });
}

float dropout_mask(const LoraDropout& d, uint64_t i) {
  if (d.p <= 0.0f) return 1.0f;
  // uniform_hash is uniform on [-1, 1): u >= 2p - 1 with probability 1 - p.
  return uniform_hash(d.seed, i, 1.0f) >= 2.0f * d.p - 1.0f ? 1.0f / (1.0f - d.p) : 0.0f;
}

void lora_dropout(const TensorView& x, const LoraDropout& d, const TensorView& out) {
  const float* xp = x.ptr<const float>();
  float* o = out.ptr<float>();
  const int64_t rows = x.dim(0), cols = x.numel() / std::max<int64_t>(rows, 1);
  parallel_for(0, rows, [&](int64_t i) {
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j) o[j] = xp[j] * dropout_mask(d, uint64_t(j));
  });
}

}  // namespace fp8rl::ops::cpu
