#include "core/arena.h"

#include <algorithm>

namespace fp8rl {

Arena::Arena(size_t capacity_bytes) { reserve(capacity_bytes); }
Arena::~Arena() { aligned_free(base_); }

void Arena::reserve(size_t capacity_bytes) {
  if (capacity_bytes <= capacity_) return;
  CHECK(used_ == 0, "arena grown while {} bytes are in use", used_);
  aligned_free(base_);
  base_ = static_cast<char*>(aligned_alloc_bytes(capacity_bytes));
  capacity_ = capacity_bytes;
}

TensorView Arena::alloc(Shape shape, DType dtype) {
  const size_t bytes = (size_t(shape.numel()) * dtype_size(dtype) + 63) / 64 * 64;
  CHECK(used_ + bytes <= capacity_, "arena exhausted: need {} more bytes, {} of {} in use", bytes,
        used_, capacity_);
  TensorView v(base_ + used_, dtype, shape);
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  return v;
}

void Arena::rewind(size_t mark) {
  CHECK(mark <= used_, "arena rewind to {} past the top {}", mark, used_);
  used_ = mark;
}

}  // namespace fp8rl
