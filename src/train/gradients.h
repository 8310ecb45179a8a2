// Operations on one flat fp32 gradient vector laid out as the parameters it belongs to
// (LoraAdapter::master_params(): every matrix of the adapter in one buffer, zero gaps between
// them, whose gradients stay zero). All loops run over the CPU cores (core/parallel.h) in
// fixed blocks, and every reduction sums the blocks' partial results in block order, so the
// results do not depend on the number of threads.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace fp8rl {

// A contiguous f32 host view as a span; throws for any other view.
std::span<float> f32_span(const TensorView& t);

// Gradient accumulation over micro-batches: acc += micro, element by element. A backward
// that accumulates into the gradient buffer with += (the llm.c contract) needs only the
// scaling below.
void accumulate_gradients(std::span<float> acc, std::span<const float> micro);
// grads *= float(factor), e.g. 1 / micro-batches for a mean. transformers scales each
// micro-batch loss by 1 / gradient_accumulation_steps before its backward instead; the two
// are equal up to fp32 rounding (here one rounding per element instead of one per micro-batch).
void scale_gradients(std::span<float> grads, double factor);

// The L2 norm of grads, squares summed in fp64 (ops::l2_norm on the host). The fp64 sum of squares
// of fp32 values cannot overflow (each square is below 2^256, and 2^1023 / 2^256 exceeds any buffer
// length), so the result is finite exactly when every gradient is: a NaN or Inf anywhere makes it
// NaN or Inf.
double grad_norm(std::span<const float> grads);

// torch.nn.utils.clip_grad_norm_(params, max_norm) over the one flat vector: total_norm =
// grad_norm(grads); clip_coef = max_norm / (total_norm + 1e-6); if max_norm > 0 and
// clip_coef < 1, every gradient is multiplied by float(clip_coef) (torch multiplies by the
// coefficient clamped to 1, which is the same). max_norm == 0 turns clipping off
// (transformers' max_grad_norm = 0). Returns total_norm, the norm before clipping. A
// non-finite norm leaves grads untouched (the caller skips the step, train/train_step.h).
double clip_grad_norm(std::span<float> grads, double max_norm);
// The scaling half of clip_grad_norm for a norm already computed (total_norm = grad_norm()).
void clip_to_max_norm(std::span<float> grads, double total_norm, double max_norm);
// The factor clip_to_max_norm multiplies the gradients by: float(clip_coef), or 1 where it
// leaves them as they are.
float clip_factor(double total_norm, double max_norm);

}  // namespace fp8rl
