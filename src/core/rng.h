// Counter-based random numbers: value i of stream (seed) is a pure function of (seed, i), so
// a tensor is filled in parallel and identically on every machine and thread count. The
// integer functions and uniform01 are also device functions under nvcc, so that a CUDA kernel
// draws exactly the uniforms of the CPU (the sampler, ops/sampling.h).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FP8RL_RNG_HD __host__ __device__
#else
#define FP8RL_RNG_HD
#endif

namespace fp8rl {

FP8RL_RNG_HD inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The key of sub-stream `counter` of stream `stream` (e.g. one sampled position of one
// sequence): a seed for uniform01 that differs for every (stream, counter) pair with
// overwhelming probability and depends on nothing else.
FP8RL_RNG_HD inline uint64_t rng_key(uint64_t stream, uint64_t counter) {
  return splitmix64(stream ^ splitmix64(counter ^ 0x5851f42d4c957f2dull));
}

// uniform01 of a seed already mixed as splitmix64(seed): for loops over i, which then hash once
// per value instead of twice.
FP8RL_RNG_HD inline float uniform01_mixed(uint64_t mixed_seed, uint64_t i) {
  const uint64_t r = splitmix64(mixed_seed ^ i);
  return (float(r >> 40) + 0.5f) * (1.0f / 16777216.0f);
}

// Uniform in (0, 1): 24 random bits, never 0.
FP8RL_RNG_HD inline float uniform01(uint64_t seed, uint64_t i) {
  return uniform01_mixed(splitmix64(seed), i);
}

// Standard normal by Box-Muller over two uniforms of the stream.
inline float normal01(uint64_t seed, uint64_t i) {
  const float u1 = uniform01(seed, 2 * i), u2 = uniform01(seed, 2 * i + 1);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795864f * u2);
}

}  // namespace fp8rl
