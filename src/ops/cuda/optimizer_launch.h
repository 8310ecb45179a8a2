// Launchers of optimizer.cu (the optimizer's updates and the gradient norm, ops/optimizer.h)
// on raw device pointers; a header of its own because every .cu file includes kernels.h and
// a change there rebuilds them all.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/optimizer_rules.h"

namespace fp8rl::cuda {

// ops::adamw_step / ops::sgd_step over n elements; copy (bf16 bits [n]) and buffer (SGD's
// momentum buffer [n]) may be null.
void launch_adamw_step(const ops::AdamWStep& step, float* params, const float* grads,
                       float grad_scale, float* exp_avg, float* exp_avg_sq, uint16_t* copy,
                       int64_t n, cudaStream_t s);
void launch_sgd_step(const ops::SgdStep& step, float* params, const float* grads, float grad_scale,
                     float* buffer, uint16_t* copy, int64_t n, cudaStream_t s);

// Doubles of scratch launch_sum_squares needs for n elements.
int64_t sum_squares_scratch(int64_t n);
// scratch[num_blocks] = the fp64 sum of squares of x [n] in ops::l2_norm's order (the block
// sums go to scratch[0, num_blocks)).
void launch_sum_squares(const float* x, int64_t n, double* scratch, cudaStream_t s);

}  // namespace fp8rl::cuda
