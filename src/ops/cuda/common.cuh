// Device helpers shared by the kernels: reductions, bf16 <-> f32, and the FP8 recipe's
// quantization step (which must equal quant/fp8.h bit for bit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/kernels.h"

namespace fp8rl::cuda {

constexpr int kWarp = 32;
constexpr float kE4m3MaxF = 448.0f;

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
// Grid size for `n` items of `per_block` each, capped so that a grid-stride loop covers the rest.
inline unsigned grid_for(int64_t n, int64_t per_block, int64_t cap = 65535LL * 16) {
  int64_t g = ceil_div(n, per_block);
  if (g < 1) g = 1;
  return unsigned(g < cap ? g : cap);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum / max (of non-negative values) over a block of any multiple of 32 threads, up to 1024;
// every thread gets the result. The order is fixed by blockDim: each warp's butterfly, then
// warps 0, 1, ... in turn. `shm` holds blockDim.x / 32 floats; the trailing barrier lets the
// caller reuse it right away.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* shm) {
  v = MAX ? warp_max(v) : warp_sum(v);
  const int w = threadIdx.x / kWarp, l = threadIdx.x % kWarp;
  if (l == 0) shm[w] = v;
  __syncthreads();
  float r = 0.0f;
  for (int i = 0; i < int(blockDim.x) / kWarp; ++i) r = MAX ? fmaxf(r, shm[i]) : r + shm[i];
  __syncthreads();
  return r;
}
__device__ __forceinline__ float block_sum(float v, float* shm) {
  return block_reduce<false>(v, shm);
}
__device__ __forceinline__ float block_max(float v, float* shm) {
  return block_reduce<true>(v, shm);
}

__device__ __forceinline__ float load_f32(const bf16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ float load_f32(const float* p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load_f32(const void* p, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const bf16*>(p)[i]);
}
__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// The recipe's scale: amax / 448 as an IEEE division; zero amax gives 1.
__device__ __forceinline__ float fp8_scale(float amax) {
  return amax == 0.0f ? 1.0f : __fdiv_rn(amax, kE4m3MaxF);
}
// e4m3(x / scale): IEEE division, round to nearest even, saturate to +-448.
__device__ __forceinline__ uint8_t fp8_code(float x, float scale) {
  return uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}
// Two codes packed little-endian: a in the low byte (the element with the lower index).
__device__ __forceinline__ uint16_t fp8_code2(float a, float b, float scale) {
  return uint16_t(__nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(a, scale), __fdiv_rn(b, scale)),
                                           __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float fp8_value(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3);
  return __half2float(__half(h));
}

// atomicMax on non-negative floats: their bit patterns order like the values.
__device__ __forceinline__ void atomic_max_nonneg(float* addr, float v) {
  atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
}

}  // namespace fp8rl::cuda
