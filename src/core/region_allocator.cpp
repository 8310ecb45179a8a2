#include "core/region_allocator.h"

#include <algorithm>
#include <iterator>

#include "core/check.h"

namespace fp8rl {

RegionAllocator::RegionAllocator(size_t capacity, size_t alignment)
    : capacity_(capacity), alignment_(alignment) {
  CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
        "region alignment {} is not a power of two", alignment);
  capacity_ -= capacity_ % alignment_;
}

std::optional<size_t> RegionAllocator::allocate(size_t bytes) {
  if (bytes > capacity_) return std::nullopt;
  const size_t size = std::max(alignment_, (bytes + alignment_ - 1) / alignment_ * alignment_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const size_t offset = it->first, rest = it->second - size;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + size, rest);
    live_.emplace(offset, size);
    used_ += size;
    return offset;
  }
  if (size > capacity_ - top_) return std::nullopt;
  const size_t offset = top_;
  top_ += size;
  live_.emplace(offset, size);
  used_ += size;
  return offset;
}

void RegionAllocator::free(size_t offset) {
  const auto it = live_.find(offset);
  CHECK(it != live_.end(), "region: no live block at offset {}", offset);
  size_t start = offset, size = it->second;
  used_ -= size;
  live_.erase(it);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  if (start + size == top_)
    top_ = start;  // the free range above the highest live block is no hole: top comes down
  else
    free_.emplace(start, size);
}

}  // namespace fp8rl
