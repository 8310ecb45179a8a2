// The deterministic uniform values of ops::fill_uniform: a splitmix64 hash of (seed, index),
// shared by the CPU and CUDA backends so that both fill a tensor with the same floats.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FP8RL_HOST_DEVICE __host__ __device__
#else
#define FP8RL_HOST_DEVICE
#endif

namespace fp8rl {

// A float in [-bound, bound): 24 random bits scaled, one rounding (the final multiply).
FP8RL_HOST_DEVICE inline float uniform_hash(uint64_t seed, uint64_t i, float bound) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = float(int32_t(z >> 40) - (1 << 23)) * 0x1p-23f;  // [-1, 1), exact
  return u * bound;
}

}  // namespace fp8rl
