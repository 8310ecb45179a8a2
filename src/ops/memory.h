// Memory on the context's device: owning buffers for long-lived tensors (weights, KV caches)
// and the scratch arena for transient ones (activations, quantized operands), with the same
// calls on both backends so that the one forward allocates without knowing the device.
#pragma once

#include <cstddef>

#include "ops/context.h"

namespace fp8rl {

// Owning storage on one device: 64-byte aligned host memory (CPU) or one cudaMalloc (CUDA,
// 256-byte aligned). Contents are undefined until written. Move-only. A CUDA buffer must be
// released before the CudaDevice whose context made it.
// Made with a dry-run context (Context::dry_run) it is planned only: its size and device, and
// an address of its own that nobody may dereference, but no memory. A run's objects built so
// measure what they would hold (the estimate of `--dry-run` without a device or weights).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const Context& ctx, size_t bytes);
  // Host memory the context's device copies to and from without staging: page-locked
  // (cudaMallocHost) for a CUDA context, plain aligned memory for a CPU one. device() is cpu.
  static DeviceBuffer pinned_host(const Context& ctx, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  Device device() const { return device_; }
  // A contiguous view of `shape` starting `offset` bytes in; must fit the buffer.
  TensorView view(Shape shape, DType dtype, size_t offset = 0) const;

 private:
  void release();
  void* data_ = nullptr;
  size_t size_ = 0;
  Device device_ = Device::cpu;
  bool pinned_ = false;   // host memory from cudaMallocHost
  bool planned_ = false;  // a dry run's: no memory behind data_
  cuda::Backend* backend_ = nullptr;
};

}  // namespace fp8rl

namespace fp8rl::ops {

// A transient tensor on ctx.device from the context's arena (the host Arena on the CPU, the
// backend's device arena on CUDA): 64-byte (CPU) / 256-byte (CUDA) aligned, contents undefined.
TensorView scratch_alloc(Context& ctx, Shape shape, DType dtype);
// The alignment scratch_alloc gives on ctx.device (a measuring arena must use it too).
size_t scratch_alignment(const Context& ctx);
size_t scratch_mark(const Context& ctx);
void scratch_rewind(Context& ctx, size_t mark);
// Grows the arena to at least `bytes` when nothing is allocated (mark 0); no-op otherwise.
void scratch_reserve(Context& ctx, size_t bytes);
size_t scratch_high_water(const Context& ctx);
// Bytes the arena holds now (it only grows, so a step whose high water is lower takes this).
size_t scratch_capacity(const Context& ctx);
// Where the arena's memory starts now: it moves when scratch_reserve grows it, which makes
// recorded CUDA graphs (that captured scratch addresses) stale.
const void* scratch_base(const Context& ctx);

// In a dry run (Context::dry_run), takes `bytes` of scratch as an op would (and gives it back,
// so the measuring arena's high water counts it) and returns true: the op must then compute
// nothing and read no operand memory. Returns false otherwise.
bool dry_run_scratch(Context& ctx, size_t bytes);

// Rewinds the context's arena to where it was when the scope began.
class ScratchScope {
 public:
  explicit ScratchScope(Context& ctx) : ctx_(ctx), mark_(scratch_mark(ctx)) {}
  ~ScratchScope() { scratch_rewind(ctx_, mark_); }
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  Context& ctx_;
  size_t mark_;
};

// dst = src: same dtype and element count, both contiguous, any pair of devices (one of them
// ctx.device or the host). A copy to the host waits for the context's stream, so the data is
// there on return; host-to-device copies may return before the device has the data, and from
// page-locked memory (DeviceBuffer::pinned_host) before the source is read: it must then stay
// unchanged until the stream has passed the copy (e.g. a later copy to the host returned).
void copy(Context& ctx, const TensorView& src, const TensorView& dst);
// copy() to the host without waiting: the copy is queued on the context's stream and dst
// (page-locked on a CUDA context: DeviceBuffer::pinned_host) holds the data once a StreamMark
// recorded after this call has been waited for. On the CPU the copy is done on return.
void copy_to_host_async(Context& ctx, const TensorView& src, const TensorView& dst);
// dst[moves[i, 0]] = src[moves[i, 1]] for each of the M rows of moves ([M, 2] i32), all i32
// on ctx.device, distinct destinations. Indices outside src or dst raise on the CPU and are
// skipped on CUDA (they live on the device). The engine writes the input ids of a step planned
// before the previous step's samples came back (EngineOptions::async_scheduling) with it.
void copy_elements(Context& ctx, const TensorView& src, const TensorView& moves,
                   const TensorView& dst);
// Sets every byte of dst to zero.
void fill_zero(Context& ctx, const TensorView& dst);
// dst (f32 or bf16) = value.
void fill(Context& ctx, const TensorView& dst, float value);
// dst (f32 or bf16) = uniform in [-bound, bound], a deterministic hash of (seed, index): the
// same values on both devices up to the final rounding to dst's dtype.
void fill_uniform(Context& ctx, const TensorView& dst, uint64_t seed, float bound);
// Waits until every op issued on the context has finished (no-op on the CPU).
void synchronize(Context& ctx);
// A point in the context's stream of work: record() marks where the queued work ends now;
// wait() returns once the device has passed that point (at once on the CPU, whose ops finish
// before they return); seconds_since(earlier) is the device time between two passed marks
// (CUDA events; 0 on the CPU). Reusable: record() again moves the mark. Move-only.
class StreamMark {
 public:
  StreamMark() = default;
  explicit StreamMark(Context& ctx);
  ~StreamMark();
  StreamMark(StreamMark&& o) noexcept;
  StreamMark& operator=(StreamMark&& o) noexcept;
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;

  void record();
  void wait() const;
  double seconds_since(const StreamMark& earlier) const;

 private:
  Context* ctx_ = nullptr;
  void* event_ = nullptr;  // cudaEvent_t on a CUDA context
};
// Whether the context has its device at hand: the CPU, or CUDA with a backend. A dry-run
// context may have none (an estimate made without a GPU); what the device would tell (free
// memory, its region, its capabilities) is then unknown.
bool device_present(const Context& ctx);
// Device memory free now (CUDA: cudaMemGetInfo; the CPU: 0, it has no device budget). Needs
// the device (device_present).
size_t device_free_bytes(const Context& ctx);
// Bytes this process has allocated on ctx's device now and at the peak so far (buffers and
// arena, as the CUDA backend counts its cudaMallocs); 0 on the CPU.
size_t device_allocated_bytes(const Context& ctx);
size_t device_peak_allocated_bytes(const Context& ctx);
// The peak starts again from what is allocated now (a phase's own peak); no-op on the CPU.
void reset_device_peak_allocated(Context& ctx);

// The device region that all of a CUDA context's memory is carved from
// (CudaDeviceOptions::device_region). `on` is false on the CPU and for a CUDA device that runs
// without one (then each buffer is a cudaMalloc of its own).
struct DeviceRegionInfo {
  bool on = false;
  size_t reserved = 0;   // addresses reserved at start: the device's memory
  size_t committed = 0;  // memory mapped under the region now
  size_t used = 0;       // bytes in live blocks (sizes rounded to 256)
  size_t blocks = 0;     // live blocks: buffers, the scratch arena, the cuBLASLt workspace
};
DeviceRegionInfo device_region_info(const Context& ctx);
// Device memory held apart from buffers and scratch: the cuBLASLt workspace; 0 on the CPU.
size_t gemm_workspace_bytes(const Context& ctx);
// Whether device memory at `p` lies in ctx's device region.
bool in_device_region(const Context& ctx, const void* p);

}  // namespace fp8rl::ops
