// The frozen linear's input gradient through the dequantized weight, and LoRA's gradients.
#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "core/sanitizers.h"
#include "ops/cpu/backward_ops.h"
#include "quant/fp8.h"

namespace fp8rl::ops::cpu {

namespace {

constexpr int64_t kTileRows = 16, kTileCols = 64;

// w_hat[n0:n1, k0:k1] into dst (row stride kTileCols): e4m3 code times its scale as
// dequantize_weight_rows() forms it, or the stored value widened to fp32.
void weight_tile(const LinearWeight& w, int64_t n0, int64_t n1, int64_t k0, int64_t k1,
                 float* dst) {
  const int64_t k = w.in_features();
  if (w.is_fp8()) {
    const uint8_t* codes = static_cast<const uint8_t*>(w.weight.data);
    const float* s = w.scales.ptr<const float>();
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t c = k0; c < k1; ++c)
        dst[(n - n0) * kTileCols + (c - k0)] =
            e4m3_to_f32(codes[n * k + c]) * weight_scale_at(w.scheme, s, n, c, k);
  } else {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t c = k0; c < k1; ++c)
        dst[(n - n0) * kTileCols + (c - k0)] =
            load_as_f32(w.weight.data, w.weight.dtype, size_t(n * k + c));
  }
}

// out[0:width] += sum over j < rows of g[j] * tile[j, 0:width] (row stride kTileCols), j in
// order. Unsanitized (core/sanitizers.h): its caller bounds rows and width by the tile.
FP8RL_UNSANITIZED void add_tile_product(const float* g, int64_t rows, const float* tile,
                                        int64_t width, float* out) {
  for (int64_t j = 0; j < rows; ++j) {
    const float a = g[j];
    const float* wt = tile + j * kTileCols;
    for (int64_t c = 0; c < width; ++c) out[c] += a * wt[c];
  }
}

}  // namespace

void linear_backward_input(const TensorView& dy, const LinearWeight& w, const TensorView& dx,
                           bool accumulate) {
  const int64_t m = dy.dim(0), n = w.out_features(), k = w.in_features();
  const float* g = dy.ptr<const float>();
  float* o = dx.ptr<float>();
  // One column strip of dx per task; each element sums over n in order, whatever M.
  parallel_for(0, (k + kTileCols - 1) / kTileCols, [&](int64_t strip) {
    const int64_t k0 = strip * kTileCols, k1 = std::min(k, k0 + kTileCols), width = k1 - k0;
    float tile[kTileRows * kTileCols];
    if (!accumulate)
      for (int64_t r = 0; r < m; ++r) std::fill(o + r * k + k0, o + r * k + k1, 0.0f);
    for (int64_t n0 = 0; n0 < n; n0 += kTileRows) {
      const int64_t n1 = std::min(n, n0 + kTileRows);
      weight_tile(w, n0, n1, k0, k1, tile);
      for (int64_t r = 0; r < m; ++r)
        add_tile_product(g + r * n + n0, n1 - n0, tile, width, o + r * k + k0);
    }
  });
}

void lora_backward(Arena& scratch, const TensorView& x, const TensorView& a, const TensorView& b,
                   float scale, const LoraDropout& dropout, const TensorView& dy,
                   const TensorView& dx, const TensorView& da, const TensorView& db) {
  const int64_t m = x.dim(0), k = x.dim(1), r = a.dim(0), n = b.dim(0);
  const float* ap = a.ptr<const float>();
  const float* bp = b.ptr<const float>();
  const float* g = dy.ptr<const float>();
  ArenaScope scope(scratch);
  // The adapter's input as the forward saw it, u = x_drop A^T and du = s dy B.
  TensorView xd_t = scratch.alloc({m, k}, DType::f32);
  TensorView u_t = scratch.alloc({m, r}, DType::f32);
  TensorView du_t = scratch.alloc({m, r}, DType::f32);
  lora_dropout(x, dropout, xd_t);
  const float* xd = xd_t.ptr<const float>();
  float* u = u_t.ptr<float>();
  float* du = du_t.ptr<float>();
  parallel_for(0, m, [&](int64_t i) {
    for (int64_t p = 0; p < r; ++p) {
      float s = 0.0f;
      for (int64_t c = 0; c < k; ++c) s += xd[i * k + c] * ap[p * k + c];
      u[i * r + p] = s;
    }
    for (int64_t p = 0; p < r; ++p) {
      float s = 0.0f;
      for (int64_t j = 0; j < n; ++j) s += g[i * n + j] * bp[j * r + p];
      du[i * r + p] = scale * s;
    }
  });
  // dB[j, p] += s sum_i dy[i, j] u[i, p]
  float* dbp = db.ptr<float>();
  parallel_for(0, n, [&](int64_t j) {
    for (int64_t p = 0; p < r; ++p) {
      float s = 0.0f;
      for (int64_t i = 0; i < m; ++i) s += g[i * n + j] * u[i * r + p];
      dbp[j * r + p] += scale * s;
    }
  });
  // dA[p, c] += sum_i du[i, p] x_drop[i, c], by column strips.
  float* dap = da.ptr<float>();
  parallel_for(0, (k + kTileCols - 1) / kTileCols, [&](int64_t strip) {
    const int64_t k0 = strip * kTileCols, k1 = std::min(k, k0 + kTileCols);
    for (int64_t p = 0; p < r; ++p) {
      float acc[kTileCols] = {};
      for (int64_t i = 0; i < m; ++i)
        for (int64_t c = k0; c < k1; ++c) acc[c - k0] += du[i * r + p] * xd[i * k + c];
      for (int64_t c = k0; c < k1; ++c) dap[p * k + c] += acc[c - k0];
    }
  });
  // dx[i, c] += mask * sum_p du[i, p] A[p, c]
  if (!dx.empty()) {
    float* o = dx.ptr<float>();
    parallel_for(0, m, [&](int64_t i) {
      for (int64_t c = 0; c < k; ++c) {
        float s = 0.0f;
        for (int64_t p = 0; p < r; ++p) s += du[i * r + p] * ap[p * k + c];
        o[i * k + c] += dropout_mask(dropout, uint64_t(i * k + c)) * s;
      }
    });
  }
}

}  // namespace fp8rl::ops::cpu
