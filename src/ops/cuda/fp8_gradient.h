// Kernels of the FP8 input gradient of a frozen row-scaled FP8 weight (linear_backward_input,
// ops/cuda/linear_backward_input.cpp): the codes transposed, and dY scaled by the weight's row
// scales and quantized per token. CUDA runtime types only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8rl::cuda {

// qt[k, n] = q[n, k] for e4m3 codes q [N, K] (row-major; N, K multiples of 16, q and qt
// 16-byte aligned): one projection's transposed copy, so that
// the reduction dimension of dX = dY Q is contiguous (Hopper's FP8 MMA takes K-major operands
// only). Exact: bytes are moved, not converted.
void launch_transpose_codes(const uint8_t* q, int64_t n, int64_t k, uint8_t* qt, cudaStream_t s);

// codes[r, j] = e4m3(dy[r, j] col_scale[j] / scale[r]) with scale[r] = fp8_scale(max_j
// |dy[r, j] col_scale[j]|) (the recipe's per-token scaling of the product); dy f32 or bf16,
// n a multiple of 16, rows 16-byte aligned.
void launch_quantize_scaled_rows(const void* dy, bool dy_f32, const float* col_scale, int64_t m,
                                 int64_t n, uint8_t* codes, float* scales, cudaStream_t s);

}  // namespace fp8rl::cuda
