// Compiled with -ffp-contract=off (src/ops/CMakeLists.txt): ops/optimizer_rules.h relies on
// every fp64 operation being rounded on its own, as the CUDA kernels' intrinsics are.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/cpu/optimizer_ops.h"

namespace fp8rl::ops::cpu {

namespace {

int64_t num_blocks(int64_t n) {
  return (n + kNormBlockElements - 1) / kNormBlockElements;
}

// fn(begin, end) for each block [begin, end) of [0, n), blocks spread over the cores.
template <typename Fn>
void for_each_block(int64_t n, Fn&& fn) {
  parallel_for(0, num_blocks(n), [&](int64_t b) {
    const int64_t begin = b * kNormBlockElements;
    fn(begin, std::min(n, begin + kNormBlockElements));
  });
}

}  // namespace

void adamw_step(const AdamWStep& step, const TensorView& params, const TensorView& grads,
                float grad_scale, const TensorView& exp_avg, const TensorView& exp_avg_sq,
                const TensorView& compute_copy) {
  float* p = params.ptr<float>();                                                  // [P] f32
  const float* g = grads.ptr<float>();                                             // [P] f32
  float* m = exp_avg.ptr<float>();                                                 // [P] f32
  float* v = exp_avg_sq.ptr<float>();                                              // [P] f32
  uint16_t* copy = compute_copy.empty() ? nullptr : compute_copy.ptr<uint16_t>();  // [P] bf16
  for_each_block(params.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      optimizer_rules::adamw(step, optimizer_rules::scaled_gradient(g[i], grad_scale), p[i], m[i],
                             v[i]);
      if (copy != nullptr) copy[i] = f32_to_bf16(p[i]);
    }
  });
}

void sgd_step(const SgdStep& step, const TensorView& params, const TensorView& grads,
              float grad_scale, const TensorView& momentum_buffer, const TensorView& compute_copy) {
  float* p = params.ptr<float>();                                                  // [P] f32
  const float* g = grads.ptr<float>();                                             // [P] f32
  float* b = momentum_buffer.empty() ? nullptr : momentum_buffer.ptr<float>();     // [P] f32
  uint16_t* copy = compute_copy.empty() ? nullptr : compute_copy.ptr<uint16_t>();  // [P] bf16
  for_each_block(params.numel(), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      optimizer_rules::sgd(step, optimizer_rules::scaled_gradient(g[i], grad_scale), p[i],
                           b == nullptr ? nullptr : b + i);
      if (copy != nullptr) copy[i] = f32_to_bf16(p[i]);
    }
  });
}

double l2_norm(const TensorView& x) {
  const int64_t n = x.numel();
  const float* v = x.ptr<float>();  // [P] f32
  std::vector<double> partial(size_t(num_blocks(n)), 0.0);
  for_each_block(n, [&](int64_t begin, int64_t end) {
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) sum += double(v[i]) * double(v[i]);
    partial[size_t(begin / kNormBlockElements)] = sum;
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return std::sqrt(total);
}

}  // namespace fp8rl::ops::cpu
