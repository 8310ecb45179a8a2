// The ragged token layout shared by the RL losses: completion i owns tokens
// [offsets[i], offsets[i + 1]) of every per-token array.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace fp8rl {

// Checks offsets [B + 1] (offsets[0] = 0, non-decreasing) against mask [N] (N = offsets[B],
// values 0 or 1) and returns N. `what` names the caller in the error.
int64_t check_ragged(std::span<const int64_t> offsets, std::span<const uint8_t> mask,
                     std::string_view what);

}  // namespace fp8rl
