// Splitting a row-major matrix by columns into contiguous parts: the inference forward's one
// GEMM for q, k and v writes [T, Nq + 2 Nkv], and the ops after it read each part on its own.
#pragma once

#include <initializer_list>

#include "ops/context.h"

namespace fp8rl::ops {

// src [R, C] contiguous -> parts [R, C_i] contiguous, side by side (sum of C_i = C), same
// dtype and device. On CUDA one 2-D copy per part on the context's stream (graph-capturable).
void split_columns(Context& ctx, const TensorView& src, std::initializer_list<TensorView> parts);

}  // namespace fp8rl::ops
