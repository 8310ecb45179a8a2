#include "core/arena.h"

#include <algorithm>

namespace fp8rl {

Arena::Arena(size_t capacity_bytes) {
  reserve(capacity_bytes);
}
Arena::Arena(Device device, size_t alignment)
    : owned_(false), device_(device), alignment_(alignment) {}
Arena::~Arena() {
  if (owned_) aligned_free(base_);
}

Arena Arena::measuring(Device device, size_t alignment) {
  Arena a(device, alignment);
  // A non-null, aligned base that is never dereferenced; half the address space of room.
  a.base_ = reinterpret_cast<char*>(alignment);
  a.capacity_ = size_t(1) << 62;
  return a;
}

Arena::Arena(Arena&& o) noexcept
    : base_(o.base_),
      owned_(o.owned_),
      device_(o.device_),
      alignment_(o.alignment_),
      capacity_(o.capacity_),
      used_(o.used_),
      high_water_(o.high_water_),
      reserved_(o.reserved_) {
  o.base_ = nullptr;
  o.owned_ = false;
  o.capacity_ = o.used_ = o.high_water_ = o.reserved_ = 0;
}

void Arena::reserve(size_t capacity_bytes) {
  reserved_ = std::max(reserved_, capacity_bytes);
  if (capacity_bytes <= capacity_) return;
  CHECK(owned_, "reserve() on an arena over external memory: attach() a larger block");
  CHECK(used_ == 0, "arena grown while {} bytes are in use", used_);
  aligned_free(base_);
  base_ = static_cast<char*>(aligned_alloc_bytes(capacity_bytes));
  capacity_ = capacity_bytes;
}

void Arena::attach(void* base, size_t capacity_bytes) {
  CHECK(!owned_, "attach() on an arena that owns its memory");
  CHECK(used_ == 0, "arena replaced while {} bytes are in use", used_);
  base_ = static_cast<char*>(base);
  capacity_ = capacity_bytes;
}

TensorView Arena::alloc(Shape shape, DType dtype) {
  const size_t bytes =
      (size_t(shape.numel()) * dtype_size(dtype) + alignment_ - 1) / alignment_ * alignment_;
  CHECK(used_ + bytes <= capacity_,
        "{} arena exhausted: need {} more bytes, {} of {} in use (size it before the forward)",
        device_name(device_), bytes, used_, capacity_);
  TensorView v(base_ + used_, dtype, shape, device_);
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  return v;
}

void Arena::rewind(size_t mark) {
  CHECK(mark <= used_, "arena rewind to {} past the top {}", mark, used_);
  used_ = mark;
}

}  // namespace fp8rl
