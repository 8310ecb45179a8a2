// Offsets in one contiguous range, handed out and taken back: the bookkeeping of the device
// memory region (ops/cuda/device_region.h), kept free of CUDA so that it is tested on the host.
// First fit by address, so live blocks pack towards the start and the end of the highest one
// (top) stays low: the region commits memory only up to its top. Freed neighbours merge, and a
// free range that reaches the top lowers it.
#pragma once

#include <cstddef>
#include <map>
#include <optional>

namespace fp8rl {

class RegionAllocator {
 public:
  // A range of `capacity` bytes; offsets and sizes are multiples of `alignment` (a power of 2).
  RegionAllocator(size_t capacity, size_t alignment);

  // The offset of `bytes` (rounded up to the alignment; at least one unit), or nullopt when
  // no free range and not the space above the top holds them.
  std::optional<size_t> allocate(size_t bytes);
  // Takes back the block at `offset`, which allocate() returned and nobody freed yet.
  void free(size_t offset);

  size_t capacity() const { return capacity_; }
  size_t alignment() const { return alignment_; }
  size_t top() const { return top_; }    // end of the highest live block
  size_t used() const { return used_; }  // bytes in live blocks (rounded sizes)
  size_t blocks() const { return live_.size(); }
  size_t free_below_top() const { return top_ - used_; }  // holes a later block may fill

 private:
  size_t capacity_, alignment_;
  size_t top_ = 0, used_ = 0;
  std::map<size_t, size_t> live_;  // offset -> size
  std::map<size_t, size_t> free_;  // offset -> size, all below top_, never adjacent
};

}  // namespace fp8rl
