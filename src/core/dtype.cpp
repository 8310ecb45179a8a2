#include "core/dtype.h"

#include <array>
#include <cmath>

#include "core/check.h"

namespace fp8rl {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f8e4m3: return 1;
    case DType::f8e5m2: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  RAISE("unknown dtype {}", int(dt));
}

std::string_view dtype_name(DType dt) {
  switch (dt) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f8e4m3: return "f8e4m3";
    case DType::f8e5m2: return "f8e5m2";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  RAISE("unknown dtype {}", int(dt));
}

namespace {
struct StName {
  std::string_view name;
  DType dt;
};
constexpr std::array<StName, 7> kSafetensorsNames = {{{"F32", DType::f32},
                                                      {"BF16", DType::bf16},
                                                      {"F16", DType::f16},
                                                      {"F8_E4M3", DType::f8e4m3},
                                                      {"F8_E5M2", DType::f8e5m2},
                                                      {"I32", DType::i32},
                                                      {"I64", DType::i64}}};
}  // namespace

bool dtype_from_safetensors(std::string_view s, DType* out) {
  for (const auto& e : kSafetensorsNames) {
    if (e.name == s) {
      *out = e.dt;
      return true;
    }
  }
  return false;
}

std::string_view dtype_to_safetensors(DType dt) {
  for (const auto& e : kSafetensorsNames)
    if (e.dt == dt) return e.name;
  RAISE("unknown dtype {}", int(dt));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    // Subnormal (or zero): value man * 2^-24, exact in fp32.
    const float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // Below the smallest normal (2^-14): subnormal step 2^-24; scaling by 2^24 is exact and
    // nearbyint rounds half to even in the default rounding mode.
    const float q = std::nearbyint(f32_from_bits(a) * 16777216.0f);
    return uint16_t(sign | uint16_t(q));  // q == 1024 encodes the smallest normal
  }
  // Normal: round the 23-bit mantissa to 10 bits, carry may bump the exponent.
  const uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
  return uint16_t(sign | uint16_t(r - (112u << 10)));
}

namespace {
// Shared RNE encoder for the two FP8 formats: mbits mantissa bits, exponent bias `bias`,
// largest finite code `max_code` (magnitude bits), its value `max_val`, NaN code `nan_code`.
uint8_t f32_to_fp8(float x, int mbits, int bias, uint8_t max_code, float max_val,
                   uint8_t nan_code) {
  const uint32_t u = f32_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | nan_code);
  const float af = f32_from_bits(a);
  if (af >= max_val) return uint8_t(sign | max_code);  // saturate (inf included)
  const int min_normal_exp = 1 - bias;
  if (af < std::ldexp(1.0f, min_normal_exp)) {
    // Subnormal step 2^(min_normal_exp - mbits); scaling by a power of two is exact.
    const float q = std::nearbyint(std::ldexp(af, mbits - min_normal_exp));
    return uint8_t(sign | uint8_t(q));  // q == 2^mbits encodes the smallest normal
  }
  const int shift = 23 - mbits;
  const uint32_t half = (1u << (shift - 1)) - 1u;
  uint32_t r = (a + half + ((a >> shift) & 1u)) >> shift;
  r -= uint32_t(127 - bias) << mbits;
  if (r > max_code) r = max_code;  // e.g. e4m3 values in [464, 480) would round to NaN
  return uint8_t(sign | uint8_t(r));
}

float fp8_value(uint8_t q, int mbits, int bias, bool has_inf) {
  const int ebits = 7 - mbits;
  const int e = (q >> mbits) & ((1 << ebits) - 1);
  const int m = q & ((1 << mbits) - 1);
  const float s = (q & 0x80) ? -1.0f : 1.0f;
  const int emax = (1 << ebits) - 1;
  if (has_inf && e == emax) return m == 0 ? s * INFINITY : NAN;
  if (!has_inf && e == emax && m == (1 << mbits) - 1) return NAN;
  if (e == 0) return s * std::ldexp(float(m), 1 - bias - mbits);
  return s * std::ldexp(1.0f + float(m) / float(1 << mbits), e - bias);
}

template <int MBits, int Bias, bool HasInf>
std::array<float, 256> make_fp8_table() {
  std::array<float, 256> t{};
  for (int i = 0; i < 256; ++i) t[i] = fp8_value(uint8_t(i), MBits, Bias, HasInf);
  return t;
}
}  // namespace

const std::array<float, 256> kE4m3Values = make_fp8_table<3, 7, false>();
const std::array<float, 256> kE5m2Values = make_fp8_table<2, 15, true>();

uint8_t f32_to_e4m3(float x) { return f32_to_fp8(x, 3, 7, 0x7e, kE4m3Max, 0x7f); }
uint8_t f32_to_e5m2(float x) { return f32_to_fp8(x, 2, 15, 0x7b, kE5m2Max, 0x7f); }

float load_as_f32(const void* data, DType dt, size_t i) {
  switch (dt) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::f8e4m3: return e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::f8e5m2: return e5m2_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::i32: return float(static_cast<const int32_t*>(data)[i]);
    case DType::i64: return float(static_cast<const int64_t*>(data)[i]);
  }
  RAISE("unknown dtype {}", int(dt));
}

void convert(const void* src, DType sdt, void* dst, DType ddt, size_t n) {
  if (sdt == ddt) {
    std::memcpy(dst, src, n * dtype_size(sdt));
    return;
  }
  const bool sint = sdt == DType::i32 || sdt == DType::i64;
  const bool dint = ddt == DType::i32 || ddt == DType::i64;
  if (sint || dint) {
    CHECK(sint && dint, "cannot convert {} to {}", dtype_name(sdt), dtype_name(ddt));
    for (size_t i = 0; i < n; ++i) {
      const int64_t v = sdt == DType::i32 ? static_cast<const int32_t*>(src)[i]
                                          : static_cast<const int64_t*>(src)[i];
      if (ddt == DType::i32) static_cast<int32_t*>(dst)[i] = int32_t(v);
      else static_cast<int64_t*>(dst)[i] = v;
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const float v = load_as_f32(src, sdt, i);
    switch (ddt) {
      case DType::f32: static_cast<float*>(dst)[i] = v; break;
      case DType::bf16: static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v); break;
      case DType::f16: static_cast<uint16_t*>(dst)[i] = f32_to_f16(v); break;
      case DType::f8e4m3: static_cast<uint8_t*>(dst)[i] = f32_to_e4m3(v); break;
      case DType::f8e5m2: static_cast<uint8_t*>(dst)[i] = f32_to_e5m2(v); break;
      case DType::i32:
      case DType::i64: break;  // handled above
    }
  }
}

}  // namespace fp8rl
