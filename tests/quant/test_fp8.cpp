// The FP8 recipe (quant/fp8.h) against its definition, element by element.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "quant/fp8.h"

using namespace fp8rl;

namespace {

Tensor random_matrix(int64_t r, int64_t c, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::empty({r, c}, DType::f32);
  for (int64_t i = 0; i < r * c; ++i) t.ptr<float>()[i] = scale * normal01(seed, uint64_t(i));
  return t;
}

float amax(const Tensor& t, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  float a = 0;
  const int64_t cols = t.shape()[1];
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) a = std::max(a, std::fabs(t.ptr<float>()[r * cols + c]));
  return a;
}

// Every code must be e4m3(x / s) for the scale of the element's group.
void expect_codes(const Tensor& x, const Tensor& q, auto scale_of) {
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      ASSERT_EQ(q.ptr<uint8_t>()[i], f32_to_e4m3(x.ptr<float>()[i] / scale_of(r, c)))
          << r << "," << c;
    }
}

TEST(Fp8Recipe, WeightScalesPerScheme) {
  // 300 x 200: partial 128-blocks in both dimensions (300 = 2*128 + 44, 200 = 128 + 72).
  const Tensor w = random_matrix(300, 200, 1, 0.05f);
  for (Fp8Scheme s : {Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block}) {
    Tensor q = Tensor::empty({300, 200}, DType::f8e4m3);
    Tensor sc = Tensor::empty(weight_scale_shape(s, 300, 200), DType::f32);
    quantize_weight(w, s, q, sc);
    const float* sp = sc.ptr<float>();
    if (s == Fp8Scheme::tensor) {
      EXPECT_EQ(sp[0], amax(w, 0, 300, 0, 200) / 448.0f);
    } else if (s == Fp8Scheme::row) {
      for (int64_t r = 0; r < 300; ++r) ASSERT_EQ(sp[r], amax(w, r, r + 1, 0, 200) / 448.0f);
    } else {
      EXPECT_EQ(sc.shape(), (Shape{3, 2}));
      for (int64_t b = 0; b < 6; ++b) {
        const int64_t r0 = (b / 2) * 128, c0 = (b % 2) * 128;
        ASSERT_EQ(sp[b], amax(w, r0, std::min<int64_t>(300, r0 + 128), c0,
                              std::min<int64_t>(200, c0 + 128)) /
                             448.0f)
            << "block " << b;
      }
    }
    expect_codes(w, q, [&](int64_t r, int64_t c) { return weight_scale_at(s, sp, r, c, 200); });
    // The group maximum maps to exactly 448.
    int max_codes = 0;
    for (int64_t i = 0; i < 300 * 200; ++i) max_codes += (q.ptr<uint8_t>()[i] & 0x7f) == 0x7e;
    EXPECT_GE(max_codes, 1);
  }
}

TEST(Fp8Recipe, AllZeroGroupsGetScaleOne) {
  Tensor w = Tensor::zeros({130, 130}, DType::f32);
  w.ptr<float>()[0] = 2.0f;  // only block (0,0) and row 0 are non-zero
  Tensor q = Tensor::empty({130, 130}, DType::f8e4m3);
  Tensor sb = Tensor::empty({2, 2}, DType::f32);
  quantize_weight(w, Fp8Scheme::block, q, sb);
  EXPECT_EQ(sb.ptr<float>()[0], 2.0f / 448.0f);
  EXPECT_EQ(sb.ptr<float>()[1], 1.0f);
  EXPECT_EQ(sb.ptr<float>()[3], 1.0f);
  Tensor sr = Tensor::empty({130}, DType::f32);
  quantize_weight(w, Fp8Scheme::row, q, sr);
  EXPECT_EQ(sr.ptr<float>()[1], 1.0f);
  EXPECT_EQ(q.ptr<uint8_t>()[1], 0);
}

TEST(Fp8Recipe, ActivationScalesPerGranularity) {
  // 19 tokens x 300 features: the last 1x128 group has 44 elements.
  const Tensor x = random_matrix(19, 300, 2, 3.0f);
  for (ActScaling a : {ActScaling::tensor, ActScaling::token, ActScaling::group}) {
    Tensor q = Tensor::empty({19, 300}, DType::f8e4m3);
    Tensor sc = Tensor::empty(act_scale_shape(a, 19, 300), DType::f32);
    quantize_activation(x, a, q, sc);
    const float* sp = sc.ptr<float>();
    auto scale_of = [&](int64_t r, int64_t c) {
      if (a == ActScaling::tensor) return sp[0];
      if (a == ActScaling::token) return sp[r];
      return sp[r * 3 + c / 128];
    };
    for (int64_t r = 0; r < 19; ++r) {
      for (int64_t g = 0; g < 3; ++g) {
        const float expect = a == ActScaling::tensor  ? amax(x, 0, 19, 0, 300)
                             : a == ActScaling::token ? amax(x, r, r + 1, 0, 300)
                                                      : amax(x, r, r + 1, g * 128,
                                                             std::min<int64_t>(300, g * 128 + 128));
        ASSERT_EQ(scale_of(r, g * 128), expect / 448.0f);
      }
    }
    expect_codes(x, q, scale_of);
  }
}

TEST(Fp8Recipe, StaticScaleSaturates) {
  Tensor x = Tensor::empty({1, 4}, DType::f32);
  const float vals[] = {1.0f, -1000.0f, 0.5f, 1e-6f};
  std::copy(vals, vals + 4, x.ptr<float>());
  Tensor q = Tensor::empty({1, 4}, DType::f8e4m3);
  Tensor s = Tensor::empty({1}, DType::f32);
  s.ptr<float>()[0] = 0.5f;
  quantize_activation(x, ActScaling::static_tensor, q, s);
  EXPECT_EQ(s.ptr<float>()[0], 0.5f);
  EXPECT_EQ(e4m3_to_f32(q.ptr<uint8_t>()[0]), 2.0f);
  EXPECT_EQ(e4m3_to_f32(q.ptr<uint8_t>()[1]), -448.0f);  // -2000 saturates
  s.ptr<float>()[0] = 0.0f;
  EXPECT_THROW(quantize_activation(x, ActScaling::static_tensor, q, s), Error);
}

TEST(Fp8Recipe, Bf16WeightsQuantizeLikeTheirFp32Values) {
  const Tensor w32 = random_matrix(40, 70, 3, 0.02f);
  Tensor w16 = Tensor::empty({40, 70}, DType::bf16);
  convert(w32.ptr<float>(), DType::f32, w16.ptr<uint16_t>(), DType::bf16, 40 * 70);
  Tensor back = Tensor::empty({40, 70}, DType::f32);
  convert(w16.ptr<uint16_t>(), DType::bf16, back.ptr<float>(), DType::f32, 40 * 70);
  Tensor qa = Tensor::empty({40, 70}, DType::f8e4m3), qb = Tensor::empty({40, 70}, DType::f8e4m3);
  Tensor sa = Tensor::empty({40}, DType::f32), sb = Tensor::empty({40}, DType::f32);
  quantize_weight(w16, Fp8Scheme::row, qa, sa);
  quantize_weight(back, Fp8Scheme::row, qb, sb);
  EXPECT_EQ(std::memcmp(qa.ptr<uint8_t>(), qb.ptr<uint8_t>(), 40 * 70), 0);
  EXPECT_EQ(std::memcmp(sa.ptr<float>(), sb.ptr<float>(), 40 * 4), 0);
}

}  // namespace
