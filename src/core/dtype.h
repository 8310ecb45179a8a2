// Element types and exact conversions between them and fp32.
//
// Every narrowing conversion rounds to nearest, ties to even. FP8 conversions saturate: a
// finite value or an infinity beyond the largest finite FP8 value becomes that value (the
// CUDA __NV_SATFINITE behaviour), NaN stays NaN. e4m3 is the "fn" variant: max 448, no inf.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fp8rl {

enum class DType : uint8_t { f32, bf16, f16, f8e4m3, f8e5m2, i32, i64 };

size_t dtype_size(DType dt);
std::string_view dtype_name(DType dt);  // "f32", "bf16", ...
// safetensors dtype strings ("F32", "BF16", "F8_E4M3", ...). Returns false for strings that
// are valid safetensors but not supported here, or invalid.
bool dtype_from_safetensors(std::string_view s, DType* out);
std::string_view dtype_to_safetensors(DType dt);

inline uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// bf16 is the upper half of an fp32.
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
// x rounded to the nearest bf16 value (ties to even), kept as an fp32: what storing x in bf16
// and reading it back gives (CUDA's __float2bfloat16_rn). The CPU's emulation of bf16
// activations (Context::bf16_activations) rounds through this one function.
inline float round_to_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float x);

uint8_t f32_to_e4m3(float x);
uint8_t f32_to_e5m2(float x);

// Decoding FP8 is a table lookup: every code's value is exact in fp32.
extern const std::array<float, 256> kE4m3Values;
extern const std::array<float, 256> kE5m2Values;
inline float e4m3_to_f32(uint8_t q) { return kE4m3Values[q]; }
inline float e5m2_to_f32(uint8_t q) { return kE5m2Values[q]; }

inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE5m2Max = 57344.0f;

// Element i of a buffer of dtype dt, as fp32 (integers converted by value).
float load_as_f32(const void* data, DType dt, size_t i);
// Converts n elements of src (dtype sdt) to dst (dtype ddt) with the rules above.
void convert(const void* src, DType sdt, void* dst, DType ddt, size_t n);

}  // namespace fp8rl
