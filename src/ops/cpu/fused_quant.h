// How the CPU's fused quantizers (norm.cpp rms_norm_quant, activation.cpp gated_quant) stage
// the op's result before quantize(): as the CUDA kernels do, so Rounding::bf16 matches them.
//
// Per-token and per-group fused quantization reads the op's fp32 values (ops/cuda/
// row_quant.cuh), so nothing is rounded; per-tensor scaling needs the amax of the whole output
// first, and CUDA stages that output in bf16 (cuda_ops.cpp rms_norm_quant, gated_quant), so
// the quantized values are the bf16-rounded ones.
#pragma once

#include "ops/cpu/cpu_ops.h"

namespace fp8rl::ops::cpu {

// How a fused quantizer's input is staged: in bf16 on CUDA only for per-tensor scaling.
inline Rounding staged(Rounding r, const QuantizedActivation& q) {
  return q.act == ActScaling::tensor ? r : Rounding::none;
}

}  // namespace fp8rl::ops::cpu
