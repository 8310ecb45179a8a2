// The FP8 input gradient's kernels (ops/cuda/fp8_gradient.h): a byte transpose through shared
// memory tiles, and a block-per-row quantizer of dY times the weight's row scales.
#include "ops/cuda/fp8_gradient.h"
#include "ops/cuda/row_quant.cuh"

namespace fp8rl::cuda {

namespace {

constexpr int kTile = 64;  // 64 x 64 bytes per block: 256 threads, one 16-byte chunk each
constexpr int kTransposeThreads = kTile * kTile / 16;
constexpr int kRowThreads = 512;

// Reads a tile along K (16-byte chunks of q's rows), writes it along N (16-byte chunks of
// qt's rows). N and K are multiples of 16, so a chunk lies wholly inside or outside the matrix.
// The +16 padding staggers the shared-memory banks of the column reads.
__global__ void __launch_bounds__(kTransposeThreads)
    transpose_codes_kernel(const uint8_t* q, int64_t n, int64_t k, uint8_t* qt) {
  __shared__ __align__(16) uint8_t tile[kTile][kTile + 16];
  const int64_t n0 = int64_t(blockIdx.y) * kTile, k0 = int64_t(blockIdx.x) * kTile;
  const int r = threadIdx.x / 4, c = (threadIdx.x % 4) * 16;  // a row, a 16-byte chunk of it
  if (n0 + r < n && k0 + c < k)
    *reinterpret_cast<uint4*>(&tile[r][c]) =
        *reinterpret_cast<const uint4*>(q + (n0 + r) * k + k0 + c);
  __syncthreads();
  if (k0 + r < k && n0 + c < n) {  // row r of the output tile = column r of the input tile
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = uint32_t(tile[c + 4 * i][r]) | uint32_t(tile[c + 4 * i + 1][r]) << 8 |
             uint32_t(tile[c + 4 * i + 2][r]) << 16 | uint32_t(tile[c + 4 * i + 3][r]) << 24;
    *reinterpret_cast<uint4*>(qt + (k0 + r) * n + n0 + c) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// v[0..8) = dy[j..j+8) * col_scale[j..j+8) (f32 or bf16 dy; j a multiple of 8).
__device__ __forceinline__ void scaled_chunk(const void* dy, bool dy_f32, const float* col_scale,
                                             int64_t row_off, int64_t j, float (&v)[8]) {
  const float4 s0 = *reinterpret_cast<const float4*>(col_scale + j);
  const float4 s1 = *reinterpret_cast<const float4*>(col_scale + j + 4);
  if (dy_f32) {
    const float* p = static_cast<const float*>(dy) + row_off + j;
    const float4 a = *reinterpret_cast<const float4*>(p),
                 b = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    unpack(load_raw<true>(static_cast<const bf16*>(dy) + row_off, j, j + 8), v);
  }
  v[0] *= s0.x, v[1] *= s0.y, v[2] *= s0.z, v[3] *= s0.w;
  v[4] *= s1.x, v[5] *= s1.y, v[6] *= s1.z, v[7] *= s1.w;
}

// A block per row, 8 values per thread and step (n a multiple of 16): the row's amax, then its
// codes (the second read comes from L2: a row is at most a few tens of KB).
__global__ void __launch_bounds__(kRowThreads)
    quantize_scaled_rows_kernel(const void* dy, bool dy_f32, const float* col_scale, int64_t m,
                                int64_t n, uint8_t* codes, float* scales) {
  __shared__ float shm[kRowThreads / kWarp];
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    float amax = 0.0f;
    for (int64_t j = int64_t(threadIdx.x) * 8; j < n; j += kRowThreads * 8) {
      float v[8];
      scaled_chunk(dy, dy_f32, col_scale, r * n, j, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
    }
    amax = block_max(amax, shm);
    const float scale = fp8_scale(amax);
    const Fp8Divisor d = fp8_divisor(scale);
    for (int64_t j = int64_t(threadIdx.x) * 8; j < n; j += kRowThreads * 8) {
      float v[8];
      scaled_chunk(dy, dy_f32, col_scale, r * n, j, v);
      uint2 out;
      out.x = uint32_t(fp8_code2(v[0], v[1], d)) | uint32_t(fp8_code2(v[2], v[3], d)) << 16;
      out.y = uint32_t(fp8_code2(v[4], v[5], d)) | uint32_t(fp8_code2(v[6], v[7], d)) << 16;
      *reinterpret_cast<uint2*>(codes + r * n + j) = out;
    }
    if (threadIdx.x == 0) scales[r] = scale;
  }
}

}  // namespace

void launch_transpose_codes(const uint8_t* q, int64_t n, int64_t k, uint8_t* qt, cudaStream_t s) {
  if (n == 0 || k == 0) return;
  const dim3 grid(unsigned(ceil_div(k, kTile)), unsigned(ceil_div(n, kTile)));
  transpose_codes_kernel<<<grid, kTransposeThreads, 0, s>>>(q, n, k, qt);
  FP8RL_LAUNCH_CHECK("transpose_codes");
}

void launch_quantize_scaled_rows(const void* dy, bool dy_f32, const float* col_scale, int64_t m,
                                 int64_t n, uint8_t* codes, float* scales, cudaStream_t s) {
  if (m == 0) return;
  const unsigned grid = unsigned(m < 65535 ? m : 65535);
  quantize_scaled_rows_kernel<<<grid, kRowThreads, 0, s>>>(dy, dy_f32, col_scale, m, n, codes,
                                                           scales);
  FP8RL_LAUNCH_CHECK("quantize_scaled_rows");
}

}  // namespace fp8rl::cuda
