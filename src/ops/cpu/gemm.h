// The CPU matrix product of the linear layers, batch-invariant by construction.
#pragma once

#include <cstdint>
#include <functional>

#include "core/arena.h"

namespace fp8rl::ops::cpu {

// Writes rows [n0, n1) of the fp32 weight w_hat [N,K] into dst ([n1-n0, K] row-major).
using WeightRows = std::function<void(int64_t n0, int64_t n1, float* dst)>;

// out[M,N] = x[M,K] · w_hat[N,K]^T, w_hat produced block by block by `rows` (so an FP8 or bf16
// weight is read once in its stored format and never materialized whole).
//
// Every output element is the same computation whatever M, N or the tiling: eight fma chains
// over k = l, l+8, l+16, ... (l = 0..7), summed as ((0+1)+(2+3))+((4+5)+(6+7)), then the
// k mod 8 tail chained in order. So a token's result does not depend on which other tokens
// share the batch: prefill, decode steps and batched sequences give bit-identical numbers,
// and FP8 activation rounding downstream cannot diverge between them.
void gemm_batch_invariant(Arena& scratch, const float* x, int64_t m, int64_t k, int64_t n,
                          const WeightRows& rows, float* out);

}  // namespace fp8rl::ops::cpu
