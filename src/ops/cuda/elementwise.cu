// Element-wise kernels: residual add, softcap, bias add, fills (constant and the shared
// uniform hash), scalar broadcast and the indexed copy of i32 elements (ops::copy_elements).
#include "ops/cuda/row_quant.cuh"
#include "ops/uniform_hash.h"

namespace fp8rl::cuda {

namespace {

#define FP8RL_GRID_STRIDE(i, n)                                             \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// out = a + alpha * b (an fma, so alpha = 1 is exactly a + b), flat; each thread has kFlatUnroll chunks of 8 in flight (16-byte loads and
// stores). out may alias a or b: each chunk is read, then written, by one thread.
template <bool VEC>
__global__ void __launch_bounds__(256)
    add_kernel(const bf16* a, const bf16* b, float alpha, bf16* out, int64_t n) {
  for_chunk_pairs<VEC>(a, b, n, [&](int64_t j, const uint4& ra, const uint4& rb) {
    float x[8], y[8];
    unpack(ra, x);
    unpack(rb, y);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = fmaf(alpha, y[i], x[i]);
    store_chunk<VEC>(out, j, n, x);
  });
}

__global__ void copy_elements_kernel(const int32_t* __restrict__ src, int64_t n_src,
                                     const int32_t* __restrict__ moves, int64_t m,
                                     int32_t* __restrict__ dst, int64_t n_dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int32_t to = moves[2 * i], from = moves[2 * i + 1];
  if (to >= 0 && to < n_dst && from >= 0 && from < n_src) dst[to] = src[from];
}
__global__ void softcap_bf16_kernel(bf16* x, int64_t n, float cap) {
  FP8RL_GRID_STRIDE(i, n) {
    x[i] = __float2bfloat16_rn(cap * tanhf(__bfloat162float(x[i]) / cap));
  }
}
__global__ void softcap_f32_kernel(float* x, int64_t n, float cap) {
  FP8RL_GRID_STRIDE(i, n) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

__global__ void add_bias_kernel(float* out, const float* __restrict__ bias, int64_t rows,
                                int64_t n) {
  FP8RL_GRID_STRIDE(i, rows * n) {
    out[i] += bias[i % n];
  }
}
__global__ void bias_round_kernel(const float* __restrict__ y, const float* __restrict__ bias,
                                  int64_t rows, int64_t n, bf16* __restrict__ out) {
  FP8RL_GRID_STRIDE(i, rows * n) {
    out[i] = __float2bfloat16_rn(y[i] + bias[i % n]);
  }
}

__global__ void sum_round_kernel(const float* __restrict__ y0, const float* __restrict__ y1,
                                 const float* __restrict__ bias, int64_t rows, int64_t n,
                                 bf16* __restrict__ out) {
  FP8RL_GRID_STRIDE(i, rows * n) {
    const float b = bias != nullptr ? bias[i % n] : 0.0f;
    out[i] = __float2bfloat16_rn(y0[i] + y1[i] + b);
  }
}

__global__ void fill_f32_kernel(float* x, int64_t n, float v) {
  FP8RL_GRID_STRIDE(i, n) {
    x[i] = v;
  }
}
__global__ void fill_bf16_kernel(bf16* x, int64_t n, float v) {
  const bf16 b = __float2bfloat16_rn(v);
  FP8RL_GRID_STRIDE(i, n) {
    x[i] = b;
  }
}
__global__ void fill_uniform_f32_kernel(float* x, int64_t n, uint64_t seed, float bound) {
  FP8RL_GRID_STRIDE(i, n) {
    x[i] = uniform_hash(seed, uint64_t(i), bound);
  }
}
__global__ void fill_uniform_bf16_kernel(bf16* x, int64_t n, uint64_t seed, float bound) {
  FP8RL_GRID_STRIDE(i, n) {
    x[i] = __float2bfloat16_rn(uniform_hash(seed, uint64_t(i), bound));
  }
}
__global__ void broadcast_kernel(const float* __restrict__ in, float* __restrict__ out, int64_t n) {
  FP8RL_GRID_STRIDE(i, n) {
    out[i] = in[0];
  }
}

}  // namespace

void launch_add(const bf16* a, const bf16* b, float alpha, bf16* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const unsigned grid = grid_for(n, 256 * kChunk * kFlatUnroll);
  if (n % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(out))
    add_kernel<true><<<grid, 256, 0, s>>>(a, b, alpha, out, n);
  else
    add_kernel<false><<<grid, 256, 0, s>>>(a, b, alpha, out, n);
  FP8RL_LAUNCH_CHECK("add");
}

void launch_softcap_bf16(bf16* x, int64_t n, float cap, cudaStream_t s) {
  if (n == 0) return;
  softcap_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, cap);
  FP8RL_LAUNCH_CHECK("softcap");
}
void launch_softcap_f32(float* x, int64_t n, float cap, cudaStream_t s) {
  if (n == 0) return;
  softcap_f32_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, cap);
  FP8RL_LAUNCH_CHECK("softcap");
}
void launch_add_bias(float* out, const float* bias, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows * n == 0) return;
  add_bias_kernel<<<grid_for(rows * n, 256), 256, 0, s>>>(out, bias, rows, n);
  FP8RL_LAUNCH_CHECK("add_bias");
}
void launch_bias_round(const float* y, const float* bias, int64_t rows, int64_t n, bf16* out,
                       cudaStream_t s) {
  if (rows * n == 0) return;
  bias_round_kernel<<<grid_for(rows * n, 256), 256, 0, s>>>(y, bias, rows, n, out);
  FP8RL_LAUNCH_CHECK("bias_round");
}
void launch_sum_round(const float* y0, const float* y1, const float* bias, int64_t rows, int64_t n,
                      bf16* out, cudaStream_t s) {
  if (rows * n == 0) return;
  sum_round_kernel<<<grid_for(rows * n, 256), 256, 0, s>>>(y0, y1, bias, rows, n, out);
  FP8RL_LAUNCH_CHECK("sum_round");
}
void launch_copy_elements(const int32_t* src, int64_t n_src, const int32_t* moves, int64_t m,
                          int32_t* dst, int64_t n_dst, cudaStream_t s) {
  if (m == 0) return;
  copy_elements_kernel<<<grid_for(m, 256), 256, 0, s>>>(src, n_src, moves, m, dst, n_dst);
  FP8RL_LAUNCH_CHECK("copy_elements");
}
void launch_fill_f32(float* x, int64_t n, float v, cudaStream_t s) {
  if (n == 0) return;
  fill_f32_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, v);
  FP8RL_LAUNCH_CHECK("fill");
}
void launch_fill_bf16(bf16* x, int64_t n, float v, cudaStream_t s) {
  if (n == 0) return;
  fill_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, v);
  FP8RL_LAUNCH_CHECK("fill");
}
void launch_fill_uniform_f32(float* x, int64_t n, uint64_t seed, float bound, cudaStream_t s) {
  if (n == 0) return;
  fill_uniform_f32_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, seed, bound);
  FP8RL_LAUNCH_CHECK("fill_uniform");
}
void launch_fill_uniform_bf16(bf16* x, int64_t n, uint64_t seed, float bound, cudaStream_t s) {
  if (n == 0) return;
  fill_uniform_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(x, n, seed, bound);
  FP8RL_LAUNCH_CHECK("fill_uniform");
}
void launch_broadcast(const float* in, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  broadcast_kernel<<<grid_for(n, 256), 256, 0, s>>>(in, out, n);
  FP8RL_LAUNCH_CHECK("broadcast");
}

}  // namespace fp8rl::cuda
