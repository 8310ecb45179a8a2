// All of a CudaDevice's memory as one region: one range of virtual addresses reserved at start
// (the size of the device's memory), from which every buffer, the scratch arena and the
// cuBLASLt workspace are carved (core/region_allocator.h), with physical memory mapped under it
// only up to the highest live block (CUDA virtual memory management: cuMemCreate / cuMemMap).
// So the process holds what it uses, like cudaMalloc, but at addresses in one range that never
// move (CUDA graphs keep them), and one place that knows where every byte is.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

#include "core/region_allocator.h"

namespace fp8rl::cuda {

class DeviceRegion {
 public:
  // Whether the device and driver support virtual memory management (else the backend falls
  // back to one cudaMalloc per buffer).
  static bool supported(int ordinal);
  // Reserves addresses for `bytes` (rounded up to the mapping granularity) on device `ordinal`.
  DeviceRegion(int ordinal, size_t bytes);
  ~DeviceRegion();
  DeviceRegion(const DeviceRegion&) = delete;
  DeviceRegion& operator=(const DeviceRegion&) = delete;

  // A block of `bytes`, 256-byte aligned, mapped; raises when the device is out of memory.
  void* allocate(size_t bytes);
  // Never throws (buffers are freed in destructors): on a driver error the memory stays mapped.
  void free(void* p) noexcept;
  bool contains(const void* p) const;
  const void* base() const { return reinterpret_cast<const void*>(base_); }
  size_t reserved() const { return allocator_.capacity(); }
  size_t committed() const { return mapped_; }
  size_t top() const { return allocator_.top(); }
  size_t used() const { return allocator_.used(); }
  size_t blocks() const { return allocator_.blocks(); }

 private:
  void map_to(size_t bytes);       // grows the mapping to cover [0, bytes)
  void unmap_above(size_t bytes);  // releases whole chunks that start at or above `bytes`
  struct Chunk {
    size_t offset, size;
    CUmemGenericAllocationHandle handle;
  };
  int ordinal_;
  size_t granularity_ = 0;
  CUdeviceptr base_ = 0;
  RegionAllocator allocator_;
  size_t mapped_ = 0;
  std::vector<Chunk> chunks_;  // in address order, covering [0, mapped_)
};

}  // namespace fp8rl::cuda
