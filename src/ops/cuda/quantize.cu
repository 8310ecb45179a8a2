// The FP8 recipe on the device (quant/fp8.h): dynamic activation quantization per token, per
// 1x128 group and per tensor; weight quantization per row, 128x128 block and tensor (device
// random-init models); and the dequantization the bf16 fallback GEMM uses.
#include "ops/cuda/row_quant.cuh"

namespace fp8rl::cuda {

namespace {

// A row kernel (row_quant.cuh): the row's values are loaded once and stay in registers.
template <typename T, int NCH, bool WARP, bool MULTI, bool VEC>
__global__ void __launch_bounds__(kMaxRowThreads)
    quantize_rows_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, QuantOut q,
                         const int32_t* rows_end, bf16* zero_padding) {
  __shared__ float shm[kWarp];
  const RowThreads<WARP> g;
  if (zero_padding != nullptr && rows_end != nullptr && g.row < rows && g.row >= *rows_end)
    for (int64_t j = g.lane; j < cols; j += g.n) zero_padding[g.row * cols + j] = bf16(0.0f);
  if (!quantized_data_row(g, rows, cols, q, rows_end)) return;
  const T* xr = x + g.row * cols;
  float v[NCH][8];
  const int nseg = MULTI ? g.template segments<NCH>(cols) : 1;
  quantize_row<NCH, VEC>(g, nseg, cols, q, shm, v, [&](int s, float(&vv)[NCH][8]) {
    load_row_chunks<NCH, VEC>(g, xr, s, cols, vv);
  });
}

// The whole tensor as chunks of 8 elements (16-byte loads with VEC), grid-stride.
template <typename T, bool VEC>
__global__ void __launch_bounds__(256)
    amax_kernel(const T* __restrict__ x, int64_t n, float* amax) {
  __shared__ float shm[256 / kWarp];
  float a = 0.0f;
  for (int64_t c = int64_t(blockIdx.x) * 256 + threadIdx.x; c * kChunk < n;
       c += int64_t(gridDim.x) * 256) {
    float v[kChunk];
    load_chunk<VEC>(x, c * kChunk, n, v);
    a = fmaxf(a, chunk_amax(v));
  }
  a = block_max(a, shm);
  if (threadIdx.x == 0) atomic_max_nonneg(amax, a);
}

template <typename T, bool VEC>
__global__ void __launch_bounds__(256)
    quantize_tensor_kernel(const T* __restrict__ x, int64_t n, const float* amax,
                           float static_scale, uint8_t* __restrict__ codes, float* scale_out) {
  const float scale = amax != nullptr ? fp8_scale(*amax) : static_scale;
  const Fp8Divisor div = fp8_divisor(scale);
  for (int64_t c = int64_t(blockIdx.x) * 256 + threadIdx.x; c * kChunk < n;
       c += int64_t(gridDim.x) * 256) {
    float v[kChunk];
    load_chunk<VEC>(x, c * kChunk, n, v);
    store_codes<VEC>(codes, c * kChunk, n, v, div);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_out = scale;
}

// 16-byte loads (and 8-byte code stores) need n % 8 == 0 and aligned pointers.
template <typename T>
bool vec_ok(const T* x, int64_t n, const uint8_t* codes = nullptr) {
  return n % kChunk == 0 && aligned16(x) && (reinterpret_cast<uintptr_t>(codes) & 7) == 0;
}

template <typename T>
void amax_t(const T* x, int64_t n, float* amax, cudaStream_t s) {
  const unsigned grid = grid_for(ceil_div(n, kChunk), 256 * 4, 132 * 16);
  if (vec_ok(x, n))
    amax_kernel<T, true><<<grid, 256, 0, s>>>(x, n, amax);
  else
    amax_kernel<T, false><<<grid, 256, 0, s>>>(x, n, amax);
}

template <typename T>
void quantize_tensor_t(const T* x, int64_t n, const float* amax, float static_scale, uint8_t* codes,
                       float* scale_out, cudaStream_t s) {
  const unsigned grid = grid_for(ceil_div(n, kChunk), 256 * 2, 132 * 16);  // n == 0: the scale
  if (vec_ok(x, n, codes))
    quantize_tensor_kernel<T, true>
        <<<grid, 256, 0, s>>>(x, n, amax, static_scale, codes, scale_out);
  else
    quantize_tensor_kernel<T, false>
        <<<grid, 256, 0, s>>>(x, n, amax, static_scale, codes, scale_out);
}

__global__ void dequantize_act_kernel(const uint8_t* __restrict__ codes,
                                      const float* __restrict__ scales, int mode, int64_t rows,
                                      int64_t cols, int64_t padded_rows, bf16* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float s = mode == 0   ? scales[0]
                    : mode == 1 ? scales[r]
                                : scales[(c / 128) * padded_rows + r];
    out[i] = __float2bfloat16_rn(fp8_value(codes[i]) * s);
  }
}

// One block per 128x128 weight block: amax over its valid part, then its codes.
__global__ void __launch_bounds__(256)
    quantize_weight_block_kernel(const bf16* __restrict__ w, int64_t n, int64_t k,
                                 uint8_t* __restrict__ q, float* __restrict__ scales) {
  __shared__ float shm[256 / kWarp];
  const int64_t kb = ceil_div(k, 128);
  const int64_t r0 = int64_t(blockIdx.x / kb) * 128, c0 = int64_t(blockIdx.x % kb) * 128;
  const int64_t r1 = min(n, r0 + 128), c1 = min(k, c0 + 128);
  // 32-bit offsets within the block (<= 128 x 128): a 64-bit division is a call.
  const int width = int(c1 - c0), count = int(r1 - r0) * width;
  float a = 0.0f;
  for (int i = threadIdx.x; i < count; i += 256)
    a = fmaxf(a, fabsf(__bfloat162float(w[(r0 + i / width) * k + c0 + i % width])));
  const float scale = fp8_scale(block_max(a, shm));
  const Fp8Divisor div = fp8_divisor(scale);
  for (int i = threadIdx.x; i < count; i += 256) {
    const int64_t idx = (r0 + i / width) * k + c0 + i % width;
    q[idx] = fp8_code(__bfloat162float(w[idx]), div);
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}

// fp8_quotient against IEEE division for divisor significands 1 + jb 2^-23,
// jb = b_first + i * b_step (i < b_count), and every dividend significand in [1, 2): counts
// the pairs that differ and keeps one (the bit patterns of a and b) in bad[0..1].
__global__ void __launch_bounds__(256)
    fp8_quotient_check_kernel(uint32_t b_first, uint32_t b_count, uint32_t b_step,
                              unsigned long long* mismatches, uint32_t* bad) {
  constexpr uint32_t kOne = 0x3f800000u, kSignificands = 1u << 23;
  unsigned long long count = 0;
  for (uint32_t i = blockIdx.y; i < b_count; i += gridDim.y) {
    const float b = __uint_as_float(kOne + b_first + i * b_step);
    const Fp8Divisor div = fp8_divisor(b);
    for (uint32_t ia = blockIdx.x * blockDim.x + threadIdx.x; ia < kSignificands;
         ia += gridDim.x * blockDim.x) {
      const float a = __uint_as_float(kOne + ia);
      if (__float_as_uint(fp8_quotient(a, div)) != __float_as_uint(__fdiv_rn(a, b))) {
        ++count;
        bad[0] = __float_as_uint(a);
        bad[1] = __float_as_uint(b);
      }
    }
  }
  count = __reduce_add_sync(0xffffffffu, unsigned(count));
  if (threadIdx.x % kWarp == 0 && count != 0) atomicAdd(mismatches, count);
}

__global__ void dequantize_weight_kernel(const uint8_t* __restrict__ q,
                                         const float* __restrict__ scales, int scheme, int64_t n,
                                         int64_t k, bf16* __restrict__ out) {
  const int64_t kb = ceil_div(k, 128);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * k;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, c = i % k;
    const float s = scheme == 1   ? scales[0]
                    : scheme == 2 ? scales[r]
                                  : scales[(r / 128) * kb + c / 128];
    out[i] = __float2bfloat16_rn(fp8_value(q[i]) * s);
  }
}

__global__ void repack_kernel(const float* __restrict__ in, int64_t nb, int64_t kb, int64_t ld,
                              float* __restrict__ out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nb * ld;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / ld, c = i % ld;
    out[i] = c < kb ? in[r * kb + c] : 1.0f;
  }
}

template <typename T>
void quantize_rows_t(const T* x, int64_t rows, int64_t cols, const QuantOut& q,
                     const int32_t* rows_end, bf16* zero_padding, cudaStream_t s) {
  const bool vec = cols % 8 == 0 && aligned16(x) && aligned16(q.codes);
  const RowPlan p = plan_rows(q.padded_rows, cols);
  dispatch_rows(p, vec, [&](auto nch, auto warp, auto multi, auto v) {
    quantize_rows_kernel<T, decltype(nch)::value, decltype(warp)::value, decltype(multi)::value,
                         decltype(v)::value>
        <<<p.grid, p.threads, 0, s>>>(x, rows, cols, q, rows_end, zero_padding);
  });
}

}  // namespace

void launch_quantize_rows(const void* x, bool x_f32, int64_t rows, int64_t cols, const QuantOut& q,
                          cudaStream_t s, const int32_t* rows_end, bf16* zero_padding) {
  if (q.padded_rows == 0) return;
  if (x_f32)
    quantize_rows_t(static_cast<const float*>(x), rows, cols, q, rows_end, zero_padding, s);
  else
    quantize_rows_t(static_cast<const bf16*>(x), rows, cols, q, rows_end, zero_padding, s);
  FP8RL_LAUNCH_CHECK("quantize_rows");
}

void launch_amax(const void* x, bool x_f32, int64_t n, float* amax, cudaStream_t s) {
  if (n == 0) return;
  if (x_f32)
    amax_t(static_cast<const float*>(x), n, amax, s);
  else
    amax_t(static_cast<const bf16*>(x), n, amax, s);
  FP8RL_LAUNCH_CHECK("amax");
}

void launch_quantize_tensor(const void* x, bool x_f32, int64_t n, const float* amax,
                            float static_scale, uint8_t* codes, float* scale_out, cudaStream_t s) {
  if (x_f32)
    quantize_tensor_t(static_cast<const float*>(x), n, amax, static_scale, codes, scale_out, s);
  else
    quantize_tensor_t(static_cast<const bf16*>(x), n, amax, static_scale, codes, scale_out, s);
  FP8RL_LAUNCH_CHECK("quantize_tensor");
}

void launch_dequantize_act(const uint8_t* codes, const float* scales, int mode, int64_t rows,
                           int64_t cols, int64_t padded_rows, bf16* out, cudaStream_t s) {
  if (rows * cols == 0) return;
  dequantize_act_kernel<<<grid_for(rows * cols, 256), 256, 0, s>>>(codes, scales, mode, rows, cols,
                                                                   padded_rows, out);
  FP8RL_LAUNCH_CHECK("dequantize_act");
}

void launch_quantize_weight(const bf16* w, int64_t n, int64_t k, int scheme, uint8_t* q,
                            float* scales, float* amax_tmp, cudaStream_t s) {
  if (n * k == 0) return;
  if (scheme == 1) {  // amax_tmp is zeroed by the caller
    launch_amax(w, false, n * k, amax_tmp, s);
    launch_quantize_tensor(w, false, n * k, amax_tmp, 0.0f, q, scales, s);
    return;
  }
  if (scheme == 2) {
    QuantOut out;
    out.codes = q;
    out.scales = scales;
    out.padded_rows = n;
    out.group = false;
    quantize_rows_t(w, n, k, out, nullptr, nullptr, s);
  } else {
    const unsigned blocks = unsigned(ceil_div(n, 128) * ceil_div(k, 128));
    quantize_weight_block_kernel<<<blocks, 256, 0, s>>>(w, n, k, q, scales);
  }
  FP8RL_LAUNCH_CHECK("quantize_weight");
}

void launch_dequantize_weight(const uint8_t* q, const float* scales, int scheme, int64_t n,
                              int64_t k, bf16* out, cudaStream_t s) {
  if (n * k == 0) return;
  dequantize_weight_kernel<<<grid_for(n * k, 256), 256, 0, s>>>(q, scales, scheme, n, k, out);
  FP8RL_LAUNCH_CHECK("dequantize_weight");
}

void launch_repack_block_scales(const float* in, int64_t nb, int64_t kb, int64_t ld, float* out,
                                cudaStream_t s) {
  if (nb * ld == 0) return;
  repack_kernel<<<grid_for(nb * ld, 256), 256, 0, s>>>(in, nb, kb, ld, out);
  FP8RL_LAUNCH_CHECK("repack_block_scales");
}

void launch_fp8_quotient_check(uint32_t b_first, uint32_t b_count, uint32_t b_step,
                               unsigned long long* mismatches, uint32_t* bad, cudaStream_t s) {
  if (b_count == 0) return;
  const dim3 grid(1024, unsigned(b_count < 1024 ? b_count : 1024));
  fp8_quotient_check_kernel<<<grid, 256, 0, s>>>(b_first, b_count, b_step, mismatches, bad);
  FP8RL_LAUNCH_CHECK("fp8_quotient_check");
}

}  // namespace fp8rl::cuda
