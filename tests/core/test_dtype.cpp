#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/rng.h"

using namespace fp8rl;

namespace {
// Reference RNE: among all finite codes of a table, the nearest value; ties to the even code.
uint8_t nearest_code(float x, const std::array<float, 256>& table, float max_val) {
  if (std::isnan(x)) return 0x7f | (std::signbit(x) ? 0x80 : 0);
  const float a = std::min(std::fabs(x), max_val);
  int best = -1;
  double best_d = 1e300;
  for (int c = 0; c < 0x80; ++c) {
    const float v = table[c];
    if (!std::isfinite(v)) continue;
    const double d = std::fabs(double(v) - double(a));
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return uint8_t(best | (std::signbit(x) ? 0x80 : 0));
}
}  // namespace

TEST(DType, E4m3TableKnownValues) {
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(e5m2_to_f32(0x7c)));
  EXPECT_EQ(e5m2_to_f32(0x3c), 1.0f);
}

TEST(DType, Fp8RoundTripEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const float v4 = e4m3_to_f32(uint8_t(c));
    if (!std::isnan(v4) && !(v4 == 0 && c == 0x80)) {
      EXPECT_EQ(f32_to_e4m3(v4), c) << c;
    }
    const float v5 = e5m2_to_f32(uint8_t(c));
    if (std::isfinite(v5) && !(v5 == 0 && c == 0x80)) {
      EXPECT_EQ(f32_to_e5m2(v5), c) << c;
    }
  }
}

TEST(DType, Fp8MidpointsRoundToEven) {
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = e4m3_to_f32(uint8_t(c)), hi = e4m3_to_f32(uint8_t(c + 1));
    const float mid = float((lo + hi) / 2);  // exact in fp32
    EXPECT_EQ(f32_to_e4m3(mid), (c % 2 == 0) ? c : c + 1) << "between codes " << c;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.0f)), c);
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1e9f)), c + 1);
    EXPECT_EQ(f32_to_e4m3(-mid), 0x80 | ((c % 2 == 0) ? c : c + 1));
  }
}

TEST(DType, Fp8Saturates) {
  EXPECT_EQ(f32_to_e4m3(449.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(470.0f), 0x7e);  // would round to 480 = NaN code without saturation
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_e5m2(1e30f), 0x7b);
  EXPECT_EQ(f32_to_e5m2(INFINITY), 0x7b);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
}

TEST(DType, Fp8MatchesNearestOnRandomInputs) {
  for (uint64_t i = 0; i < 200000; ++i) {
    const float x = (uniform01(7, i) - 0.5f) * std::ldexp(1.0f, int(uniform01(8, i) * 30) - 14);
    ASSERT_EQ(f32_to_e4m3(x), nearest_code(x, kE4m3Values, kE4m3Max)) << x;
    ASSERT_EQ(f32_to_e5m2(x * 64), nearest_code(x * 64, kE5m2Values, kE5m2Max)) << x * 64;
  }
}

TEST(DType, F16MatchesCompilerConversion) {
  for (uint64_t i = 0; i < (1u << 16); ++i) {
    const uint16_t h = uint16_t(i);
    const float v = f16_to_f32(h);
    _Float16 ref;
    std::memcpy(&ref, &h, 2);
    if (std::isnan(float(ref))) {
      EXPECT_TRUE(std::isnan(v));
      continue;
    }
    ASSERT_EQ(v, float(ref)) << h;
  }
  for (uint64_t i = 0; i < 1000000; ++i) {
    const uint32_t bits = uint32_t(splitmix64(i));
    const float x = f32_from_bits(bits);
    if (std::isnan(x)) continue;
    const _Float16 ref = _Float16(x);
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    ASSERT_EQ(f32_to_f16(x), rb) << x;
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x3f808001)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
}

TEST(DType, SafetensorsNames) {
  DType dt;
  ASSERT_TRUE(dtype_from_safetensors("F8_E4M3", &dt));
  EXPECT_EQ(dt, DType::f8e4m3);
  EXPECT_FALSE(dtype_from_safetensors("F8_E4M3FNUZ", &dt));
  EXPECT_FALSE(dtype_from_safetensors("garbage", &dt));
  EXPECT_EQ(dtype_to_safetensors(DType::bf16), "BF16");
}
