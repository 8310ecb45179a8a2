// out = a + alpha * b over f32 gradients (the backward's residual sums); a header of its own
// because every .cu file includes kernels.h and a change there rebuilds them all.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8rl::cuda {

void launch_add_f32(const float* a, const float* b, float alpha, float* out, int64_t n,
                    cudaStream_t s);

}  // namespace fp8rl::cuda
