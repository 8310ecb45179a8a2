// Device helpers shared by the kernels: reductions, bf16 <-> f32, and the FP8 recipe's
// quantization step (which must equal quant/fp8.h bit for bit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
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

// The recipe's scale: amax / 448 rounded as an IEEE fp32 division; zero amax gives 1. In fp64
// as amax * (1 / 448): within 2^-52 of the quotient, which lies at least 2^-49 (relative) from
// any fp32 rounding midpoint, so the fp32 rounding is the division's (and no slow-path call).
__device__ __forceinline__ float fp8_scale(float amax) {
  return amax == 0.0f ? 1.0f : __double2float_rn(__dmul_rn(double(amax), 1.0 / 448.0));
}
// x / scale of the recipe, an IEEE-rounded fp32 division, without the ~10 instructions and the
// slow-path call of one (whose call frame spills in the register-heavy row kernels).
//
// Scales in [2^-60, 2^60] (all that real activations produce): a multiplication by
// y = RN(1 / scale) and one fma correction (Markstein), 3 instructions: q0 = RN(x y) is within
// ~1.5 ulp of z = x / scale, the residual x - scale q0 is exact in an fma, and
// RN(q0 + (x - scale q0) y) is within ~2^-23 ulp of z, while a quotient of two floats is never
// on an fp32 rounding midpoint and at least ~2^-24 ulp away from one. The margins are too close
// to settle on paper, so it is checked exhaustively: every step scales exactly by powers of two
// while values stay normal, so the 2^46 pairs of significands stand for every dividend and
// every such scale (launch_fp8_quotient_check; tests/gpu "fp8_quotient --exhaustive").
// Quotients below 2^-11 round to e4m3 zero whatever their last bits, and above that every
// intermediate is normal for these scales.
//
// Other scales (subnormal, huge, 0, inf, NaN): x * (1 / scale) in fp64, which is RN(z): the
// fp64 reciprocal is within 2^-51 of 1 / scale and the product adds 2^-53, while z lies at
// least 2^-49 (relative) from any fp32 midpoint M: x has a 24-bit significand, scale M a
// 24 + 25-bit one, so x - scale M is 0 (impossible: M's odd last bit survives the product)
// or at least 2^-48 of scale M.
//
// y itself is the fp32 rounding of the fp64 reciprocal, exact by the same margin (1 - scale M,
// likewise). The fp64 reciprocal: the SFU's approximation refined by three Newton steps (each
// squares the relative error: a start of 2^-8 would do).
struct Fp8Divisor {
  double inv64;  // 1 / scale within 2^-51
  float scale, inv;
  bool direct;  // scale outside [2^-60, 2^60]: divide in fp64
};
__device__ __forceinline__ Fp8Divisor fp8_divisor(float scale) {
  const double s = scale;
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(s));
  if (isfinite(r) && r != 0.0)  // 0, inf and NaN scales: the approximation is exact
#pragma unroll
    for (int i = 0; i < 3; ++i) r = __fma_rn(r, __fma_rn(-s, r, 1.0), r);
  return {r, scale, __double2float_rn(r), !(scale >= 0x1p-60f && scale <= 0x1p60f)};
}
__device__ __forceinline__ float fp8_quotient(float x, const Fp8Divisor& d) {
  if (d.direct) return __double2float_rn(__dmul_rn(double(x), d.inv64));
  const float q0 = __fmul_rn(x, d.inv);
  const float q1 = __fmaf_rn(__fmaf_rn(-d.scale, q0, x), d.inv, q0);
  return x == 0.0f ? x : q1;  // keeps the sign of -0 (the residual of -0 is +0)
}

// e4m3(x / scale): IEEE division, round to nearest even, saturate to +-448.
__device__ __forceinline__ uint8_t fp8_code(float x, const Fp8Divisor& d) {
  return uint8_t(__nv_cvt_float_to_fp8(fp8_quotient(x, d), __NV_SATFINITE, __NV_E4M3));
}
// Two codes packed little-endian: a in the low byte (the element with the lower index).
__device__ __forceinline__ uint16_t fp8_code2(float a, float b, const Fp8Divisor& d) {
  return uint16_t(__nv_cvt_float2_to_fp8x2(make_float2(fp8_quotient(a, d), fp8_quotient(b, d)),
                                           __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float fp8_value(uint8_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3);
  return __half2float(__half(h));
}

// C += A B on the tensor cores, m16n8k16 with bf16 operands and fp32 accumulation (sm_80+).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// atomicMax on non-negative floats: their bit patterns order like the values.
__device__ __forceinline__ void atomic_max_nonneg(float* addr, float v) {
  atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
}

}  // namespace fp8rl::cuda
