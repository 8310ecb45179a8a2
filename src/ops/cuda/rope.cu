// Rotary position embedding in place, rotate-half layout, as ops/cpu/elementwise.cpp: the
// angle is position * inv_freq in fp32 (as HF computes it), and its cos and sin are accurate to
// about an ulp. The angle reaches 1e5+ rad at long positions; sincosf would then take its
// Payne-Hanek path (a local-memory array), so the reduction to half-turns is done in fp64 here
// and sincospif finishes on a value in [-1, 1].
#include "ops/cuda/common.cuh"

namespace fp8rl::cuda {

namespace {

// One thread per (token, head, i < d/2): rotates the pair (x[i], x[i + d/2]).
__global__ void __launch_bounds__(256)
    rope_kernel(bf16* __restrict__ x, int64_t t, int64_t heads, int64_t half,
                const int32_t* __restrict__ positions, const float* __restrict__ inv_freq) {
  const int64_t n = t * heads * half;
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t th = idx / half;  // token * heads + head
    const int64_t tok = th / heads;
    const float angle = float(positions[tok]) * inv_freq[i];
    double turns = double(angle) * 0.31830988618379067154;  // angle / pi
    turns -= 2.0 * rint(turns * 0.5);                        // in [-1, 1]
    float s, c;
    sincospif(float(turns), &s, &c);
    bf16* v = x + th * 2 * half;
    const float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
    v[i] = __float2bfloat16_rn(a * c - b * s);
    v[i + half] = __float2bfloat16_rn(b * c + a * s);
  }
}

}  // namespace

void launch_rope(bf16* x, int64_t t, int64_t heads, int64_t d, const int32_t* positions,
                 const float* inv_freq, cudaStream_t s) {
  const int64_t n = t * heads * (d / 2);
  if (n == 0) return;
  rope_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, t, heads, d / 2, positions, inv_freq);
  FP8RL_LAUNCH_CHECK("rope");
}

}  // namespace fp8rl::cuda
