// The sampler (ops/sampling.h), one block per row. Every pass strides the row with the whole
// block; the top-k and top-p thresholds are found exactly by a 4 x 8-bit radix select over the
// order keys of the tempered logits, counting tokens (top-k) or their fixed-point masses
// (top-p) in shared-memory integer histograms, so that the result does not depend on the
// order of the atomics. Float reductions (max, sums) run in the fixed order of block_reduce.
#include <cfloat>

#include "core/rng.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/sampling_launch.h"

namespace fp8rl::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kNone = 0x7fffffff;  // "no token" index of the argmax reductions

// Larger value, larger key; -0 and +0 share a key (the CPU compares the floats).
__device__ __forceinline__ uint32_t order_key(float x) {
  uint32_t u = __float_as_uint(x);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (value, index) with the larger value first, the lower index on ties.
struct Best {
  float v;
  int i;
};
__device__ __forceinline__ bool better(const Best& a, const Best& b) {
  return a.v > b.v || (a.v == b.v && a.i < b.i);
}

struct Shared {
  float f[kWarps];
  Best best[kWarps];
  unsigned long long u[kWarps];
  unsigned long long hist[256];
  unsigned long long target;
  uint32_t sel;
};

// Block reductions in a fixed order (each warp's butterfly, then the warps in turn); every
// thread gets the result, and the shared slots are free again on return.
__device__ float block_max_any(float x, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  if (threadIdx.x % 32 == 0) sh.f[threadIdx.x / 32] = x;
  __syncthreads();
  float r = -INFINITY;
  for (int w = 0; w < kWarps; ++w) r = fmaxf(r, sh.f[w]);
  __syncthreads();
  return r;
}
__device__ float block_sum_f(float x, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  if (threadIdx.x % 32 == 0) sh.f[threadIdx.x / 32] = x;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < kWarps; ++w) r += sh.f[w];
  __syncthreads();
  return r;
}
__device__ unsigned long long block_sum_u64(unsigned long long x, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  if (threadIdx.x % 32 == 0) sh.u[threadIdx.x / 32] = x;
  __syncthreads();
  unsigned long long r = 0;
  for (int w = 0; w < kWarps; ++w) r += sh.u[w];
  __syncthreads();
  return r;
}
__device__ Best block_best(Best b, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const Best c{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    if (better(c, b)) b = c;
  }
  if (threadIdx.x % 32 == 0) sh.best[threadIdx.x / 32] = b;
  __syncthreads();
  Best r = sh.best[0];
  for (int w = 1; w < kWarps; ++w)
    if (better(sh.best[w], r)) r = sh.best[w];
  __syncthreads();
  return r;
}

// The fixed-point mass of a tempered logit (ops/sampling.h (d)), as the CPU computes it.
__device__ __forceinline__ unsigned long long mass(float l, float m) {
  return __float2ull_rz(expf(l - m) * ops::kSampleMassScale);
}

// The largest key t such that the tokens with key >= t (and >= floor_key, l > -inf) count
// (WEIGHTED: weigh) at least `target`; 0 when all of them together do not reach it.
template <bool WEIGHTED>
__device__ uint32_t radix_select(const float* l, int64_t v, uint32_t floor_key,
                                 unsigned long long target, float m, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  if (threadIdx.x == 0) sh.target = target;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < v; i += kThreads) {
      const float x = l[i];
      if (!(x > -INFINITY)) continue;
      const uint32_t key = order_key(x);
      if (key < floor_key || (key & mask) != prefix) continue;
      atomicAdd(&sh.hist[(key >> shift) & 255u], WEIGHTED ? mass(x, m) : 1ull);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long cum = 0, want = sh.target;
      uint32_t sel = 256;
      for (int b = 255; b >= 0; --b) {
        if (cum + sh.hist[b] >= want) {
          sel = uint32_t(b);
          sh.target = want - cum;
          break;
        }
        cum += sh.hist[b];
      }
      sh.sel = sel;
    }
    __syncthreads();
    const uint32_t sel = sh.sel;
    __syncthreads();
    if (sel == 256) return 0;  // fewer than target: no threshold
    prefix |= sel << shift;
    mask |= 255u << shift;
  }
  return prefix;
}

// (kThreads, 1): a 1024-thread block is alone on its SM anyway; without the minimum ptxas
// capped the kernel at 32 registers and spilled.
// A row without penalties, bans, top-k or top-p (GRPO's and the benchmarks' rows) reads its
// logits without a working copy: sample_plain.
__device__ bool plain_row(const ops::SampleRow& r, int64_t v) {
  return r.repetition_penalty == 1.0f && r.banned_begin == r.banned_end &&
         !(r.top_k > 0 && r.top_k < v) && !(r.top_p < 1.0f);
}

// Calls f(x[i], i) for this thread's share of the row's v logits. A 16-byte aligned row is
// read as float4s, two in flight per thread (a row is ~150 element loads a thread: one at a
// time, the pass waits on memory latency rather than bandwidth).
template <typename F>
__device__ __forceinline__ void for_each_logit(const float* x, int64_t v, F&& f) {
  const int tid = threadIdx.x;
  if ((reinterpret_cast<uintptr_t>(x) & 15) != 0) {
    for (int64_t i = tid; i < v; i += kThreads) f(x[i], i);
    return;
  }
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int64_t n4 = v / 4;
  auto four = [&](const float4& a, int64_t j) {
    f(a.x, 4 * j);
    f(a.y, 4 * j + 1);
    f(a.z, 4 * j + 2);
    f(a.w, 4 * j + 3);
  };
  int64_t j = tid;
  for (; j + kThreads < n4; j += 2 * kThreads) {
    const float4 a = x4[j], b = x4[j + kThreads];
    four(a, j);
    four(b, j + kThreads);
  }
  if (j < n4) four(x4[j], j);
  for (int64_t i = 4 * n4 + tid; i < v; i += kThreads) f(x[i], i);
}

// A plain row (plain_row). Without min-p, in one read of its logits: the greedy argmax (the
// running max and its first index), the raw normalizer as an online sum (each thread's sum of
// exp(x - its running max), rescaled when the max rises, merged at the max of the row) and the
// Gumbel pick, which needs no max. The same token as the general path (the pick and the argmax
// compare the same values); the logprob's normalizer differs from the general path's sum of
// exp(x - max) by fp32 rounding only. With min-p the pick needs the tempered max first: the max,
// then the rest (two reads).
__device__ void sample_plain(const ops::SampleRow& r, const float* x, int64_t v, Shared& sh,
                             float& m_raw, float& log_raw, int& token) {
  const bool two_reads = r.min_p > 0.0f && r.temperature != 0.0f;
  float m = -INFINITY;  // the max of the tempered logits, when two_reads
  if (two_reads) {
    float mx = -INFINITY;
    for_each_logit(x, v, [&](float xi, int64_t) { mx = fmaxf(mx, xi); });
    m = block_max_any(mx, sh) / r.temperature;
  }
  const uint64_t mixed = splitmix64(rng_key(r.stream, uint64_t(r.position)));
  // x / 1 is x in IEEE arithmetic: temperature 1 (GRPO's default) skips the divisions.
  const bool unit_temperature = r.temperature == 1.0f;
  const bool draw = r.temperature != 0.0f;
  float mt = -INFINITY, st = 0.0f;  // this thread's max and sum of exp(x - mt)
  int gi = kNone;                   // the first index of mt
  Best pick{-INFINITY, kNone};
  for_each_logit(x, v, [&](float xi, int64_t i) {
    if (xi > mt) {  // indices rise along a thread's share: the first of equal maxima stays
      st = st * expf(mt - xi) + 1.0f;  // 0 * exp(-inf) = 0 on the first finite one
      mt = xi;
      gi = int(i);
    } else if (xi > -INFINITY) {
      st += expf(xi - mt);
    }
    if (!draw) return;
    const float l = unit_temperature ? xi : xi / r.temperature;
    if (!(l > -INFINITY)) return;
    if (two_reads && !(expf(l - m) >= r.min_p)) return;
    const float g = -logf(-logf(uniform01_mixed(mixed, uint64_t(i))));
    const Best p{l + g, int(i)};
    if (better(p, pick)) pick = p;
  });
  const Best greedy = block_best(Best{mt, gi}, sh);
  m_raw = greedy.v;
  log_raw = logf(block_sum_f(st > 0.0f ? st * expf(mt - m_raw) : 0.0f, sh));
  // A row of -inf only: the general path's argmax is its first index.
  token = greedy.i != kNone ? greedy.i : 0;
  if (draw && m_raw > -INFINITY) {
    pick = block_best(pick, sh);
    if (pick.i != kNone) token = pick.i;
  }
}

__global__ void __launch_bounds__(kThreads, 1) sample_kernel(SampleArgs a) {
  __shared__ Shared sh;
  const ops::SampleRow r = a.rows[blockIdx.x];
  const int64_t v = a.v;
  const float* x = a.logits + int64_t(r.logit_row) * v;
  float* w = a.work + int64_t(blockIdx.x) * v;
  const int tid = threadIdx.x;

  float m_raw = -INFINITY, log_raw = 0.0f;
  int token = kNone;
  if (plain_row(r, v)) {
    sample_plain(r, x, v, sh, m_raw, log_raw, token);
  } else {
    for (int64_t i = tid; i < v; i += kThreads) {
      const float xi = x[i];
      w[i] = xi;
      m_raw = fmaxf(m_raw, xi);
    }
    m_raw = block_max_any(m_raw, sh);  // its barriers also order the copy before the edits
    if (r.repetition_penalty != 1.0f)
      for (int j = r.history_begin + tid; j < r.history_end; j += kThreads) {
        const int32_t id = a.history[j];
        if (id < 0 || id >= v) continue;
        const float xi = x[id];  // from the raw logit: a repeated id is penalized once
        w[id] = xi > 0 ? xi / r.repetition_penalty : xi * r.repetition_penalty;
      }
    __syncthreads();
    for (int j = r.banned_begin + tid; j < r.banned_end; j += kThreads) {
      const int32_t id = a.history[j];
      if (id >= 0 && id < v) w[id] = -INFINITY;
    }
    __syncthreads();

    // The normalizer of the raw logprobs (the processed ones: launch_tempered_logprobs).
    float s_raw = 0.0f;
    Best greedy{-INFINITY, kNone};
    for (int64_t i = tid; i < v; i += kThreads) {
      const float xi = x[i];
      s_raw += expf(xi - m_raw);
      const Best c{w[i], int(i)};
      if (better(c, greedy)) greedy = c;
    }
    log_raw = logf(block_sum_f(s_raw, sh));
    greedy = block_best(greedy, sh);

    token = greedy.i;
    if (r.temperature != 0.0f) {
      float m = -INFINITY;
      for (int64_t i = tid; i < v; i += kThreads) {
        const float l = w[i] / r.temperature;
        w[i] = l;
        m = fmaxf(m, l);
      }
      m = block_max_any(m, sh);
      if (m > -INFINITY) {
        uint32_t floor_key = 0;
        if (r.top_k > 0 && r.top_k < v)
          floor_key = radix_select<false>(w, v, 0, (unsigned long long)(r.top_k), m, sh);
        if (r.top_p < 1.0f) {
          unsigned long long total = 0;
          for (int64_t i = tid; i < v; i += kThreads) {
            const float l = w[i];
            if (l > -INFINITY && order_key(l) >= floor_key) total += mass(l, m);
          }
          total = block_sum_u64(total, sh);
          unsigned long long target = (unsigned long long)(ceil(double(r.top_p) * double(total)));
          target = target < 1 ? 1 : (target > total ? total : target);
          const uint32_t t = radix_select<true>(w, v, floor_key, target, m, sh);
          floor_key = t > floor_key ? t : floor_key;
        }
        const uint64_t mixed = splitmix64(rng_key(r.stream, uint64_t(r.position)));
        Best pick{-INFINITY, kNone};
        for (int64_t i = tid; i < v; i += kThreads) {
          const float l = w[i];
          if (!(l > -INFINITY) || order_key(l) < floor_key) continue;
          if (r.min_p > 0.0f && !(expf(l - m) >= r.min_p)) continue;
          const float g = -logf(-logf(uniform01_mixed(mixed, uint64_t(i))));
          const Best c{l + g, int(i)};
          if (better(c, pick)) pick = c;
        }
        pick = block_best(pick, sh);
        if (pick.i != kNone) token = pick.i;
      }
    }
  }

  if (tid == 0) {
    a.tokens[blockIdx.x] = token;
    a.logprobs[blockIdx.x] = x[token] - m_raw - log_raw;
  }
  // Top logprobs: K rounds of an argmax over the tokens after the previous one in the order
  // (value descending, index ascending).
  Best prev{INFINITY, -1};
  for (int k = 0; k < a.top_k_logprobs; ++k) {
    Best b{-INFINITY, kNone};
    for (int64_t i = tid; i < v; i += kThreads) {
      const Best c{x[i], int(i)};
      if (better(prev, c) && better(c, b)) b = c;
    }
    b = block_best(b, sh);
    if (tid == 0) {
      a.top_ids[blockIdx.x * a.top_k_logprobs + k] = b.i;
      a.top_logprobs[blockIdx.x * a.top_k_logprobs + k] = b.v - m_raw - log_raw;
    }
    prev = b;
  }
}

}  // namespace

void launch_sample(const SampleArgs& a, cudaStream_t s) {
  if (a.r == 0) return;
  sample_kernel<<<unsigned(a.r), kThreads, 0, s>>>(a);
  FP8RL_LAUNCH_CHECK("sample");
}

}  // namespace fp8rl::cuda
