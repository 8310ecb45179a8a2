// The rotary angle of the CUDA RoPE kernels, shared by the forward (rope.cu) and its gradient
// (backward.cu) so that both rotate by the same cos and sin.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8rl::cuda {

// cos and sin of position * inv_freq (the fp32 angle, as HF computes it). The angle reaches
// 1e5+ rad at long positions; sincosf would then take its Payne-Hanek path (a local-memory
// array), so the reduction to half-turns is done in fp64 and sincospif finishes on a value in
// [-1, 1].
__device__ __forceinline__ void rope_cos_sin(int32_t position, float inv_freq, float* c, float* s) {
  const float angle = float(position) * inv_freq;
  double turns = double(angle) * 0.31830988618379067154;  // angle / pi
  turns -= 2.0 * rint(turns * 0.5);                       // in [-1, 1]
  sincospif(float(turns), s, c);
}

}  // namespace fp8rl::cuda
