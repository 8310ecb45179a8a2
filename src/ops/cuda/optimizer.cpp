// The CUDA backend of ops/optimizer.h: views into launches (optimizer.cu).
#include <cmath>

#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/optimizer_launch.h"
#include "ops/cuda/view_pointers.h"

namespace fp8rl::cuda {

namespace {

uint16_t* bits(const TensorView& t) {
  return t.empty() ? nullptr : static_cast<uint16_t*>(t.data);
}

}  // namespace

void adamw_step(Backend& b, const ops::AdamWStep& step, const TensorView& params,
                const TensorView& grads, float grad_scale, const TensorView& exp_avg,
                const TensorView& exp_avg_sq, const TensorView& compute_copy) {
  launch_adamw_step(step, f32(params), f32(grads), grad_scale, f32(exp_avg), f32(exp_avg_sq),
                    bits(compute_copy), params.numel(), b.stream());
}

void sgd_step(Backend& b, const ops::SgdStep& step, const TensorView& params,
              const TensorView& grads, float grad_scale, const TensorView& momentum_buffer,
              const TensorView& compute_copy) {
  launch_sgd_step(step, f32(params), f32(grads), grad_scale,
                  momentum_buffer.empty() ? nullptr : f32(momentum_buffer), bits(compute_copy),
                  params.numel(), b.stream());
}

double l2_norm(Backend& b, const TensorView& x) {
  const int64_t n = x.numel();
  const size_t mark = b.arena().mark();
  // The block sums and the total, as i64 elements of the arena (8 bytes each).
  const TensorView sums = b.arena().alloc({sum_squares_scratch(n)}, DType::i64);
  double total = 0.0;
  try {
    launch_sum_squares(f32(x), n, static_cast<double*>(sums.data), b.stream());
    CUDA_CHECK(cudaMemcpyAsync(&total, static_cast<double*>(sums.data) + (sums.numel() - 1),
                               sizeof(double), cudaMemcpyDeviceToHost, b.stream()));
    CUDA_CHECK(cudaStreamSynchronize(b.stream()));
  } catch (...) {
    b.arena().rewind(mark);
    throw;
  }
  b.arena().rewind(mark);
  return std::sqrt(total);
}

}  // namespace fp8rl::cuda
