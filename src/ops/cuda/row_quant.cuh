// The per-row FP8 quantization step shared by the fused kernels (RMSNorm -> FP8, SiLU*mul ->
// FP8) and the standalone activation quantizer: one 256-thread block per row, each thread
// handling chunks of 8 consecutive elements, so a 1x128 group is exactly 16 chunks held by a
// half-warp (its amax is a 4-step shuffle). The caller supplies the fp32 values of a chunk;
// they are recomputed rather than kept, so both passes of per-token scaling see the same floats.
#pragma once

#include "ops/cuda/common.cuh"

namespace fp8rl::cuda {

constexpr int kRowThreads = 256;
constexpr int kChunk = 8;

// 8 bf16 at p[j..j+8) as floats; with VEC the 16-byte load needs j % 8 == 0 and an aligned row.
template <bool VEC>
__device__ __forceinline__ void load_chunk(const bf16* p, int64_t j, int64_t n, float (&v)[8]) {
  if constexpr (VEC) {
    const uint4 u = *reinterpret_cast<const uint4*>(p + j);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(h[i]);
      v[2 * i] = f.x;
      v[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = j + i < n ? __bfloat162float(p[j + i]) : 0.0f;
  }
}
template <bool VEC>
__device__ __forceinline__ void load_chunk(const float* p, int64_t j, int64_t n, float (&v)[8]) {
  if constexpr (VEC) {
    const float4 a = *reinterpret_cast<const float4*>(p + j);
    const float4 b = *reinterpret_cast<const float4*>(p + j + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = j + i < n ? p[j + i] : 0.0f;
  }
}
template <bool VEC>
__device__ __forceinline__ void store_chunk(bf16* p, int64_t j, int64_t n, const float (&v)[8]) {
  if constexpr (VEC) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(p + j) = u;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (j + i < n) p[j + i] = __float2bfloat16_rn(v[i]);
  }
}

template <bool VEC>
__device__ __forceinline__ void store_codes(uint8_t* p, int64_t j, int64_t n, const float (&v)[8],
                                            float scale) {
  if constexpr (VEC) {
    uint2 u;
    u.x = uint32_t(fp8_code2(v[0], v[1], scale)) | (uint32_t(fp8_code2(v[2], v[3], scale)) << 16);
    u.y = uint32_t(fp8_code2(v[4], v[5], scale)) | (uint32_t(fp8_code2(v[6], v[7], scale)) << 16);
    *reinterpret_cast<uint2*>(p + j) = u;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (j + i < n) p[j + i] = fp8_code(v[i], scale);
  }
}

__device__ __forceinline__ float chunk_amax(const float (&v)[8]) {
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) a = fmaxf(a, fabsf(v[i]));
  return a;
}

// Quantizes row `row` of q. values(j, v) must fill v with the 8 fp32 values at columns
// [j, j+8) (zeros past `cols`). Called by all kRowThreads threads of the block (barriers).
// Rows in [rows, padded_rows) get code 0 and scale 1.
template <bool VEC, typename Values>
__device__ __forceinline__ void quantize_row(int64_t row, int64_t rows, int64_t cols,
                                             const QuantOut& q, Values&& values) {
  __shared__ float shm[kRowThreads / kWarp];
  const int tid = threadIdx.x;
  const int64_t nchunks = ceil_div(cols, kChunk);
  uint8_t* codes = q.codes + row * cols;
  if (row >= rows) {  // padding rows of a group-scaled activation
    for (int64_t j = int64_t(tid); j < cols; j += kRowThreads) codes[j] = 0;
    for (int64_t g = tid; g < ceil_div(cols, 128); g += kRowThreads)
      q.scales[g * q.padded_rows + row] = 1.0f;
    return;
  }
  float v[8];
  if (!q.group) {
    float a = 0.0f;
    for (int64_t c = tid; c < nchunks; c += kRowThreads) {
      values(c * kChunk, v);
      a = fmaxf(a, chunk_amax(v));
    }
    const float scale = fp8_scale(block_max<kRowThreads>(a, shm));
    for (int64_t c = tid; c < nchunks; c += kRowThreads) {
      values(c * kChunk, v);
      store_codes<VEC>(codes, c * kChunk, cols, v, scale);
    }
    if (tid == 0) q.scales[row] = scale;
    return;
  }
  // Group scaling: the loop bound is uniform over the block so every lane takes part in the
  // half-warp shuffles; chunks past the row contribute zeros to their group's amax.
  for (int64_t base = 0; base < nchunks; base += kRowThreads) {
    const int64_t c = base + tid;
    const bool valid = c < nchunks;
    if (valid) {
      values(c * kChunk, v);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = 0.0f;
    }
    float a = chunk_amax(v);
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    const float scale = fp8_scale(a);
    if (valid) {
      store_codes<VEC>(codes, c * kChunk, cols, v, scale);
      if (c % 16 == 0) q.scales[(c / 16) * q.padded_rows + row] = scale;
    }
  }
}

}  // namespace fp8rl::cuda
