// Gated MLP activations: act(gate) * up with act = SiLU (Llama, Qwen, Mistral) or GELU-tanh
// (Gemma), plain or fused with the FP8 quantization of the product for the down projection.
// The formulas are the CPU reference's (ops/cpu/elementwise.cpp) in fp32.
#include "ops/cuda/row_quant.cuh"

namespace fp8rl::cuda {

namespace {

template <int ACT>
__device__ __forceinline__ float activate(float x) {
  if constexpr (ACT == 0) {
    return x / (1.0f + expf(-x));
  } else {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  }
}

// Flat over n = rows * cols elements, 8 per thread per step. out may alias gate or up.
template <int ACT, bool VEC>
__global__ void __launch_bounds__(256) gated_kernel(const bf16* gate, const bf16* up, int64_t n,
                                                    bf16* out, float* amax) {
  __shared__ float shm[256 / kWarp];
  float g[8], u[8], mx = 0.0f;
  const int64_t stride = int64_t(gridDim.x) * 256 * kChunk;
  for (int64_t j = (int64_t(blockIdx.x) * 256 + threadIdx.x) * kChunk; j < n; j += stride) {
    load_chunk<VEC>(gate, j, n, g);
    load_chunk<VEC>(up, j, n, u);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      g[i] = round_bf16(activate<ACT>(g[i]) * u[i]);
      if (j + i < n) mx = fmaxf(mx, fabsf(g[i]));
    }
    store_chunk<VEC>(out, j, n, g);
  }
  if (amax != nullptr) {
    mx = block_max<256>(mx, shm);
    if (threadIdx.x == 0) atomic_max_nonneg(amax, mx);
  }
}

template <int ACT, bool VEC>
__global__ void __launch_bounds__(kRowThreads)
    gated_quant_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up, int64_t rows,
                       int64_t cols, QuantOut q) {
  const int64_t row = blockIdx.x;
  const int64_t off = (row < rows ? row : 0) * cols;
  quantize_row<VEC>(row, rows, cols, q, [&](int64_t j, float(&v)[8]) {
    float u[8];
    load_chunk<VEC>(gate + off, j, cols, v);
    load_chunk<VEC>(up + off, j, cols, u);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = activate<ACT>(v[i]) * u[i];
  });
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void launch_gated(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int act,
                  bf16* out, float* amax, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const bool vec = n % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(out);
  const unsigned grid = grid_for(n, 256 * kChunk);
  if (act == 0) {
    if (vec) gated_kernel<0, true><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
    else gated_kernel<0, false><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
  } else {
    if (vec) gated_kernel<1, true><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
    else gated_kernel<1, false><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
  }
  FP8RL_LAUNCH_CHECK("gated");
}

void launch_gated_quant(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int act,
                        const QuantOut& q, cudaStream_t s) {
  if (q.padded_rows == 0) return;
  const bool vec = cols % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(q.codes);
  const unsigned grid = unsigned(q.padded_rows);
  if (act == 0) {
    if (vec) gated_quant_kernel<0, true><<<grid, kRowThreads, 0, s>>>(gate, up, rows, cols, q);
    else gated_quant_kernel<0, false><<<grid, kRowThreads, 0, s>>>(gate, up, rows, cols, q);
  } else {
    if (vec) gated_quant_kernel<1, true><<<grid, kRowThreads, 0, s>>>(gate, up, rows, cols, q);
    else gated_quant_kernel<1, false><<<grid, kRowThreads, 0, s>>>(gate, up, rows, cols, q);
  }
  FP8RL_LAUNCH_CHECK("gated_quant");
}

}  // namespace fp8rl::cuda
