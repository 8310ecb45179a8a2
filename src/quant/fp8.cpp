#include "quant/fp8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"

namespace fp8rl {

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

void check_matrix(const TensorView& t, const char* what) {
  CHECK(t.rank() == 2 && t.is_contiguous() && t.device == Device::cpu,
        "{} must be a contiguous 2-D CPU tensor, got shape {}", what, t.shape.str());
}

// amax of the rectangle [r0,r1) x [c0,c1) of a row-major matrix with `cols` columns.
float amax_of(const TensorView& m, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const int64_t cols = m.dim(1);
  float a = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c)
      a = std::max(a, std::fabs(load_as_f32(m.data, m.dtype, size_t(r * cols + c))));
  return a;
}

void quantize_rect(const TensorView& m, const TensorView& q, float scale, int64_t r0, int64_t r1,
                   int64_t c0, int64_t c1) {
  const int64_t cols = m.dim(1);
  uint8_t* out = q.ptr<uint8_t>();
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      const size_t i = size_t(r * cols + c);
      out[i] = f32_to_e4m3(load_as_f32(m.data, m.dtype, i) / scale);
    }
}
}  // namespace

Shape weight_scale_shape(Fp8Scheme scheme, int64_t n, int64_t k) {
  switch (scheme) {
    case Fp8Scheme::tensor:
      return {1};
    case Fp8Scheme::row:
      return {n};
    case Fp8Scheme::block:
      return {ceil_div(n, kFp8Block), ceil_div(k, kFp8Block)};
    case Fp8Scheme::off:
      break;
  }
  RAISE("no weight scales for an unquantized linear");
}

Shape act_scale_shape(ActScaling scaling, int64_t m, int64_t k) {
  switch (scaling) {
    case ActScaling::token:
      return {m};
    case ActScaling::group:
      return {m, ceil_div(k, kFp8Block)};
    case ActScaling::tensor:
    case ActScaling::static_tensor:
    case ActScaling::none:
      return {1};
  }
  RAISE("unknown activation scaling {}", int(scaling));
}

void quantize_weight(const TensorView& w, Fp8Scheme scheme, const TensorView& q,
                     const TensorView& scales) {
  check_matrix(w, "weight");
  check_matrix(q, "quantized weight");
  const int64_t n = w.dim(0), k = w.dim(1);
  CHECK(q.shape == w.shape && q.dtype == DType::f8e4m3, "quantized weight must be f8e4m3 {}",
        w.shape.str());
  CHECK(scales.dtype == DType::f32 && scales.shape == weight_scale_shape(scheme, n, k),
        "weight scales must be f32 {}", weight_scale_shape(scheme, n, k).str());
  float* s = scales.ptr<float>();
  switch (scheme) {
    case Fp8Scheme::tensor: {
      std::vector<float> row_amax(static_cast<size_t>(n));
      parallel_for(0, n, [&](int64_t r) { row_amax[size_t(r)] = amax_of(w, r, r + 1, 0, k); });
      float a = 0.0f;
      for (float v : row_amax) a = std::max(a, v);
      s[0] = fp8_scale_from_amax(a);
      parallel_for(0, n, [&](int64_t r) { quantize_rect(w, q, s[0], r, r + 1, 0, k); });
      break;
    }
    case Fp8Scheme::row:
      parallel_for(0, n, [&](int64_t r) {
        s[r] = fp8_scale_from_amax(amax_of(w, r, r + 1, 0, k));
        quantize_rect(w, q, s[r], r, r + 1, 0, k);
      });
      break;
    case Fp8Scheme::block: {
      const int64_t nb = ceil_div(n, kFp8Block), kb = ceil_div(k, kFp8Block);
      parallel_for(0, nb * kb, [&](int64_t b) {
        const int64_t r0 = (b / kb) * kFp8Block, c0 = (b % kb) * kFp8Block;
        const int64_t r1 = std::min(n, r0 + kFp8Block), c1 = std::min(k, c0 + kFp8Block);
        s[b] = fp8_scale_from_amax(amax_of(w, r0, r1, c0, c1));
        quantize_rect(w, q, s[b], r0, r1, c0, c1);
      });
      break;
    }
    case Fp8Scheme::off:
      RAISE("quantize_weight called with scheme off");
  }
}

void quantize_activation(const TensorView& x, ActScaling scaling, const TensorView& q,
                         const TensorView& scales) {
  check_matrix(x, "activation");
  CHECK(x.dtype == DType::f32, "activations are quantized from f32");
  const int64_t m = x.dim(0), k = x.dim(1);
  CHECK(q.shape == x.shape && q.dtype == DType::f8e4m3, "quantized activation must be f8e4m3 {}",
        x.shape.str());
  CHECK(scales.dtype == DType::f32 && scales.shape == act_scale_shape(scaling, m, k),
        "activation scales must be f32 {}", act_scale_shape(scaling, m, k).str());
  float* s = scales.ptr<float>();
  switch (scaling) {
    case ActScaling::tensor: {
      std::vector<float> row_amax(static_cast<size_t>(m));
      parallel_for(0, m, [&](int64_t r) { row_amax[size_t(r)] = amax_of(x, r, r + 1, 0, k); });
      float a = 0.0f;
      for (float v : row_amax) a = std::max(a, v);
      s[0] = fp8_scale_from_amax(a);
      parallel_for(0, m, [&](int64_t r) { quantize_rect(x, q, s[0], r, r + 1, 0, k); });
      break;
    }
    case ActScaling::static_tensor:
      CHECK(s[0] > 0 && std::isfinite(s[0]), "static input scale must be positive, got {}", s[0]);
      parallel_for(0, m, [&](int64_t r) { quantize_rect(x, q, s[0], r, r + 1, 0, k); });
      break;
    case ActScaling::token:
      parallel_for(0, m, [&](int64_t r) {
        s[r] = fp8_scale_from_amax(amax_of(x, r, r + 1, 0, k));
        quantize_rect(x, q, s[r], r, r + 1, 0, k);
      });
      break;
    case ActScaling::group: {
      const int64_t g = ceil_div(k, kFp8Block);
      parallel_for(0, m, [&](int64_t r) {
        for (int64_t b = 0; b < g; ++b) {
          const int64_t c0 = b * kFp8Block, c1 = std::min(k, c0 + kFp8Block);
          s[r * g + b] = fp8_scale_from_amax(amax_of(x, r, r + 1, c0, c1));
          quantize_rect(x, q, s[r * g + b], r, r + 1, c0, c1);
        }
      });
      break;
    }
    case ActScaling::none:
      RAISE("quantize_activation called with scaling none");
  }
}

void dequantize_weight(const TensorView& q, Fp8Scheme scheme, const TensorView& scales,
                       const TensorView& out) {
  check_matrix(q, "quantized weight");
  CHECK(q.dtype == DType::f8e4m3 && out.dtype == DType::f32 && out.shape == q.shape,
        "dequantize_weight: f8e4m3 {} -> f32 of the same shape", q.shape.str());
  const int64_t k = q.dim(1);
  parallel_for(0, q.dim(0), [&](int64_t r) {
    dequantize_weight_rows(q, scheme, scales, r, r + 1, out.ptr<float>() + r * k);
  });
}

void dequantize_weight_rows(const TensorView& q, Fp8Scheme scheme, const TensorView& scales,
                            int64_t n0, int64_t n1, float* dst) {
  const int64_t k = q.dim(1);
  const uint8_t* src = q.ptr<uint8_t>();
  const float* s = scales.ptr<float>();
  for (int64_t r = n0; r < n1; ++r)
    for (int64_t c = 0; c < k; ++c)
      dst[(r - n0) * k + c] = e4m3_to_f32(src[r * k + c]) * weight_scale_at(scheme, s, r, c, k);
}

}  // namespace fp8rl
