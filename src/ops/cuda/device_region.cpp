#include "ops/cuda/device_region.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "core/check.h"

namespace fp8rl::cuda {

namespace {

// The driver calls, resolved through the runtime so that nothing links against libcuda.
struct Driver {
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuGetErrorName_v6000 error_name = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  bool complete() const {
    return granularity && reserve && address_free && create && release && map && unmap &&
           set_access && error_name && device_get && attribute;
  }
};

template <typename F>
void resolve(const char* symbol, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found) ==
          cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    fn = reinterpret_cast<F>(p);
  else
    cudaGetLastError();
}

// The driver's function table: immutable once resolved, the same for every device.
const Driver& driver() {
  static const Driver d = [] {
    Driver r;
    resolve("cuMemGetAllocationGranularity", r.granularity);
    resolve("cuMemAddressReserve", r.reserve);
    resolve("cuMemAddressFree", r.address_free);
    resolve("cuMemCreate", r.create);
    resolve("cuMemRelease", r.release);
    resolve("cuMemMap", r.map);
    resolve("cuMemUnmap", r.unmap);
    resolve("cuMemSetAccess", r.set_access);
    resolve("cuGetErrorName", r.error_name);
    resolve("cuDeviceGet", r.device_get);
    resolve("cuDeviceGetAttribute", r.attribute);
    return r;
  }();
  return d;
}

const char* error_name(CUresult r) {
  const char* s = nullptr;
  if (driver().error_name == nullptr || driver().error_name(r, &s) != CUDA_SUCCESS || !s)
    return "unknown driver error";
  return s;
}

#define CU_CHECK(expr)                                                                          \
  do {                                                                                          \
    const CUresult fp8rl_r_ = (expr);                                                           \
    CHECK(fp8rl_r_ == CUDA_SUCCESS, "CUDA driver error {} in {}", error_name(fp8rl_r_), #expr); \
  } while (0)

CUmemAllocationProp pinned_on(int ordinal) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = ordinal;
  return p;
}

size_t mapping_granularity(int ordinal) {
  const CUmemAllocationProp prop = pinned_on(ordinal);
  size_t g = 0;
  CU_CHECK(driver().granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  return g;
}

size_t round_up(size_t v, size_t m) {
  return (v + m - 1) / m * m;
}

// Freed memory above the top goes back to the driver only in steps this large: unmapping waits
// for the device (as cudaFree does), which a step's small frees should not.
constexpr size_t kUnmapSlack = size_t(64) << 20;

}  // namespace

bool DeviceRegion::supported(int ordinal) {
  if (!driver().complete()) return false;
  CUdevice dev{};
  int vmm = 0;
  return driver().device_get(&dev, ordinal) == CUDA_SUCCESS &&
         driver().attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) ==
             CUDA_SUCCESS &&
         vmm != 0;
}

DeviceRegion::DeviceRegion(int ordinal, size_t bytes)
    : ordinal_(ordinal),
      granularity_(mapping_granularity(ordinal)),
      allocator_(round_up(bytes, granularity_), 256) {
  CHECK(cudaSetDevice(ordinal) == cudaSuccess, "cannot select CUDA device {}", ordinal);
  CU_CHECK(driver().reserve(&base_, allocator_.capacity(), granularity_, 0, 0));
}

DeviceRegion::~DeviceRegion() {
  // Destructors must not throw: errors here are ignored (the process is tearing down).
  cudaDeviceSynchronize();
  for (const Chunk& c : chunks_) {
    driver().unmap(base_ + c.offset, c.size);
    driver().release(c.handle);
  }
  if (base_) driver().address_free(base_, allocator_.capacity());
}

void* DeviceRegion::allocate(size_t bytes) {
  const std::optional<size_t> offset = allocator_.allocate(bytes);
  if (!offset) {
    RAISE(
        "out of device memory: {:.1f} MiB do not fit the device region ({:.1f} MiB in use, "
        "{:.1f} MiB of it in holes too small, {:.1f} MiB reserved)",
        double(bytes) / (1 << 20), double(allocator_.used()) / (1 << 20),
        double(allocator_.free_below_top()) / (1 << 20), double(allocator_.capacity()) / (1 << 20));
  }
  try {
    map_to(allocator_.top());
  } catch (...) {
    allocator_.free(*offset);
    throw;
  }
  return reinterpret_cast<void*>(base_ + *offset);
}

void DeviceRegion::free(void* p) noexcept {
  // Buffers are freed from destructors, like cudaFree: a failure leaves memory mapped (or a
  // block taken), it never throws.
  try {
    if (!contains(p)) return;
    allocator_.free(size_t(reinterpret_cast<CUdeviceptr>(p) - base_));
    const size_t keep = round_up(allocator_.top(), granularity_);
    if (mapped_ >= keep + kUnmapSlack) unmap_above(keep);
  } catch (...) {
  }
}

bool DeviceRegion::contains(const void* p) const {
  const CUdeviceptr v = reinterpret_cast<CUdeviceptr>(p);
  return v >= base_ && v < base_ + allocator_.capacity();
}

void DeviceRegion::map_to(size_t bytes) {
  if (bytes <= mapped_) return;
  // The driver calls act on the calling thread's current context: make it this device's.
  CHECK(cudaSetDevice(ordinal_) == cudaSuccess, "cannot select CUDA device {}", ordinal_);
  const size_t size = round_up(bytes, granularity_) - mapped_;
  const CUmemAllocationProp prop = pinned_on(ordinal_);
  CUmemGenericAllocationHandle h{};
  const CUresult r = driver().create(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS) {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    RAISE(
        "out of device memory: mapping {:.1f} MiB more of the device region ({:.1f} MiB mapped) "
        "failed ({}), {:.1f} of {:.1f} MiB free",
        double(size) / (1 << 20), double(mapped_) / (1 << 20), error_name(r),
        double(free_b) / (1 << 20), double(total_b) / (1 << 20));
  }
  const CUresult m = driver().map(base_ + mapped_, size, 0, h, 0);
  if (m != CUDA_SUCCESS) {
    driver().release(h);
    RAISE("CUDA driver error {} mapping {:.1f} MiB of the device region", error_name(m),
          double(size) / (1 << 20));
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const CUresult a = driver().set_access(base_ + mapped_, size, &access, 1);
  if (a != CUDA_SUCCESS) {
    driver().unmap(base_ + mapped_, size);
    driver().release(h);
    RAISE("CUDA driver error {} granting access to the device region", error_name(a));
  }
  chunks_.push_back({mapped_, size, h});
  mapped_ += size;
}

void DeviceRegion::unmap_above(size_t bytes) {
  bool synced = false;
  while (!chunks_.empty() && chunks_.back().offset >= bytes) {
    if (!synced) {
      // Queued work may still read the memory (cudaFree waits the same way).
      CHECK(cudaSetDevice(ordinal_) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess,
            "device {} failed before unmapping memory", ordinal_);
      synced = true;
    }
    const Chunk c = chunks_.back();
    chunks_.pop_back();
    CU_CHECK(driver().unmap(base_ + c.offset, c.size));
    CU_CHECK(driver().release(c.handle));
    mapped_ = c.offset;
  }
}

}  // namespace fp8rl::cuda
