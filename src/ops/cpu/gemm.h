// The CPU matrix product of the linear layers, batch-invariant by construction.
#pragma once

#include <cstdint>

namespace fp8rl::ops::cpu {

// out[M,N] = x[M,K] · wt[K,N] (wt is the transposed weight). Every output element is the fma
// chain over k = 0..K-1 in order, whatever M, N or the tiling: a token's result does not
// depend on which other tokens share the batch, so prefill, decode steps and batched
// sequences give bit-identical numbers (and FP8 activation rounding cannot diverge).
void gemm_batch_invariant(const float* x, const float* wt, float* out, int64_t m, int64_t n,
                          int64_t k);

}  // namespace fp8rl::ops::cpu
