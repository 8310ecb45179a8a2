// Parallel loops over the CPU cores (OpenMP underneath; OpenBLAS shares the same runtime).
#pragma once

#include <cstdint>

namespace fp8rl {

int num_threads();
void set_num_threads(int n);  // n <= 0: all cores

// Calls fn(i) for i in [begin, end), split statically over the threads. fn must not throw
// across threads: exceptions are caught and the first one rethrown on the calling thread.
template <typename Fn>
void parallel_for(int64_t begin, int64_t end, Fn&& fn);

}  // namespace fp8rl

#include "core/parallel_impl.h"

namespace fp8rl {
// Index of the calling thread inside parallel_for, in [0, num_threads()).
int thread_index();
}  // namespace fp8rl
