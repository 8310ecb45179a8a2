#include "ops/cuda/common.cuh"
#include "ops/cuda/gradient_add.h"

namespace fp8rl::cuda {

namespace {

__global__ void add_f32_kernel(const float* __restrict__ a, const float* __restrict__ b,
                               float alpha, float* out, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + alpha * b[i];
}

}  // namespace

void launch_add_f32(const float* a, const float* b, float alpha, float* out, int64_t n,
                    cudaStream_t s) {
  if (n == 0) return;
  add_f32_kernel<<<grid_for(n, 256), 256, 0, s>>>(a, b, alpha, out, n);
  FP8RL_LAUNCH_CHECK("add_f32");
}

}  // namespace fp8rl::cuda
