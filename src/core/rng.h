// Counter-based random numbers: value i of stream (seed) is a pure function of (seed, i), so
// a tensor is filled in parallel and identically on every machine and thread count.
#pragma once

#include <cmath>
#include <cstdint>

namespace fp8rl {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1): 24 random bits, never 0.
inline float uniform01(uint64_t seed, uint64_t i) {
  const uint64_t r = splitmix64(splitmix64(seed) ^ i);
  return (float(r >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller over two uniforms of the stream.
inline float normal01(uint64_t seed, uint64_t i) {
  const float u1 = uniform01(seed, 2 * i), u2 = uniform01(seed, 2 * i + 1);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
}

}  // namespace fp8rl
