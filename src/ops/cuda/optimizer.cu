// The optimizer's kernels. The updates are one thread per element evaluating
// ops/optimizer_rules.h, the same code as the CPU reference. The norm reproduces the CPU's
// summation order exactly, which fixes its parallel shape: one thread sums one block of
// kNormBlockElements in index order (a dependent chain of fp64 adds, ~16k long: tens of
// microseconds), and one thread then adds the block sums in order (~5k for the 87M masters
// of Qwen3-8B at r = 32). Estimated well under a millisecond per step, not yet measured.
#include <cuda_bf16.h>

#include "ops/cuda/common.cuh"
#include "ops/cuda/optimizer_launch.h"

namespace fp8rl::cuda {

namespace {

namespace rules = ops::optimizer_rules;

__global__ void adamw_kernel(ops::AdamWStep step, float* __restrict__ params,
                             const float* __restrict__ grads, float grad_scale,
                             float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq,
                             uint16_t* __restrict__ copy, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float p = params[i], m = exp_avg[i], v = exp_avg_sq[i];
    rules::adamw(step, rules::scaled_gradient(grads[i], grad_scale), p, m, v);
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (copy != nullptr) copy[i] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
  }
}

__global__ void sgd_kernel(ops::SgdStep step, float* __restrict__ params,
                           const float* __restrict__ grads, float grad_scale,
                           float* __restrict__ buffer, uint16_t* __restrict__ copy, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float p = params[i];
    rules::sgd(step, rules::scaled_gradient(grads[i], grad_scale), p,
               buffer == nullptr ? nullptr : buffer + i);
    params[i] = p;
    if (copy != nullptr) copy[i] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
  }
}

// One thread per block of kNormBlockElements: its squares summed in index order.
__global__ void block_sum_squares_kernel(const float* __restrict__ x, int64_t n,
                                         double* __restrict__ sums, int64_t blocks) {
  const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  const int64_t begin = b * ops::kNormBlockElements;
  const int64_t end = begin + ops::kNormBlockElements < n ? begin + ops::kNormBlockElements : n;
  double sum = 0.0;
#pragma unroll 8
  for (int64_t i = begin; i < end; ++i) {
    const double v = x[i];
    sum = rules::add(sum, rules::mul(v, v));
  }
  sums[b] = sum;
}

// sums[blocks] = the block sums added in block order.
__global__ void total_kernel(double* sums, int64_t blocks) {
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b) total = rules::add(total, sums[b]);
  sums[blocks] = total;
}

int64_t norm_blocks(int64_t n) {
  return (n + ops::kNormBlockElements - 1) / ops::kNormBlockElements;
}

}  // namespace

void launch_adamw_step(const ops::AdamWStep& step, float* params, const float* grads,
                       float grad_scale, float* exp_avg, float* exp_avg_sq, uint16_t* copy,
                       int64_t n, cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n, 256), 256, 0, s>>>(step, params, grads, grad_scale, exp_avg,
                                                exp_avg_sq, copy, n);
  FP8RL_LAUNCH_CHECK("adamw_step");
}

void launch_sgd_step(const ops::SgdStep& step, float* params, const float* grads, float grad_scale,
                     float* buffer, uint16_t* copy, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n, 256), 256, 0, s>>>(step, params, grads, grad_scale, buffer, copy, n);
  FP8RL_LAUNCH_CHECK("sgd_step");
}

int64_t sum_squares_scratch(int64_t n) {
  return norm_blocks(n) + 1;
}

void launch_sum_squares(const float* x, int64_t n, double* scratch, cudaStream_t s) {
  const int64_t blocks = norm_blocks(n);
  if (blocks > 0) {
    // 64 threads per CUDA block spreads the few thousand chains over the multiprocessors.
    block_sum_squares_kernel<<<unsigned((blocks + 63) / 64), 64, 0, s>>>(x, n, scratch, blocks);
    FP8RL_LAUNCH_CHECK("block_sum_squares");
  }
  total_kernel<<<1, 1, 0, s>>>(scratch, blocks);
  FP8RL_LAUNCH_CHECK("sum_squares_total");
}

}  // namespace fp8rl::cuda
