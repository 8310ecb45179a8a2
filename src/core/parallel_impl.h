#pragma once

#include <exception>
#include <mutex>

namespace fp8rl {

template <typename Fn>
void parallel_for(int64_t begin, int64_t end, Fn&& fn) {
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel for schedule(static)
  for (int64_t i = begin; i < end; ++i) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fp8rl
