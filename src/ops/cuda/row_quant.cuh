// The machinery of the row kernels (norms, fused FP8 quantization of a row, the standalone
// activation quantizer): 16-byte chunk loads and stores, the threads of a row, and the FP8
// quantization of a row held in registers.
//
// A row of `cols` values is cut into chunks of 8 consecutive values (one 16-byte bf16 load).
// The n threads of a row (RowThreads: a warp for short rows, the whole block otherwise) hold its
// chunks in registers, NCH per thread: in segment s, thread `lane` holds chunks
// (s * NCH + k) * n + lane for k < NCH. The launcher (plan_rows) picks NCH and n so that a row
// is one segment: every load of the row is issued before the reduction and the values stay in
// registers until they are written, so global memory is read once. Rows longer than
// 8 chunks x 256 threads (16384 values) take several segments and are read again per pass.
// Since n is a multiple of 32, the 16 chunks of a 1x128 group are always held by one half-warp
// at the same k: the group amax is a 4-step shuffle.
#pragma once

#include <algorithm>
#include <type_traits>

#include "ops/cuda/common.cuh"

namespace fp8rl::cuda {

constexpr int kChunk = 8;
constexpr int kMaxRowThreads = 256;

// ---- chunks of 8 values

// 8 bf16 at p[j..j+8) as raw bits: one 16-byte load with VEC (needs p + j 16-byte aligned and
// j + 8 <= n), element loads with zeros past n without.
template <bool VEC>
__device__ __forceinline__ uint4 load_raw(const bf16* p, int64_t j, int64_t n) {
  if constexpr (VEC) {
    return *reinterpret_cast<const uint4*>(p + j);
  } else {
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) h[i] = j + i < n ? __bfloat16_as_ushort(p[j + i]) : 0u;
    return make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
  }
}
__device__ __forceinline__ void unpack(const uint4& u, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

// Flat element-wise kernels over n values of two bf16 inputs: a grid-stride walk in chunks of
// 8 where each thread first issues the loads of kFlatUnroll chunks of both inputs, then calls
// body(j, ra, rb) for each chunk (j: its first element; raw bits, zeros past n).
constexpr int kFlatUnroll = 4;
template <bool VEC, typename Body>
__device__ __forceinline__ void for_chunk_pairs(const bf16* a, const bf16* b, int64_t n,
                                                Body&& body) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x * kChunk;
  for (int64_t base = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kChunk; base < n;
       base += step * kFlatUnroll) {
    uint4 ra[kFlatUnroll], rb[kFlatUnroll];
#pragma unroll
    for (int u = 0; u < kFlatUnroll; ++u) {
      const int64_t j = base + u * step;
      if (j < n) {
        ra[u] = load_raw<VEC>(a, j, n);
        rb[u] = load_raw<VEC>(b, j, n);
      }
    }
#pragma unroll
    for (int u = 0; u < kFlatUnroll; ++u) {
      const int64_t j = base + u * step;
      if (j < n) body(j, ra[u], rb[u]);
    }
  }
}
// 8 floats rounded to bf16 and packed (element 2i in the low half of word i).
__device__ __forceinline__ uint4 pack(const float (&v)[8]) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  return u;
}

// 8 values at p[j..j+8) as floats (zeros past n without VEC).
template <bool VEC>
__device__ __forceinline__ void load_chunk(const bf16* p, int64_t j, int64_t n, float (&v)[8]) {
  unpack(load_raw<VEC>(p, j, n), v);
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
// v rounded to bf16 into p[j..j+8) (only the elements below n without VEC).
template <bool VEC>
__device__ __forceinline__ void store_chunk(bf16* p, int64_t j, int64_t n, const float (&v)[8]) {
  if constexpr (VEC) {
    *reinterpret_cast<uint4*>(p + j) = pack(v);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (j + i < n) p[j + i] = __float2bfloat16_rn(v[i]);
  }
}

template <bool VEC>
__device__ __forceinline__ void store_codes(uint8_t* p, int64_t j, int64_t n, const float (&v)[8],
                                            const Fp8Divisor& scale) {
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
// ss + sum of v^2 in a fixed order (explicit fma: every norm kernel sums the same way).
__device__ __forceinline__ float chunk_sumsq(const float (&v)[8], float ss) {
#pragma unroll
  for (int i = 0; i < 8; ++i) ss = __fmaf_rn(v[i], v[i], ss);
  return ss;
}

// ---- the threads of a row

// WARP: 32 threads per row, blockDim / 32 rows per block; otherwise one row per block of
// blockDim threads (a multiple of 32).
template <bool WARP>
struct RowThreads {
  int64_t row;
  int lane, n;
  __device__ __forceinline__ RowThreads() {
    if constexpr (WARP) {
      n = kWarp;
      lane = int(threadIdx.x) % kWarp;
      row = int64_t(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    } else {
      n = int(blockDim.x);
      lane = int(threadIdx.x);
      row = blockIdx.x;
    }
  }
  // First column of this thread's chunk k in segment s.
  template <int NCH>
  __device__ __forceinline__ int64_t col(int s, int k) const {
    return ((int64_t(s) * NCH + k) * n + lane) * kChunk;
  }
  template <int NCH>
  __device__ __forceinline__ int segments(int64_t cols) const {
    return int(ceil_div(ceil_div(cols, kChunk), int64_t(NCH) * n));
  }
  // Sum / max over the row's threads; every one of them gets the result. shm: 32 floats.
  __device__ __forceinline__ float sum(float v, float* shm) const {
    if constexpr (WARP)
      return warp_sum(v);
    else
      return block_sum(v, shm);
  }
  __device__ __forceinline__ float max(float v, float* shm) const {
    if constexpr (WARP)
      return warp_max(v);
    else
      return block_max(v, shm);
  }
};

// This thread's chunks of segment s of row p (cols values) into v as floats; zeros past the row.
template <int NCH, bool VEC, bool WARP, typename T>
__device__ __forceinline__ void load_row_chunks(const RowThreads<WARP>& g, const T* p, int s,
                                                int64_t cols, float (&v)[NCH][8]) {
#pragma unroll
  for (int k = 0; k < NCH; ++k) {
    const int64_t j = g.template col<NCH>(s, k);
    if (j < cols) {
      load_chunk<VEC>(p, j, cols, v[k]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[k][i] = 0.0f;
    }
  }
}

// How a row kernel covers `rows` rows of `cols` values: a warp per row up to 64 chunks (512
// values), else a block per row with the fewest chunks per thread (NCH 1, 2, 4, 8) that keeps
// it at <= 256 threads: hidden sizes 4096 / 12288 are NCH 2 x 256 threads / NCH 8 x 192
// threads. Rows above 2048 chunks (16384 values) take segments of NCH 4 x 256 threads (multi),
// read again for each pass. (256 threads at most: NCH 8 needs more than the 128 registers a
// 512-thread bound would allow.)
struct RowPlan {
  int nch = 1;
  bool warp = false, multi = false;
  unsigned threads = 0, grid = 0;
};
inline RowPlan plan_rows(int64_t rows, int64_t cols) {
  const int64_t chunks = ceil_div(cols, kChunk);
  RowPlan p;
  if (chunks <= 2 * kWarp) {
    p.warp = true;
    p.nch = chunks <= kWarp ? 1 : 2;
    p.threads = 256;
    p.grid = unsigned(ceil_div(rows, 256 / kWarp));
    return p;
  }
  p.grid = unsigned(rows);
  p.threads = kMaxRowThreads;
  if (chunks > 8 * kMaxRowThreads) {
    p.nch = 4;
    p.multi = true;
    return p;
  }
  for (int nch : {1, 2, 4, 8}) {
    p.nch = nch;
    if (ceil_div(chunks, nch) <= kMaxRowThreads) break;
  }
  p.threads = unsigned(ceil_div(ceil_div(chunks, p.nch), kWarp) * kWarp);
  return p;
}

// Calls launch(nch, warp, multi, vec) with std::integral_constant arguments for the plan: the
// one runtime-to-template switch of every row kernel. A kernel takes its segment count as
// g.segments<NCH>(cols) when multi and as 1 otherwise, so single-segment rows have no
// segment loop at all.
template <typename Launch>
void dispatch_rows(const RowPlan& p, bool vec, Launch&& launch) {
  using T = std::true_type;
  using F = std::false_type;
  auto with_vec = [&](auto nch, auto warp, auto multi) {
    if (vec)
      launch(nch, warp, multi, T{});
    else
      launch(nch, warp, multi, F{});
  };
  using I1 = std::integral_constant<int, 1>;
  using I2 = std::integral_constant<int, 2>;
  using I4 = std::integral_constant<int, 4>;
  using I8 = std::integral_constant<int, 8>;
  if (p.warp) {
    if (p.nch == 1)
      with_vec(I1{}, T{}, F{});
    else
      with_vec(I2{}, T{}, F{});
  } else if (p.multi) {
    with_vec(I4{}, F{}, T{});
  } else {
    switch (p.nch) {
      case 1:
        with_vec(I1{}, F{}, F{});
        break;
      case 2:
        with_vec(I2{}, F{}, F{});
        break;
      case 4:
        with_vec(I4{}, F{}, F{});
        break;
      default:
        with_vec(I8{}, F{}, F{});
        break;
    }
  }
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// ---- FP8 quantization of a row in registers (the recipe of quant/fp8.h)

// A pad row of a group-scaled activation (rows <= row < padded_rows): code 0, scale 1.
template <bool WARP>
__device__ __forceinline__ void write_pad_row(const RowThreads<WARP>& g, int64_t cols,
                                              const QuantOut& q) {
  uint8_t* codes = q.codes + g.row * cols;
  for (int64_t j = g.lane; j < cols; j += g.n) codes[j] = 0;
  for (int64_t b = g.lane; b < ceil_div(cols, 128); b += g.n)
    q.scales[b * q.padded_rows + g.row] = 1.0f;
}

// Whether g.row is a data row of a quantizing row kernel over q (rows of data, q.padded_rows
// in all): pad rows get code 0 and scale 1 here, rows past the padding nothing. With
// rows_end, the rows from *rows_end on are quantized zeros (code 0, scale 1) and not read.
template <bool WARP>
__device__ __forceinline__ bool quantized_data_row(const RowThreads<WARP>& g, int64_t rows,
                                                   int64_t cols, const QuantOut& q,
                                                   const int32_t* rows_end = nullptr) {
  if (g.row >= q.padded_rows) return false;  // whole warps only (WARP); never without
  if (g.row >= rows) {
    write_pad_row(g, cols, q);
    return false;
  }
  if (rows_end != nullptr && g.row >= *rows_end) {
    if (q.group) {
      write_pad_row(g, cols, q);
    } else {
      uint8_t* codes = q.codes + g.row * cols;
      for (int64_t j = g.lane; j < cols; j += g.n) codes[j] = 0;
      if (g.lane == 0) q.scales[g.row] = fp8_scale(0.0f);
    }
    return false;
  }
  return true;
}

// Quantizes row g.row (< rows) of q, a row of nseg segments (1, a compile-time constant, unless
// the plan is multi). values(s, v) must leave in v this thread's fp32 values of segment s
// (zeros past `cols`); it is called once per segment, and a second time when token
// scaling needs a row of several segments (it must then give the same floats). With a single
// segment v may come in already holding them: values() then finishes them in place. Called
// by all threads of the row (barriers, shuffles). With q.plain and VEC each thread also stores
// its values there rounded to bf16, after it has read them (plain may be the row's own input);
// the launchers write plain with a kernel of its own otherwise (it would spill registers).
template <int NCH, bool VEC, bool WARP, typename Values>
__device__ __forceinline__ void quantize_row(const RowThreads<WARP>& g, int nseg, int64_t cols,
                                             const QuantOut& q, float* shm, float (&v)[NCH][8],
                                             Values&& values) {
  uint8_t* codes = q.codes + g.row * cols;
  if (q.group) {
    // Every lane runs every k so that the half-warp shuffles are complete; chunks past the row
    // are zeros and add nothing to their group's amax.
    for (int s = 0; s < nseg; ++s) {
      values(s, v);
#pragma unroll
      for (int k = 0; k < NCH; ++k) {
        const int64_t j = g.template col<NCH>(s, k);
        float a = j < cols ? chunk_amax(v[k]) : 0.0f;
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
        const float scale = fp8_scale(a);
        if (j < cols) {
          store_codes<VEC>(codes, j, cols, v[k], fp8_divisor(scale));
          if (VEC && q.plain != nullptr) store_chunk<VEC>(q.plain + g.row * cols, j, cols, v[k]);
          if (j % 128 == 0) q.scales[(j / 128) * q.padded_rows + g.row] = scale;
        }
      }
    }
    return;
  }
  float a = 0.0f;
  for (int s = 0; s < nseg; ++s) {
    values(s, v);
#pragma unroll
    for (int k = 0; k < NCH; ++k)
      if (g.template col<NCH>(s, k) < cols) a = fmaxf(a, chunk_amax(v[k]));
  }
  const float scale = fp8_scale(g.max(a, shm));
  const Fp8Divisor div = fp8_divisor(scale);
  for (int s = 0; s < nseg; ++s) {
    if (nseg > 1) values(s, v);
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
      const int64_t j = g.template col<NCH>(s, k);
      if (j < cols) {
        store_codes<VEC>(codes, j, cols, v[k], div);
        if (VEC && q.plain != nullptr) store_chunk<VEC>(q.plain + g.row * cols, j, cols, v[k]);
      }
    }
  }
  if (g.lane == 0) q.scales[g.row] = scale;
}

}  // namespace fp8rl::cuda
