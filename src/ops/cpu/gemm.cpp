#include "ops/cpu/gemm.h"

#include <algorithm>

#include "core/parallel.h"
#include "core/sanitizers.h"

namespace fp8rl::ops::cpu {

namespace {

constexpr int kLanes = 8;
constexpr int64_t kRowsPerBlock = 16;  // weight rows dequantized at a time (per thread)

inline float reduce_lanes(const float* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// out[i, j] for MR rows of x and NR rows of w; the per-element arithmetic is identical for
// every MR/NR, so edge tiles may use smaller ones. Unsanitized (core/sanitizers.h), so it calls
// the builtin: a sanitized std::fma would not inline into it.
template <int MR, int NR>
FP8RL_UNSANITIZED void dot_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t k,
                                float* out, int64_t ldo) {
  float acc[MR][NR][kLanes] = {};
  const int64_t k8 = k - k % kLanes;
  for (int64_t kk = 0; kk < k8; kk += kLanes) {
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) {
        const float* xv = x + i * ldx + kk;
        const float* wv = w + j * ldw + kk;
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) acc[i][j][l] = __builtin_fmaf(xv[l], wv[l], acc[i][j][l]);
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      float s = reduce_lanes(acc[i][j]);
      for (int64_t kk = k8; kk < k; ++kk) s = __builtin_fmaf(x[i * ldx + kk], w[j * ldw + kk], s);
      out[i * ldo + j] = s;
    }
  }
}

}  // namespace

void gemm_batch_invariant(Arena& scratch, const float* x, int64_t m, int64_t k, int64_t n,
                          const WeightRows& rows, float* out) {
  ArenaScope scope(scratch);
  TensorView buffers = scratch.alloc({num_threads(), kRowsPerBlock, k}, DType::f32);
  const int64_t blocks = (n + kRowsPerBlock - 1) / kRowsPerBlock;
  parallel_for(0, blocks, [&](int64_t b) {
    const int64_t n0 = b * kRowsPerBlock, n1 = std::min(n, n0 + kRowsPerBlock);
    float* w = buffers.ptr<float>() + int64_t(thread_index()) * kRowsPerBlock * k;
    rows(n0, n1, w);
    for (int64_t i = 0; i < m; i += 2) {
      const bool two = i + 1 < m;
      int64_t j = n0;
      for (; j + 4 <= n1; j += 4) {
        if (two)
          dot_tile<2, 4>(x + i * k, k, w + (j - n0) * k, k, k, out + i * n + j, n);
        else
          dot_tile<1, 4>(x + i * k, k, w + (j - n0) * k, k, k, out + i * n + j, n);
      }
      for (; j < n1; ++j) {
        if (two)
          dot_tile<2, 1>(x + i * k, k, w + (j - n0) * k, k, k, out + i * n + j, n);
        else
          dot_tile<1, 1>(x + i * k, k, w + (j - n0) * k, k, k, out + i * n + j, n);
      }
    }
  });
}

}  // namespace fp8rl::ops::cpu
