#include "ops/cpu/gemm.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace fp8rl::ops::cpu {

namespace {
constexpr int64_t kTileM = 4;
constexpr int64_t kTileN = 32;

// One tile: rows [m0, m0+tm), columns [n0, n0+tn). The accumulators stay in registers for the
// full tile; the partial-tile case runs the same per-element chain.
template <int64_t TM, int64_t TN>
void tile(const float* x, const float* wt, float* out, int64_t n, int64_t k, int64_t m0,
          int64_t n0, int64_t tm, int64_t tn) {
  float acc[TM][TN] = {};
  if (tm == TM && tn == TN) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const float* wrow = wt + kk * n + n0;
      for (int64_t i = 0; i < TM; ++i) {
        const float xv = x[(m0 + i) * k + kk];
#pragma omp simd
        for (int64_t j = 0; j < TN; ++j) acc[i][j] = std::fma(xv, wrow[j], acc[i][j]);
      }
    }
  } else {
    for (int64_t kk = 0; kk < k; ++kk) {
      const float* wrow = wt + kk * n + n0;
      for (int64_t i = 0; i < tm; ++i) {
        const float xv = x[(m0 + i) * k + kk];
        for (int64_t j = 0; j < tn; ++j) acc[i][j] = std::fma(xv, wrow[j], acc[i][j]);
      }
    }
  }
  for (int64_t i = 0; i < tm; ++i)
    for (int64_t j = 0; j < tn; ++j) out[(m0 + i) * n + n0 + j] = acc[i][j];
}
}  // namespace

void gemm_batch_invariant(const float* x, const float* wt, float* out, int64_t m, int64_t n,
                          int64_t k) {
  const int64_t tiles_n = (n + kTileN - 1) / kTileN;
  const int64_t tiles_m = (m + kTileM - 1) / kTileM;
  // Column tiles outermost: a [K, 32] slice of wt stays in cache across all row tiles.
  parallel_for(0, tiles_n, [&](int64_t tn_idx) {
    const int64_t n0 = tn_idx * kTileN, tn = std::min(kTileN, n - n0);
    for (int64_t tm_idx = 0; tm_idx < tiles_m; ++tm_idx) {
      const int64_t m0 = tm_idx * kTileM, tm = std::min(kTileM, m - m0);
      tile<kTileM, kTileN>(x, wt, out, n, k, m0, n0, tm, tn);
    }
  });
}

}  // namespace fp8rl::ops::cpu
