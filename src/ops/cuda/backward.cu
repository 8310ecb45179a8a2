// Kernels of the backward ops (ops/backward.h) that are element-wise or row-wise: RMSNorm's
// inverse RMS and gradient, RoPE's inverse rotation, the gated activations' and softcap's
// derivatives, LoRA's dropout mask, and the conversions the backward GEMMs need. Written to be
// obviously correct before fast: one thread per element (grid-stride) or one block (one warp for
// short rows) per row, fp32 math in the formulas of ops/cpu/backward_norm.cpp; activations are read
// as bf16, gradients are f32.
//
// Determinism: every sum has a fixed order (block_sum's, or a loop), and the norm weight's
// gradient is reduced in two passes (per-chunk partial sums over rows, then the chunks in
// order per column) rather than with float atomics, so a run's gradients repeat bit for bit.
#include "ops/cuda/common.cuh"
#include "ops/cuda/rope_angle.cuh"
#include "ops/cuda/sampling_launch.h"
#include "ops/uniform_hash.h"

namespace fp8rl::cuda {

namespace {

constexpr int kThreads = 256;

// A grid-stride loop over n elements.
#define FP8RL_FOR_EACH(i, n)                                                \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// ---- RMSNorm

// The threads that take one row: a whole block for wide rows, one warp for rows of at most
// kWarpRowMaxD values (the per-head q/k norms, d = 64..256: a block per such row left most of
// its threads idle and paid two barriers a row; a warp per row is 5-7x faster there). The
// sums' order is fixed either way (block_sum's, or the warp's butterfly).
constexpr int64_t kWarpRowMaxD = 512;
template <bool kWarpRows>
struct RowTeam {
  int64_t first, stride;
  int64_t lane, size;
  __device__ RowTeam() {
    if (kWarpRows) {
      first = int64_t(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp;
      stride = int64_t(gridDim.x) * (kThreads / kWarp);
      lane = threadIdx.x % kWarp;
      size = kWarp;
    } else {
      first = blockIdx.x;
      stride = gridDim.x;
      lane = threadIdx.x;
      size = blockDim.x;
    }
  }
  __device__ float sum(float v, float* shm) const {
    return kWarpRows ? warp_sum(v) : block_sum(v, shm);
  }
};

// inv_rms[r] = 1 / sqrt(sum_j x[r,j]^2 / d + eps).
template <bool kWarpRows>
__global__ void __launch_bounds__(kThreads)
    inv_rms_kernel(const bf16* x, int64_t rows, int64_t d, float eps, float* inv_rms) {
  __shared__ float shm[kThreads / kWarp];
  const RowTeam<kWarpRows> team;
  for (int64_t r = team.first; r < rows; r += team.stride) {  // uniform per team
    const bf16* xr = x + r * d;
    float ss = 0.0f;
    for (int64_t j = team.lane; j < d; j += team.size) {
      const float v = __bfloat162float(xr[j]);
      ss = __fmaf_rn(v, v, ss);
    }
    ss = team.sum(ss, shm);
    if (team.lane == 0) inv_rms[r] = 1.0f / sqrtf(ss / float(d) + eps);
  }
}

__device__ __forceinline__ float weight_eff(const float* w, int64_t j, bool plus_one) {
  return plus_one ? 1.0f + w[j] : w[j];
}

// dx = inv * (g - x_hat * mean(g * x_hat)) with g = dy * w_eff, x_hat = x * inv. dx may be dy:
// each thread reads dy[j] before it writes dx[j] at the same j, and every read of the first
// pass is done before the team's sum (a barrier for a block; a warp's lanes run in step).
template <bool kWarpRows>
__global__ void __launch_bounds__(kThreads)
    rms_norm_dx_kernel(const bf16* x, const float* w, const float* inv_rms, bool plus_one,
                       const float* dy, float* dx, int64_t rows, int64_t d) {
  __shared__ float shm[kThreads / kWarp];
  const RowTeam<kWarpRows> team;
  for (int64_t r = team.first; r < rows; r += team.stride) {
    const bf16* xr = x + r * d;
    const float* gr = dy + r * d;
    const float inv = inv_rms[r];
    float dot = 0.0f;
    for (int64_t j = team.lane; j < d; j += team.size)
      dot = __fmaf_rn(gr[j] * weight_eff(w, j, plus_one), __bfloat162float(xr[j]) * inv, dot);
    const float mean = team.sum(dot, shm) / float(d);
    float* out = dx + r * d;
    for (int64_t j = team.lane; j < d; j += team.size) {
      const float xh = __bfloat162float(xr[j]) * inv;
      out[j] = inv * (gr[j] * weight_eff(w, j, plus_one) - xh * mean);
    }
  }
}

// partial[c, j] = sum over rows r of chunk c (in order) of dy[r,j] * x_hat[r,j]; a thread per
// column j of a chunk (blockIdx.y): consecutive threads read consecutive columns.
__global__ void __launch_bounds__(kThreads)
    norm_dw_partial_kernel(const bf16* x, const float* inv_rms, const float* dy, int64_t rows,
                           int64_t d, int64_t rows_per_chunk, float* partial) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  const int64_t c = blockIdx.y, r0 = c * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    acc = __fmaf_rn(dy[r * d + j], __bfloat162float(x[r * d + j]) * inv_rms[r], acc);
  partial[c * d + j] = acc;
}

// dw[j] += sum over chunks c (in order) of partial[c, j].
__global__ void __launch_bounds__(kThreads)
    norm_dw_reduce_kernel(const float* partial, int64_t chunks, int64_t d, float* dw) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float s = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) s += partial[c * d + j];
  dw[j] += s;
}

// ---- RoPE

// The inverse rotation of each pair (a, b) = (v[i], v[i + D/2]) in place: a warp per
// (token, head), lanes over i.
__global__ void __launch_bounds__(kThreads)
    rope_backward_kernel(float* dy, int64_t t, int64_t heads, int64_t d, const int32_t* positions,
                         const float* inv_freq) {
  const int64_t row = int64_t(blockIdx.x) * (kThreads / kWarp) + threadIdx.x / kWarp;
  if (row >= t * heads) return;
  const int lane = int(threadIdx.x) % kWarp;
  const int64_t half = d / 2;
  const int32_t pos = positions[row / heads];
  float* v = dy + row * d;
  for (int64_t i = lane; i < half; i += kWarp) {
    float c, s;
    rope_cos_sin(pos, inv_freq[i], &c, &s);
    const float a = v[i], b = v[i + half];
    v[i] = a * c + b * s;
    v[i + half] = b * c - a * s;
  }
}

// ---- gated activations and softcap

// {act(g), act'(g)} as ops/cpu/backward_norm.cpp computes them (expf, tanhf, IEEE division).
template <int ACT>
__device__ __forceinline__ float2 act_and_grad(float x) {
  if constexpr (ACT == 0) {
    const float e = 1.0f + expf(-x);
    const float s = 1.0f / e;
    return make_float2(x / e, s * (1.0f + x * (1.0f - s)));
  } else {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    constexpr float kCubic = 0.044715f;
    const float t = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
    return make_float2(0.5f * x * (1.0f + t),
                       0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi *
                                               (1.0f + 3.0f * kCubic * x * x));
  }
}

// dgate = dout * up * act'(gate), dup = dout * act(gate). dgate or dup may be dout: all three
// inputs of an element are read before either output is written.
template <int ACT>
__global__ void __launch_bounds__(kThreads)
    gated_backward_kernel(const bf16* gate, const bf16* up, const float* dout, float* dgate,
                          float* dup, int64_t n) {
  FP8RL_FOR_EACH(i, n) {
    const float g = __bfloat162float(gate[i]), u = __bfloat162float(up[i]), d = dout[i];
    const float2 a = act_and_grad<ACT>(g);
    dgate[i] = d * u * a.y;
    dup[i] = d * a.x;
  }
}

// dx = dy * (1 - (y / cap)^2), rounded as the CPU's (no fused multiply-add). dx may be dy.
__global__ void __launch_bounds__(kThreads)
    softcap_backward_kernel(const float* y, float cap, const float* dy, float* dx, int64_t n) {
  FP8RL_FOR_EACH(i, n) {
    const float t = y[i] / cap;
    dx[i] = __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(t, t)));
  }
}

// ---- LoRA dropout and conversions

// The multiplier of element i (ops/cpu/backward_norm.cpp dropout_mask): 0 or keep.
__device__ __forceinline__ float dropout_mask(const DropoutMask& m, int64_t i) {
  if (!m.on) return 1.0f;
  return uniform_hash(m.seed, uint64_t(i), 1.0f) >= m.threshold ? m.keep : 0.0f;
}

template <typename Out>
__device__ __forceinline__ Out store_as(float v);
template <>
__device__ __forceinline__ float store_as<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ bf16 store_as<bf16>(float v) {
  return __float2bfloat16_rn(v);
}

// out = x * mask (bf16 out: rounded once; f32 out: exact). out may be x (bf16).
template <typename Out>
__global__ void __launch_bounds__(kThreads)
    lora_dropout_kernel(const bf16* x, DropoutMask m, Out* out, int64_t n) {
  FP8RL_FOR_EACH(i, n) out[i] = store_as<Out>(__bfloat162float(x[i]) * dropout_mask(m, i));
}

// dx += mask * t.
__global__ void __launch_bounds__(kThreads)
    dropout_accumulate_kernel(const float* t, DropoutMask m, float* dx, int64_t n) {
  FP8RL_FOR_EACH(i, n) dx[i] += dropout_mask(m, i) * t[i];
}

__global__ void __launch_bounds__(kThreads)
    f32_to_bf16_kernel(const float* in, bf16* out, int64_t n) {
  FP8RL_FOR_EACH(i, n) out[i] = __float2bfloat16_rn(in[i]);
}

// ---- lm_head cross-entropy (rows of f32 logits of one chunk)

// The max (of values of any sign: common.cuh's block_max starts at 0, logits may all be
// negative) and an fp64 sum over a block of any multiple of 32 threads, every thread getting
// the result, in a fixed order.
__device__ __forceinline__ float block_max_any(float v, float* shm) {
  v = warp_max(v);
  const int w = threadIdx.x / kWarp, l = threadIdx.x % kWarp;
  if (l == 0) shm[w] = v;
  __syncthreads();
  float r = shm[0];
  for (int i = 1; i < int(blockDim.x) / kWarp; ++i) r = fmaxf(r, shm[i]);
  __syncthreads();
  return r;
}
__device__ __forceinline__ double block_sum_f64(double v, double* shm) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int w = threadIdx.x / kWarp, l = threadIdx.x % kWarp;
  if (l == 0) shm[w] = v;
  __syncthreads();
  double r = 0.0;
  for (int i = 0; i < int(blockDim.x) / kWarp; ++i) r += shm[i];
  __syncthreads();
  return r;
}

__device__ constexpr float kNaN = __builtin_nanf("");

// z = softcap(l) / temperature (ops/cpu/backward_cross_entropy.cpp scaled_logit).
__device__ __forceinline__ float scaled_logit(float l, float temperature, float cap) {
  if (cap > 0.0f) l = cap * tanhf(l / cap);
  return l / temperature;
}

// ln sum_j exp(z_j) over a row, z = scaled_logit(raw): the max, then the exponentials and
// their sum in fp64 (as the CPU), in the fixed order of a kThreads block. The one log-softmax
// of the cross-entropy and of the sampler's processed logprobs: the engine-trainer logprob
// mismatch can be zero only if both reduce alike.
__device__ double tempered_lse(const float* raw, int64_t v, float temperature, float cap,
                               float* shm, double* shd) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += kThreads)
    mx = fmaxf(mx, scaled_logit(raw[j], temperature, cap));
  mx = block_max_any(mx, shm);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < v; j += kThreads)
    sum += exp(double(scaled_logit(raw[j], temperature, cap) - mx));
  return double(mx) + log(block_sum_f64(sum, shd));
}

// A block per row of raw logits: lse (tempered_lse), logprob = z_target - lse, loss =
// -logprob, entropy = sum_v p_v (lse - z_v); ignored rows (kIgnoreIndex) get 0 but their lse;
// a target outside [0, v) gives NaN (the host cannot check device targets).
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(const float* logits, const int32_t* targets, int64_t rows, int64_t v,
                              float temperature, float cap, float* loss, float* logprob, float* lse,
                              float* entropy) {
  __shared__ float shm[kThreads / kWarp];
  __shared__ double shd[kThreads / kWarp];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* raw = logits + r * v;
    const double l = tempered_lse(raw, v, temperature, cap, shm, shd);
    const int32_t tg = targets[r];
    const bool ignored = tg == kCrossEntropyIgnore;
    const bool valid = ignored || (tg >= 0 && tg < v);
    double e = 0.0;
    if (entropy != nullptr && !ignored)
      for (int64_t j = threadIdx.x; j < v; j += kThreads) {
        const double d = l - double(scaled_logit(raw[j], temperature, cap));
        e += exp(-d) * d;
      }
    if (entropy != nullptr) e = block_sum_f64(e, shd);
    if (threadIdx.x == 0) {
      const float lp = !valid    ? kNaN
                       : ignored ? 0.0f
                                 : float(double(scaled_logit(raw[tg], temperature, cap)) - l);
      lse[r] = float(l);
      logprob[r] = lp;
      loss[r] = -lp;
      if (entropy != nullptr) entropy[r] = valid ? float(e) : kNaN;
    }
  }
}

// The processed logprob of each sampled token (ops/sampling.h): log softmax(raw / T) at the
// token, through the cross-entropy's tempered_lse, so the engine reports what the trainer's
// pass computes from the same logits. A block per sample row (rows may share a logit row).
__global__ void __launch_bounds__(kThreads)
    tempered_logprobs_kernel(const float* logits, const ops::SampleRow* rows, const int32_t* tokens,
                             int64_t r, int64_t v, float* out) {
  __shared__ float shm[kThreads / kWarp];
  __shared__ double shd[kThreads / kWarp];
  for (int64_t i = blockIdx.x; i < r; i += gridDim.x) {
    const ops::SampleRow row = rows[i];
    const float* raw = logits + int64_t(row.logit_row) * v;
    const float t = row.temperature == 0.0f ? 1.0f : row.temperature;
    const double l = tempered_lse(raw, v, t, 0.0f, shm, shd);
    const int32_t tg = tokens[i];
    if (threadIdx.x == 0)
      out[i] = tg >= 0 && tg < v ? float(double(scaled_logit(raw[tg], t, 0.0f)) - l) : kNaN;
  }
}

// The logits of a chunk (raw, recomputed) become their gradient in place:
// dz = dloss (softmax(z) - onehot(target)) through 1 / temperature and the softcap's
// 1 - tanh^2; ignored rows 0, a target outside [0, v) NaN.
__global__ void __launch_bounds__(kThreads)
    cross_entropy_grad_kernel(float* logits, const int32_t* targets, int64_t rows, int64_t v,
                              float temperature, float cap, const float* lse, const float* dloss) {
  FP8RL_FOR_EACH(i, rows * v) {
    const int64_t r = i / v, j = i % v;
    const int32_t tg = targets[r];
    float g = 0.0f;
    if (tg != kCrossEntropyIgnore) {
      float cap_grad = 1.0f, z = logits[i];
      if (cap > 0.0f) {
        const float th = tanhf(z / cap);
        z = cap * th;
        cap_grad = 1.0f - th * th;
      }
      z /= temperature;
      const float prob = expf(z - lse[r]);
      const float dz = dloss[r] * (prob - (j == tg ? 1.0f : 0.0f));
      g = tg >= 0 && tg < v ? dz / temperature * cap_grad : kNaN;
    }
    logits[i] = g;
  }
}

#undef FP8RL_FOR_EACH

unsigned flat_grid(int64_t n) {
  return grid_for(n, kThreads);
}
unsigned row_grid(int64_t rows) {
  return grid_for(rows, 1);
}
unsigned warp_row_grid(int64_t rows) {
  return grid_for(rows, kThreads / kWarp);
}

// Rows of one chunk of the norm weight's gradient: at least 32 (the partial sums stay short
// enough to be cheap) and at most 4096 chunks (grid.y and the scratch stay small).
int64_t dw_rows_per_chunk(int64_t rows) {
  const int64_t by_count = ceil_div(rows, 4096);
  return by_count > 32 ? by_count : 32;
}

}  // namespace

void launch_inv_rms(const bf16* x, int64_t rows, int64_t d, float eps, float* inv_rms,
                    cudaStream_t s) {
  if (rows == 0) return;
  if (d <= kWarpRowMaxD)
    inv_rms_kernel<true><<<warp_row_grid(rows), kThreads, 0, s>>>(x, rows, d, eps, inv_rms);
  else
    inv_rms_kernel<false><<<row_grid(rows), kThreads, 0, s>>>(x, rows, d, eps, inv_rms);
  FP8RL_LAUNCH_CHECK("inv_rms");
}

int64_t norm_dw_chunks(int64_t rows) {
  return ceil_div(rows, dw_rows_per_chunk(rows));
}

void launch_rms_norm_backward(const bf16* x, const float* w, const float* inv_rms, bool plus_one,
                              const float* dy, float* dx, float* dw, float* partial, int64_t rows,
                              int64_t d, cudaStream_t s) {
  if (rows == 0 || d == 0) return;
  if (dw != nullptr) {  // first: dx may overwrite dy
    const int64_t rpc = dw_rows_per_chunk(rows), chunks = norm_dw_chunks(rows);
    const dim3 grid(unsigned(ceil_div(d, kThreads)), unsigned(chunks));
    norm_dw_partial_kernel<<<grid, kThreads, 0, s>>>(x, inv_rms, dy, rows, d, rpc, partial);
    FP8RL_LAUNCH_CHECK("rms_norm_backward dw partial");
    norm_dw_reduce_kernel<<<unsigned(ceil_div(d, kThreads)), kThreads, 0, s>>>(partial, chunks, d,
                                                                               dw);
    FP8RL_LAUNCH_CHECK("rms_norm_backward dw reduce");
  }
  if (d <= kWarpRowMaxD)
    rms_norm_dx_kernel<true>
        <<<warp_row_grid(rows), kThreads, 0, s>>>(x, w, inv_rms, plus_one, dy, dx, rows, d);
  else
    rms_norm_dx_kernel<false>
        <<<row_grid(rows), kThreads, 0, s>>>(x, w, inv_rms, plus_one, dy, dx, rows, d);
  FP8RL_LAUNCH_CHECK("rms_norm_backward dx");
}

void launch_rope_backward(float* dy, int64_t t, int64_t heads, int64_t d, const int32_t* positions,
                          const float* inv_freq, cudaStream_t s) {
  if (t * heads * d == 0) return;
  const unsigned grid = unsigned(ceil_div(t * heads, kThreads / kWarp));
  rope_backward_kernel<<<grid, kThreads, 0, s>>>(dy, t, heads, d, positions, inv_freq);
  FP8RL_LAUNCH_CHECK("rope_backward");
}

void launch_gated_backward(const bf16* gate, const bf16* up, const float* dout, int64_t n, int act,
                           float* dgate, float* dup, cudaStream_t s) {
  if (n == 0) return;
  if (act == 0)
    gated_backward_kernel<0><<<flat_grid(n), kThreads, 0, s>>>(gate, up, dout, dgate, dup, n);
  else
    gated_backward_kernel<1><<<flat_grid(n), kThreads, 0, s>>>(gate, up, dout, dgate, dup, n);
  FP8RL_LAUNCH_CHECK("gated_backward");
}

void launch_softcap_backward(const float* y, float cap, const float* dy, float* dx, int64_t n,
                             cudaStream_t s) {
  if (n == 0) return;
  softcap_backward_kernel<<<flat_grid(n), kThreads, 0, s>>>(y, cap, dy, dx, n);
  FP8RL_LAUNCH_CHECK("softcap_backward");
}

void launch_lora_dropout(const bf16* x, const DropoutMask& m, int64_t n, bf16* out,
                         cudaStream_t s) {
  if (n == 0) return;
  lora_dropout_kernel<bf16><<<flat_grid(n), kThreads, 0, s>>>(x, m, out, n);
  FP8RL_LAUNCH_CHECK("lora_dropout");
}

void launch_lora_dropout_f32(const bf16* x, const DropoutMask& m, int64_t n, float* out,
                             cudaStream_t s) {
  if (n == 0) return;
  lora_dropout_kernel<float><<<flat_grid(n), kThreads, 0, s>>>(x, m, out, n);
  FP8RL_LAUNCH_CHECK("lora_dropout f32");
}

void launch_dropout_accumulate(const float* t, const DropoutMask& m, int64_t n, float* dx,
                               cudaStream_t s) {
  if (n == 0) return;
  dropout_accumulate_kernel<<<flat_grid(n), kThreads, 0, s>>>(t, m, dx, n);
  FP8RL_LAUNCH_CHECK("dropout_accumulate");
}

void launch_f32_to_bf16(const float* in, int64_t n, bf16* out, cudaStream_t s) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<flat_grid(n), kThreads, 0, s>>>(in, out, n);
  FP8RL_LAUNCH_CHECK("f32_to_bf16");
}

void launch_cross_entropy_rows(float* logits, const int32_t* targets, int64_t rows, int64_t v,
                               float temperature, float softcap, float* loss, float* logprob,
                               float* lse, float* entropy, cudaStream_t s) {
  if (rows == 0) return;
  cross_entropy_rows_kernel<<<row_grid(rows), kThreads, 0, s>>>(
      logits, targets, rows, v, temperature, softcap, loss, logprob, lse, entropy);
  FP8RL_LAUNCH_CHECK("cross_entropy_rows");
}

void launch_tempered_logprobs(const SampleArgs& a, cudaStream_t s) {
  if (a.r == 0 || a.processed == nullptr) return;
  tempered_logprobs_kernel<<<row_grid(a.r), kThreads, 0, s>>>(a.logits, a.rows, a.tokens, a.r, a.v,
                                                              a.processed);
  FP8RL_LAUNCH_CHECK("tempered_logprobs");
}

void launch_cross_entropy_grad(float* logits, const int32_t* targets, int64_t rows, int64_t v,
                               float temperature, float softcap, const float* lse,
                               const float* dloss, cudaStream_t s) {
  if (rows * v == 0) return;
  cross_entropy_grad_kernel<<<flat_grid(rows * v), kThreads, 0, s>>>(
      logits, targets, rows, v, temperature, softcap, lse, dloss);
  FP8RL_LAUNCH_CHECK("cross_entropy_grad");
}

}  // namespace fp8rl::cuda
