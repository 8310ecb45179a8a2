#include "ops/memory.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "core/parallel.h"
#include "ops/device.h"
#include "ops/uniform_hash.h"
#if FP8RL_HAVE_CUDA
#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/device_region.h"
#endif

namespace fp8rl {

namespace {
// A planned buffer's address: distinct for every buffer (code compares weight addresses, e.g. a
// tied lm_head), never dereferenced, far from where real allocations lie.
void* planned_address(size_t bytes) {
  static std::atomic<uintptr_t> next{uintptr_t(1) << 46};
  return reinterpret_cast<void*>(next.fetch_add((bytes + 511) / 256 * 256));
}
}  // namespace

void PlannedDevice::add(size_t bytes) {
  held += bytes;
  peak = std::max(peak, held);
}

void PlannedDevice::remove(size_t bytes) {
  held -= std::min(held, bytes);
}

DeviceBuffer::DeviceBuffer(const Context& ctx, size_t bytes) : size_(bytes), device_(ctx.device) {
  if (ctx.dry_run) {
    data_ = planned_address(bytes);
    planned_ = true;
    ledger_ = ctx.planned;
    if (ledger_ != nullptr) ledger_->add(bytes);
    return;
  }
  if (device_ == Device::cpu) {
    data_ = aligned_alloc_bytes(bytes);
    return;
  }
#if FP8RL_HAVE_CUDA
  CHECK(ctx.cuda != nullptr, "CUDA context without a backend");
  backend_ = ctx.cuda;
  data_ = cuda::device_malloc(*backend_, bytes);
#else
  raise_no_cuda();
#endif
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

DeviceBuffer DeviceBuffer::pinned_host(const Context& ctx, size_t bytes) {
  if (ctx.device == Device::cpu) return DeviceBuffer(ctx, bytes);
  if (ctx.dry_run) {
    DeviceBuffer b;
    b.size_ = bytes;
    b.data_ = planned_address(bytes);
    b.planned_ = true;
    return b;
  }
  DeviceBuffer b;
  b.size_ = bytes;
#if FP8RL_HAVE_CUDA
  b.data_ = cuda::host_malloc_pinned(bytes);
  b.pinned_ = true;
#else
  raise_no_cuda();
#endif
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(o.data_),
      size_(o.size_),
      device_(o.device_),
      pinned_(o.pinned_),
      planned_(o.planned_),
      ledger_(o.ledger_),
      backend_(o.backend_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    size_ = o.size_;
    device_ = o.device_;
    pinned_ = o.pinned_;
    planned_ = o.planned_;
    ledger_ = o.ledger_;
    backend_ = o.backend_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void DeviceBuffer::release() {
  if (data_ == nullptr) return;
  if (planned_) {
    if (ledger_ != nullptr) ledger_->remove(size_);  // nothing else behind it
  } else if (pinned_) {
#if FP8RL_HAVE_CUDA
    cuda::host_free_pinned(data_);
#endif
  } else if (device_ == Device::cpu) {
    aligned_free(data_);
  } else {
#if FP8RL_HAVE_CUDA
    cuda::device_free(*backend_, data_, size_);
#endif
  }
  data_ = nullptr;
  size_ = 0;
}

TensorView DeviceBuffer::view(Shape shape, DType dtype, size_t offset) const {
  CHECK(offset + size_t(shape.numel()) * dtype_size(dtype) <= size_,
        "DeviceBuffer view {} {} at {} exceeds its {} bytes", dtype_name(dtype), shape.str(),
        offset, size_);
  return TensorView(static_cast<char*>(data_) + offset, dtype, shape, device_);
}

}  // namespace fp8rl

namespace fp8rl::ops {

namespace {
Arena& host_arena(Context& ctx) {
  CHECK(ctx.scratch != nullptr, "Context has no scratch arena");
  return *ctx.scratch;
}
#if FP8RL_HAVE_CUDA
cuda::Backend& backend(const Context& ctx) {
  CHECK(ctx.cuda != nullptr, "CUDA context without a backend");
  return *ctx.cuda;
}
#endif
}  // namespace

// A dry run's scratch comes from its measuring host-side Arena whatever the device.
#if FP8RL_HAVE_CUDA
#define FP8RL_ON_CUDA(ctx, expr) \
  if ((ctx).device == Device::cuda && !(ctx).dry_run) return expr
#else
#define FP8RL_ON_CUDA(ctx, expr) \
  if ((ctx).device == Device::cuda && !(ctx).dry_run) raise_no_cuda()
#endif

TensorView scratch_alloc(Context& ctx, Shape shape, DType dtype) {
  FP8RL_ON_CUDA(ctx, cuda::arena_alloc(backend(ctx), shape, dtype));
  return host_arena(ctx).alloc(shape, dtype);
}

size_t scratch_alignment(const Context& ctx) {
  return ctx.device == Device::cuda ? 256 : 64;
}

size_t scratch_mark(const Context& ctx) {
  FP8RL_ON_CUDA(ctx, cuda::arena_mark(backend(ctx)));
  CHECK(ctx.scratch != nullptr, "Context has no scratch arena");
  return ctx.scratch->mark();
}

const void* scratch_base(const Context& ctx) {
  FP8RL_ON_CUDA(ctx, cuda::arena_base(backend(ctx)));
  CHECK(ctx.scratch != nullptr, "Context has no scratch arena");
  return ctx.scratch->base();
}

void scratch_rewind(Context& ctx, size_t mark) {
  FP8RL_ON_CUDA(ctx, cuda::arena_rewind(backend(ctx), mark));
  host_arena(ctx).rewind(mark);
}

void scratch_reserve(Context& ctx, size_t bytes) {
  FP8RL_ON_CUDA(ctx, cuda::arena_reserve(backend(ctx), bytes));
  Arena& a = host_arena(ctx);
  if (a.mark() == 0) a.reserve(bytes);
  // A plan's device holds the arena as the device's would: grown, never shrunk.
  if (ctx.planned != nullptr && bytes > ctx.planned->scratch) {
    ctx.planned->add(bytes - ctx.planned->scratch);
    ctx.planned->scratch = bytes;
  }
}

size_t scratch_high_water(const Context& ctx) {
  FP8RL_ON_CUDA(ctx, cuda::arena_high_water(backend(ctx)));
  CHECK(ctx.scratch != nullptr, "Context has no scratch arena");
  return ctx.scratch->high_water();
}

size_t scratch_capacity(const Context& ctx) {
  FP8RL_ON_CUDA(ctx, backend(ctx).arena().capacity());
  CHECK(ctx.scratch != nullptr, "Context has no scratch arena");
  // A dry run's arena is a measuring one, unbounded: what a real arena would hold.
  if (ctx.dry_run) return ctx.scratch->reserved();
  return ctx.scratch->capacity();
}

void copy(Context& ctx, const TensorView& src, const TensorView& dst) {
  CHECK(src.dtype == dst.dtype && src.numel() == dst.numel() && src.is_contiguous() &&
            dst.is_contiguous(),
        "copy: {} {} -> {} {}: needs the same dtype and size, contiguous", dtype_name(src.dtype),
        src.shape.str(), dtype_name(dst.dtype), dst.shape.str());
  CHECK((src.device == Device::cpu || src.device == ctx.device) &&
            (dst.device == Device::cpu || dst.device == ctx.device),
        "copy between {} and {} with a {} context", device_name(src.device),
        device_name(dst.device), device_name(ctx.device));
  if (ctx.dry_run) return;
  if (src.device == Device::cpu && dst.device == Device::cpu) {
    if (src.nbytes() > 0) std::memmove(dst.data, src.data, src.nbytes());
    return;
  }
#if FP8RL_HAVE_CUDA
  cuda::copy(backend(ctx), src, dst);
#else
  raise_no_cuda();
#endif
}

void copy_to_host_async(Context& ctx, const TensorView& src, const TensorView& dst) {
  CHECK(dst.device == Device::cpu && src.device == ctx.device,
        "copy_to_host_async: from {} to the host with a {} context", device_name(src.device),
        device_name(ctx.device));
  if (ctx.device == Device::cpu || ctx.dry_run) {
    copy(ctx, src, dst);
    return;
  }
  CHECK(src.dtype == dst.dtype && src.numel() == dst.numel() && src.is_contiguous() &&
            dst.is_contiguous(),
        "copy_to_host_async: {} {} -> {} {}: needs the same dtype and size, contiguous",
        dtype_name(src.dtype), src.shape.str(), dtype_name(dst.dtype), dst.shape.str());
#if FP8RL_HAVE_CUDA
  cuda::copy_to_host_async(backend(ctx), src, dst);
#else
  raise_no_cuda();
#endif
}

void copy_elements(Context& ctx, const TensorView& src, const TensorView& moves,
                   const TensorView& dst) {
  CHECK(src.dtype == DType::i32 && dst.dtype == DType::i32 && moves.dtype == DType::i32 &&
            moves.rank() == 2 && moves.dim(1) == 2 && src.is_contiguous() && dst.is_contiguous() &&
            moves.is_contiguous(),
        "copy_elements: i32 src and dst and i32 moves [M, 2], got {} {}, {} {}, {} {}",
        dtype_name(src.dtype), src.shape.str(), dtype_name(moves.dtype), moves.shape.str(),
        dtype_name(dst.dtype), dst.shape.str());
  CHECK(src.device == ctx.device && dst.device == ctx.device && moves.device == ctx.device,
        "copy_elements: operands must be on the context's device ({})", device_name(ctx.device));
  if (ctx.dry_run || moves.dim(0) == 0) return;
  FP8RL_ON_CUDA(ctx, cuda::copy_elements(backend(ctx), src, moves, dst));
  const int32_t* m = moves.ptr<int32_t>();
  for (int64_t i = 0; i < moves.dim(0); ++i) {
    const int32_t to = m[2 * i], from = m[2 * i + 1];
    CHECK(to >= 0 && to < dst.numel() && from >= 0 && from < src.numel(),
          "copy_elements: move {} ({} <- {}) outside dst [{}] or src [{}]", i, to, from,
          dst.numel(), src.numel());
    dst.ptr<int32_t>()[to] = src.ptr<int32_t>()[from];
  }
}

StreamMark::StreamMark(Context& ctx) : ctx_(&ctx) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda && !ctx.dry_run) event_ = cuda::event_create();
#endif
}

StreamMark::~StreamMark() {
#if FP8RL_HAVE_CUDA
  if (event_ != nullptr) cuda::event_destroy(event_);
#endif
}

StreamMark::StreamMark(StreamMark&& o) noexcept : ctx_(o.ctx_), event_(o.event_) {
  o.event_ = nullptr;
}

StreamMark& StreamMark::operator=(StreamMark&& o) noexcept {
  std::swap(ctx_, o.ctx_);
  std::swap(event_, o.event_);
  return *this;
}

void StreamMark::record() {
#if FP8RL_HAVE_CUDA
  if (event_ != nullptr) cuda::event_record(backend(*ctx_), event_);
#endif
}

void StreamMark::wait() const {
#if FP8RL_HAVE_CUDA
  if (event_ != nullptr) cuda::event_wait(event_);
#endif
}

double StreamMark::seconds_since(const StreamMark& earlier) const {
#if FP8RL_HAVE_CUDA
  if (event_ != nullptr && earlier.event_ != nullptr)
    return cuda::event_seconds(earlier.event_, event_);
#endif
  (void)earlier;
  return 0.0;
}

void fill_zero(Context& ctx, const TensorView& dst) {
  CHECK(dst.is_contiguous() && dst.device == ctx.device, "fill_zero: contiguous {} tensor",
        device_name(ctx.device));
  if (ctx.dry_run) return;
  FP8RL_ON_CUDA(ctx, cuda::fill_zero(backend(ctx), dst));
  if (dst.nbytes() > 0) std::memset(dst.data, 0, dst.nbytes());
}

void fill(Context& ctx, const TensorView& dst, float value) {
  CHECK(dst.is_contiguous() && dst.device == ctx.device &&
            (dst.dtype == DType::f32 || dst.dtype == DType::bf16),
        "fill: contiguous f32/bf16 tensor on {}", device_name(ctx.device));
  if (ctx.dry_run) return;
  FP8RL_ON_CUDA(ctx, cuda::fill(backend(ctx), dst, value));
  for (int64_t i = 0; i < dst.numel(); ++i) {
    if (dst.dtype == DType::f32)
      dst.ptr<float>()[i] = value;
    else
      dst.ptr<uint16_t>()[i] = f32_to_bf16(value);
  }
}

void fill_uniform(Context& ctx, const TensorView& dst, uint64_t seed, float bound) {
  CHECK(dst.is_contiguous() && dst.device == ctx.device &&
            (dst.dtype == DType::f32 || dst.dtype == DType::bf16),
        "fill_uniform: contiguous f32/bf16 tensor on {}", device_name(ctx.device));
  if (ctx.dry_run) return;
  FP8RL_ON_CUDA(ctx, cuda::fill_uniform(backend(ctx), dst, seed, bound));
  parallel_for(0, dst.numel(), [&](int64_t i) {
    const float v = uniform_hash(seed, uint64_t(i), bound);
    if (dst.dtype == DType::f32)
      dst.ptr<float>()[i] = v;
    else
      dst.ptr<uint16_t>()[i] = f32_to_bf16(v);
  });
}

bool dry_run_scratch(Context& ctx, size_t bytes) {
  if (!ctx.dry_run) return false;
  CHECK(ctx.scratch != nullptr, "a dry run needs a measuring scratch arena");
  if (bytes > 0) {
    ArenaScope scope(*ctx.scratch);
    ctx.scratch->alloc({int64_t(bytes)}, DType::f8e4m3);  // bytes
  }
  return true;
}

size_t device_allocated_bytes(const Context& ctx) {
  if (ctx.device == Device::cpu || !device_present(ctx)) return 0;
#if FP8RL_HAVE_CUDA
  return ctx.cuda->allocated();
#else
  raise_no_cuda();
  return 0;
#endif
}

size_t device_peak_allocated_bytes(const Context& ctx) {
  if (ctx.device == Device::cpu || !device_present(ctx)) return 0;
#if FP8RL_HAVE_CUDA
  return ctx.cuda->peak_allocated();
#else
  raise_no_cuda();
  return 0;
#endif
}

void reset_device_peak_allocated(Context& ctx) {
  if (ctx.device == Device::cpu || !device_present(ctx)) return;
#if FP8RL_HAVE_CUDA
  ctx.cuda->reset_peak_allocated();
#else
  raise_no_cuda();
#endif
}

DeviceRegionInfo device_region_info(const Context& ctx) {
  DeviceRegionInfo info;
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda && ctx.cuda != nullptr && ctx.cuda->region()) {
    const cuda::DeviceRegion& r = *ctx.cuda->region();
    info.on = true;
    info.reserved = r.reserved();
    info.committed = r.committed();
    info.used = r.used();
    info.blocks = r.blocks();
  }
#endif
  (void)ctx;
  return info;
}

size_t gemm_workspace_bytes(const Context& ctx) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda && ctx.cuda != nullptr) return ctx.cuda->workspace_bytes();
#endif
  // Without the device (an estimate): what a CudaDevice of default options takes.
  return ctx.device == Device::cuda ? CudaDeviceOptions{}.workspace_bytes : 0;
}

bool in_device_region(const Context& ctx, const void* p) {
#if FP8RL_HAVE_CUDA
  if (ctx.device == Device::cuda && ctx.cuda != nullptr && ctx.cuda->region())
    return ctx.cuda->region()->contains(p);
#endif
  (void)ctx, (void)p;
  return false;
}

bool device_present(const Context& ctx) {
  return ctx.device == Device::cpu || ctx.cuda != nullptr;
}

size_t device_memory_budget(const Context& ctx) {
  if (ctx.device == Device::cpu) return 0;
#if FP8RL_HAVE_CUDA
  if (ctx.cuda != nullptr) return ctx.cuda->memory_budget();
#endif
  return ctx.planned != nullptr ? ctx.planned->budget : 0;
}

std::optional<size_t> device_memory_left(const Context& ctx) {
  if (ctx.device == Device::cpu) return std::nullopt;
  if (device_present(ctx)) return device_free_bytes(ctx);
  const PlannedDevice* p = ctx.planned;
  if (p == nullptr || p->budget == 0) return std::nullopt;
  return p->held < p->budget ? p->budget - p->held : 0;
}

size_t device_free_bytes(const Context& ctx) {
  if (ctx.device == Device::cpu) return 0;
  CHECK(device_present(ctx), "the free memory of a CUDA device is unknown without the device");
#if FP8RL_HAVE_CUDA
  return cuda::device_free_bytes(*ctx.cuda);
#else
  raise_no_cuda();
  return 0;
#endif
}

void synchronize(Context& ctx) {
  if (ctx.dry_run) return;
  FP8RL_ON_CUDA(ctx, cuda::synchronize(backend(ctx)));
}

}  // namespace fp8rl::ops
