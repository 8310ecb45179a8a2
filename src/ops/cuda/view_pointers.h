// A tensor view's data as the typed device pointer a launcher takes (ops/cuda/kernels.h), and
// the padding arithmetic of the launchers' buffers.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/cuda/kernels.h"

namespace fp8rl::cuda {

inline bf16* bf(const TensorView& t) {
  return static_cast<bf16*>(t.data);
}
inline float* f32(const TensorView& t) {
  return static_cast<float*>(t.data);
}
inline const int32_t* i32(const TensorView& t) {
  return static_cast<const int32_t*>(t.data);
}
// a rounded up to a multiple of b.
inline int64_t round_up(int64_t a, int64_t b) {
  return (a + b - 1) / b * b;
}

}  // namespace fp8rl::cuda
