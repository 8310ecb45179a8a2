// Splitting a row-major matrix by columns into contiguous parts, or viewing a part in place:
// the inference forward's one GEMM for q, k and v writes [T, Nq + 2 Nkv], and the ops after it
// read each part on its own.
#pragma once

#include <initializer_list>

#include "ops/context.h"

namespace fp8rl::ops {

// src [R, C] contiguous -> parts [R, C_i] contiguous, side by side (sum of C_i = C), same
// dtype and device. On CUDA one 2-D copy per part on the context's stream (graph-capturable).
void split_columns(Context& ctx, const TensorView& src, std::initializer_list<TensorView> parts);

// Columns [col, col + heads * d) of src [R, C] (contiguous rows) read in place as [R, heads, d]
// with src's row stride: the stacked q/k/v output's parts as rope_store_kv takes them.
TensorView column_heads(const TensorView& src, int64_t col, int64_t heads, int64_t d);

}  // namespace fp8rl::ops
