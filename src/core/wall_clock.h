// The host's steady clock, for the trainers', the engine's and the benchmarks' timings.
#pragma once

#include <chrono>

namespace fp8rl {

using Clock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace fp8rl
