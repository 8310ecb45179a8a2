// RMSNorm (Llama, Qwen3 q/k norm, Gemma's (1 + w)) and RMSNorm fused with the FP8
// quantization of its output for the linears that read it.
//
// The formula follows ops/cpu/elementwise.cpp step by step: inv = 1 / sqrt(sum(x^2)/d + eps)
// (IEEE division and square root), y = (x * inv) * w_eff, with w_eff = 1 + w for Gemma. Only
// the order of the sum of squares differs from the CPU.
#include "ops/cuda/row_quant.cuh"

namespace fp8rl::cuda {

namespace {

__device__ __forceinline__ float norm_weight(const float* w, int64_t j, int64_t d, bool plus_one) {
  const float v = j < d ? w[j] : 0.0f;
  return plus_one ? 1.0f + v : v;
}

// TPR threads per row: a warp for short rows (q/k norms over head_dim), the block otherwise.
template <int TPR, bool VEC>
// x and out may alias (in-place norms): each chunk is read and then written by one thread.
__global__ void __launch_bounds__(256) rms_norm_kernel(const bf16* x, const float* __restrict__ w,
                                                       int64_t rows, int64_t d, float eps,
                                                       bool plus_one, bf16* out, float* amax) {
  constexpr int kRowsPerBlock = 256 / TPR;
  __shared__ float shm[256 / kWarp];
  const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / TPR;
  const int lane = threadIdx.x % TPR;
  const bool active = row < rows;
  const bf16* xr = x + (active ? row : 0) * d;
  float v[8];
  float ss = 0.0f;
  if (active)
    for (int64_t j = int64_t(lane) * kChunk; j < d; j += TPR * kChunk) {
      load_chunk<VEC>(xr, j, d, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
    }
  ss = TPR == kWarp ? warp_sum(ss) : block_sum<256>(ss, shm);
  const float inv = 1.0f / sqrtf(ss / float(d) + eps);
  float mx = 0.0f;
  if (active)
    for (int64_t j = int64_t(lane) * kChunk; j < d; j += TPR * kChunk) {
      load_chunk<VEC>(xr, j, d, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        v[i] = round_bf16((v[i] * inv) * norm_weight(w, j + i, d, plus_one));
        mx = fmaxf(mx, fabsf(v[i]));
      }
      store_chunk<VEC>(out + row * d, j, d, v);
    }
  if (amax != nullptr) {
    mx = TPR == kWarp ? warp_max(mx) : block_max<256>(mx, shm);
    if (lane == 0 && active) atomic_max_nonneg(amax, mx);
  }
}

template <bool VEC>
__global__ void __launch_bounds__(kRowThreads)
    rms_norm_quant_kernel(const bf16* __restrict__ x, const float* __restrict__ w, int64_t rows,
                          int64_t d, float eps, bool plus_one, QuantOut q) {
  __shared__ float shm[kRowThreads / kWarp];
  const int64_t row = blockIdx.x;
  float inv = 0.0f;
  const bf16* xr = x + (row < rows ? row : 0) * d;
  if (row < rows) {  // uniform over the block
    float v[8], ss = 0.0f;
    for (int64_t j = int64_t(threadIdx.x) * kChunk; j < d; j += kRowThreads * kChunk) {
      load_chunk<VEC>(xr, j, d, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) ss += v[i] * v[i];
    }
    ss = block_sum<kRowThreads>(ss, shm);
    inv = 1.0f / sqrtf(ss / float(d) + eps);
  }
  quantize_row<VEC>(row, rows, d, q, [&](int64_t j, float(&v)[8]) {
    load_chunk<VEC>(xr, j, d, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = (v[i] * inv) * norm_weight(w, j + i, d, plus_one);
  });
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void launch_rms_norm(const bf16* x, const float* w, int64_t rows, int64_t d, float eps,
                     bool plus_one, bf16* out, float* amax, cudaStream_t s) {
  if (rows == 0) return;
  const bool vec = d % 8 == 0 && aligned16(x) && aligned16(out);
  if (d <= 512) {
    const unsigned grid = unsigned(ceil_div(rows, 256 / kWarp));
    if (vec)
      rms_norm_kernel<kWarp, true><<<grid, 256, 0, s>>>(x, w, rows, d, eps, plus_one, out, amax);
    else
      rms_norm_kernel<kWarp, false><<<grid, 256, 0, s>>>(x, w, rows, d, eps, plus_one, out, amax);
  } else {
    const unsigned grid = unsigned(rows);
    if (vec)
      rms_norm_kernel<256, true><<<grid, 256, 0, s>>>(x, w, rows, d, eps, plus_one, out, amax);
    else
      rms_norm_kernel<256, false><<<grid, 256, 0, s>>>(x, w, rows, d, eps, plus_one, out, amax);
  }
  FP8RL_LAUNCH_CHECK("rms_norm");
}

void launch_rms_norm_quant(const bf16* x, const float* w, int64_t rows, int64_t d, float eps,
                           bool plus_one, const QuantOut& q, cudaStream_t s) {
  if (q.padded_rows == 0) return;
  const bool vec = d % 8 == 0 && aligned16(x) && aligned16(q.codes);
  const unsigned grid = unsigned(q.padded_rows);
  if (vec)
    rms_norm_quant_kernel<true><<<grid, kRowThreads, 0, s>>>(x, w, rows, d, eps, plus_one, q);
  else
    rms_norm_quant_kernel<false><<<grid, kRowThreads, 0, s>>>(x, w, rows, d, eps, plus_one, q);
  FP8RL_LAUNCH_CHECK("rms_norm_quant");
}

}  // namespace fp8rl::cuda
