// The optimizer's ops over flat f32 vectors of P elements (the LoRA masters,
// LoraAdapter::master_params(), their gradients and the optimizer state), on either device
// with the same bits: the updates evaluate one per-element fp64 code (ops/optimizer_rules.h),
// and the norm sums its fp64 squares in one fixed order on both. So a CUDA training step
// equals the CPU step bit for bit for the same inputs, and the optimizer's state can move
// between devices through a checkpoint.
//
// Views as in ops.h, checked here: every operand contiguous on ctx.device with P elements.
// A CPU Context needs no scratch arena for these ops.
#pragma once

#include <cstdint>

#include "ops/context.h"
#include "ops/optimizer_rules.h"

namespace fp8rl::ops {

// One AdamW step in place: params, exp_avg, exp_avg_sq [P] f32 updated; grads [P] f32 read as
// fp32(grads[i] * grad_scale) (the clipping factor, 1: none); compute_copy (optional, [P]
// bf16) = bf16(new params), round to nearest even: on CUDA the copy the forward reads, written
// in the same pass.
void adamw_step(Context& ctx, const AdamWStep& step, const TensorView& params,
                const TensorView& grads, float grad_scale, const TensorView& exp_avg,
                const TensorView& exp_avg_sq, const TensorView& compute_copy = {});

// One SGD step in place, operands as adamw_step; momentum_buffer [P] f32 (empty iff
// step.momentum == 0) is written without being read when step.first.
void sgd_step(Context& ctx, const SgdStep& step, const TensorView& params, const TensorView& grads,
              float grad_scale, const TensorView& momentum_buffer,
              const TensorView& compute_copy = {});

// sqrt(sum x[i]^2) of x [P] f32, squares and sums in fp64: the squares of each block of
// kNormBlockElements (ops/optimizer_rules.h) summed in index order, then the block sums in block
// order, so the result is the same on every device and thread count. The fp64 sum of squares of
// fp32 values cannot overflow (each square is below 2^256, and 2^1023 / 2^256 exceeds any buffer
// length), so the norm is finite exactly when every element is: it is the non-finite check as well.
// On CUDA the result comes back to the host (8 bytes; the call waits for the stream).
double l2_norm(Context& ctx, const TensorView& x);

}  // namespace fp8rl::ops
