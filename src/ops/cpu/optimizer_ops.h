// CPU references of ops/optimizer.h (multithreaded over fixed blocks; operands checked by
// ops/optimizer.cpp).
#pragma once

#include "ops/optimizer.h"

namespace fp8rl::ops::cpu {

void adamw_step(const AdamWStep& step, const TensorView& params, const TensorView& grads,
                float grad_scale, const TensorView& exp_avg, const TensorView& exp_avg_sq,
                const TensorView& compute_copy);
void sgd_step(const SgdStep& step, const TensorView& params, const TensorView& grads,
              float grad_scale, const TensorView& momentum_buffer, const TensorView& compute_copy);
double l2_norm(const TensorView& x);

}  // namespace fp8rl::ops::cpu
