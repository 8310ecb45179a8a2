// Gated MLP activations: act(gate) * up with act = SiLU (Llama, Qwen, Mistral) or GELU-tanh
// (Gemma), plain or fused with the FP8 quantization of the product for the down projection.
// The formulas are the CPU reference's (ops/cpu/elementwise.cpp) in fp32.
//
// The plain op is flat over rows * cols (for_chunk_pairs: kFlatUnroll chunks of 8 values of
// gate and up in flight per thread, 16-byte loads and stores). The fused op is a row kernel
// (row_quant.cuh): the row's products stay in registers from the amax to the codes, so gate
// and up are read once.
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

// act(gate) * up of one chunk from raw bf16 bits.
template <int ACT>
__device__ __forceinline__ void gated_chunk(const uint4& g, const uint4& u, float (&v)[8]) {
  float up[8];
  unpack(g, v);
  unpack(u, up);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = activate<ACT>(v[i]) * up[i];
}

// Flat over n = rows * cols elements. out may alias gate or up (each chunk is read, then
// written, by one thread). amax (if set) gets max |out| of the bf16 outputs.
template <int ACT, bool VEC>
__global__ void __launch_bounds__(256)
    gated_kernel(const bf16* gate, const bf16* up, int64_t n, bf16* out, float* amax) {
  __shared__ float shm[256 / kWarp];
  float mx = 0.0f;
  for_chunk_pairs<VEC>(gate, up, n, [&](int64_t j, const uint4& rg, const uint4& ru) {
    float v[8];
    gated_chunk<ACT>(rg, ru, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = round_bf16(v[i]);
    mx = fmaxf(mx, chunk_amax(v));  // zeros past n
    store_chunk<VEC>(out, j, n, v);
  });
  if (amax != nullptr) {
    mx = block_max(mx, shm);
    if (threadIdx.x == 0) atomic_max_nonneg(amax, mx);
  }
}

template <int ACT, int NCH, bool WARP, bool MULTI, bool VEC>
__global__ void __launch_bounds__(kMaxRowThreads)
    gated_quant_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up, int64_t rows,
                       int64_t cols, QuantOut q) {
  __shared__ float shm[kWarp];
  const RowThreads<WARP> g;
  if (!quantized_data_row(g, rows, cols, q)) return;
  const bf16* gr = gate + g.row * cols;
  const bf16* ur = up + g.row * cols;
  float v[NCH][8];
  const int nseg = MULTI ? g.template segments<NCH>(cols) : 1;
  quantize_row<NCH, VEC>(g, nseg, cols, q, shm, v, [&](int s, float(&vv)[NCH][8]) {
    uint4 rg[NCH], ru[NCH];
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const int64_t j = g.template col<NCH>(s, k);
      rg[k] = ru[k] = make_uint4(0, 0, 0, 0);  // act(0) * 0 = 0 past the row
      if (j < cols) {
        rg[k] = load_raw<VEC>(gr, j, cols);
        ru[k] = load_raw<VEC>(ur, j, cols);
      }
    }
#pragma unroll
    for (int k = 0; k < NCH; ++k) gated_chunk<ACT>(rg[k], ru[k], vv[k]);
  });
}

}  // namespace

void launch_gated(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int act, bf16* out,
                  float* amax, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const bool vec = n % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(out);
  const unsigned grid = grid_for(n, 256 * kChunk * kFlatUnroll);
  if (act == 0) {
    if (vec)
      gated_kernel<0, true><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
    else
      gated_kernel<0, false><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
  } else {
    if (vec)
      gated_kernel<1, true><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
    else
      gated_kernel<1, false><<<grid, 256, 0, s>>>(gate, up, n, out, amax);
  }
  FP8RL_LAUNCH_CHECK("gated");
}

void launch_gated_quant(const bf16* gate, const bf16* up, int64_t rows, int64_t cols, int act,
                        const QuantOut& q, cudaStream_t s) {
  if (q.padded_rows == 0) return;
  const bool vec = cols % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(q.codes);
  const RowPlan p = plan_rows(q.padded_rows, cols);
  dispatch_rows(p, vec, [&](auto nch, auto warp, auto multi, auto v) {
    constexpr int kNch = decltype(nch)::value;
    constexpr bool kWarpRows = decltype(warp)::value, kMulti = decltype(multi)::value,
                   kVec = decltype(v)::value;
    if (act == 0)
      gated_quant_kernel<0, kNch, kWarpRows, kMulti, kVec>
          <<<p.grid, p.threads, 0, s>>>(gate, up, rows, cols, q);
    else
      gated_quant_kernel<1, kNch, kWarpRows, kMulti, kVec>
          <<<p.grid, p.threads, 0, s>>>(gate, up, rows, cols, q);
  });
  FP8RL_LAUNCH_CHECK("gated_quant");
}

}  // namespace fp8rl::cuda
