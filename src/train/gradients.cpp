#include "train/gradients.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "ops/optimizer.h"
#include "train/block_loop.h"

namespace fp8rl {

std::span<float> f32_span(const TensorView& t) {
  CHECK(t.dtype == DType::f32, "expected an f32 tensor, got {}", dtype_name(t.dtype));
  CHECK(t.device == Device::cpu, "expected a host tensor, got one on {}", device_name(t.device));
  CHECK(t.is_contiguous(), "expected a contiguous tensor of shape {}", t.shape.str());
  return {t.ptr<float>(), size_t(t.numel())};
}

void accumulate_gradients(std::span<float> acc, std::span<const float> micro) {
  CHECK(acc.size() == micro.size(), "accumulate_gradients: {} accumulated vs {} new gradients",
        acc.size(), micro.size());
  for_each_block(int64_t(acc.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) acc[i] += micro[i];
  });
}

void scale_gradients(std::span<float> grads, double factor) {
  const float f = float(factor);
  for_each_block(int64_t(grads.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) grads[i] *= f;
  });
}

double grad_norm(std::span<const float> grads) {
  Context cpu;
  return ops::l2_norm(
      cpu, TensorView(const_cast<float*>(grads.data()), DType::f32, {int64_t(grads.size())}));
}

double clip_grad_norm(std::span<float> grads, double max_norm) {
  CHECK(max_norm >= 0.0 && std::isfinite(max_norm), "max_grad_norm must be finite and >= 0, got {}",
        max_norm);
  const double total_norm = grad_norm(grads);
  clip_to_max_norm(grads, total_norm, max_norm);
  return total_norm;
}

void clip_to_max_norm(std::span<float> grads, double total_norm, double max_norm) {
  const float factor = clip_factor(total_norm, max_norm);
  if (factor != 1.0f) scale_gradients(grads, factor);
}

float clip_factor(double total_norm, double max_norm) {
  if (max_norm == 0.0 || !std::isfinite(total_norm)) return 1.0f;
  const double clip_coef = max_norm / (total_norm + 1e-6);
  return clip_coef < 1.0 ? float(clip_coef) : 1.0f;
}

}  // namespace fp8rl
