#include "ops/standby_region.h"

namespace fp8rl {

void StandbyRegion::reserve(size_t bytes) {
  if (buffer_.size() >= bytes) return;
  holder_ = nullptr;
  buffer_ = DeviceBuffer();  // free first: the old and new region never coexist
  buffer_ = DeviceBuffer(ctx_, bytes);
  ++allocations_;
}

void* StandbyRegion::acquire(const void* holder, size_t bytes) {
  reserve(bytes);
  holder_ = holder;
  return buffer_.data();
}

}  // namespace fp8rl
