// The blocked parallel loop of the train layer's element-wise passes: fixed-size blocks, so
// per-block partial results (norms, flags) do not depend on the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/parallel.h"

namespace fp8rl {

inline constexpr int64_t kBlockElements = 16384;

inline int64_t num_blocks(int64_t n) {
  return (n + kBlockElements - 1) / kBlockElements;
}

// fn(begin, end) for each block [begin, end) of [0, n), blocks spread over the cores.
template <typename Fn>
void for_each_block(int64_t n, Fn&& fn) {
  parallel_for(0, num_blocks(n), [&](int64_t b) {
    const int64_t begin = b * kBlockElements;
    fn(begin, std::min(n, begin + kBlockElements));
  });
}

}  // namespace fp8rl
