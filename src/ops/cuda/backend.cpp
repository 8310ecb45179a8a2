#include "ops/cuda/backend.h"

#include <algorithm>
#include <map>

#include "ops/cuda/attention_backward.h"
#include "ops/cuda/device_region.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/kernels.h"
#include "ops/gpu_support.h"
#include "ops/memory_budget.h"

// CMake's CUDA_ARCHITECTURES of this build (src/ops/CMakeLists.txt).
#ifndef FP8RL_CUDA_ARCHS
#define FP8RL_CUDA_ARCHS "all"
#endif

namespace fp8rl::cuda {

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    detail::raise_error(file, line,
                        fmt::format("CUDA kernel {} failed to launch: {} ({})", kernel,
                                    cudaGetErrorName(e), cudaGetErrorString(e)));
}

GpuCapability gpu_capability(const Capabilities& c) {
  GpuCapability g;
  g.name = c.name;
  g.major = c.major;
  g.minor = c.minor;
  g.fp8_tensor = c.fp8_tensor;
  g.fp8_outer = c.fp8_outer;
  g.fp8_block = c.fp8_block;
  return g;
}

namespace {

Capabilities query_capabilities(int ordinal) {
  Capabilities c;
  c.ordinal = ordinal;
  cudaDeviceProp p{};
  CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  c.name = p.name;
  c.major = p.major;
  c.minor = p.minor;
  c.multiprocessors = p.multiProcessorCount;
  c.memory = p.totalGlobalMem;
  c.cublaslt_version = cublasLtGetVersion();
  return c;
}

// cuBLASLt is asked for each FP8 mode on a representative shape; the compute capability
// gates what the cuBLAS docs list (outer-vector and 128-block scaling are sm_90 only), so a
// heuristic that answers on another chip cannot switch on a mode the library does not promise.
void probe_fp8(Capabilities& c, Gemm& gemm) {
  const int sm = c.major * 10 + c.minor;
  GemmArgs a;
  a.m = 64, a.n = 256, a.k = 256;
  a.mode = GemmScale::scalar;
  c.fp8_tensor = sm >= 89 && gemm.supported(a);
  const bool new_modes = sm == 90 && c.cublaslt_version >= 120900;
  a.mode = GemmScale::outer;
  c.fp8_outer = new_modes && gemm.supported(a);
  a.mode = GemmScale::block;
  c.fp8_block = new_modes && gemm.supported(a);
}

}  // namespace

Backend::Backend(const CudaDeviceOptions& o) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  CHECK(o.ordinal >= 0 && o.ordinal < count, "CUDA device {} does not exist ({} visible)",
        o.ordinal, count);
  CUDA_CHECK(cudaSetDevice(o.ordinal));
  caps_ = query_capabilities(o.ordinal);
  // A GPU the kernels cannot run on is refused before anything is allocated or launched.
  const std::string refusal = gpu_refusal(gpu_capability(caps_), FP8RL_CUDA_ARCHS);
  CHECK(refusal.empty(), "{}", refusal);
  // Another GPU's paths: every decision below reads the forced capability.
  if (o.forced_capability != 0) {
    const std::string why = forced_capability_refusal(gpu_capability(caps_), o.forced_capability);
    CHECK(why.empty(), "{}", why);
    const GpuCapability as = as_capability(gpu_capability(caps_), o.forced_capability);
    caps_.name = as.name;
    caps_.major = as.major;
    caps_.minor = as.minor;
  }
  CHECK(o.memory_budget <= caps_.memory, "gpu_memory {} is more than {} has ({})",
        gib_text(o.memory_budget), caps_.name, gib_text(caps_.memory));
  budget_ = o.memory_budget;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming));
  CUBLAS_CHECK(cublasLtCreate(&lt_));
  caps_.device_region = o.device_region && DeviceRegion::supported(o.ordinal);
  if (caps_.device_region)
    region_ = std::make_unique<DeviceRegion>(o.ordinal, budget_ > 0 ? budget_ : caps_.memory);
  workspace_bytes_ = o.workspace_bytes;
  workspace_ = malloc(workspace_bytes_);
  gemm_ = std::make_unique<Gemm>(lt_, workspace_, workspace_bytes_);
  streaming_sync_ = static_cast<unsigned*>(malloc(kStreamingSyncWords * sizeof(unsigned)));
  CUDA_CHECK(cudaMemset(streaming_sync_, 0, kStreamingSyncWords * sizeof(unsigned)));
  probe_fp8(caps_, *gemm_);
  CUDA_CHECK(attention_init());
  CUDA_CHECK(gated_init());
  bool wgmma = false;
  CUDA_CHECK(attention_wgmma_init(&wgmma));
  caps_.attention_wgmma = wgmma && o.wgmma_attention && caps_.major == 9;
  caps_.shared_prefix_mma = o.shared_prefix_mma;
  caps_.decode_mma = o.decode_mma;
  caps_.decode_sms = o.persistent_decode_sms < 0
                         ? caps_.multiprocessors
                         : std::min(o.persistent_decode_sms, caps_.multiprocessors);
  caps_.fp8_input_gradient = o.fp8_input_gradient;
  caps_.concurrent_linears = o.concurrent_linears;
  caps_.streaming_linears = o.streaming_linears && caps_.major * 10 + caps_.minor >= 89;
  caps_.streaming_lora_down = o.streaming_lora_down;
  caps_.attention_backward_dims = attention_backward_mma_init();
  caps_.attention_backward_tiled = o.tiled_attention_backward;
  reserve_arena(o.arena_bytes);
}

Backend::~Backend() {
  // Destructors must not throw: errors here are ignored (the process is tearing down).
  cudaStreamSynchronize(stream_);
  if (side_stream_) cudaStreamSynchronize(side_stream_);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  gemm_.reset();
  if (region_) {
    region_.reset();  // the arena and the workspace go with it
  } else {
    if (arena_.base()) cudaFree(arena_.base());
    if (workspace_) cudaFree(workspace_);
    if (streaming_sync_) cudaFree(streaming_sync_);
  }
  if (lt_) cublasLtDestroy(lt_);
  if (fork_event_) cudaEventDestroy(fork_event_);
  if (join_event_) cudaEventDestroy(join_event_);
  if (side_stream_) cudaStreamDestroy(side_stream_);
  if (stream_) cudaStreamDestroy(stream_);
}

void Backend::fork() {
  CUDA_CHECK(cudaEventRecord(fork_event_, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(side_stream_, fork_event_, 0));
}

void Backend::join() {
  CUDA_CHECK(cudaEventRecord(join_event_, side_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, join_event_, 0));
}

void* Backend::malloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  CHECK(budget_ == 0 || allocated_ + bytes <= budget_, "{}; {}",
        memory_budget_refusal(budget_, allocated_, bytes),
        "the memory plan (--dry-run) names what holds it");
  if (region_) {
    try {
      p = region_->allocate(bytes);
    } catch (const Error& e) {
      if (budget_ == 0) throw;
      RAISE("gpu_memory {}: {}", gib_text(budget_), e.what());
    }
    allocated_ += bytes;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    return p;
  }
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    RAISE("out of device memory: cudaMalloc of {:.1f} MiB failed ({}), {:.1f} of {:.1f} MiB free",
          double(bytes) / (1 << 20), cudaGetErrorString(e), double(free_b) / (1 << 20),
          double(total_b) / (1 << 20));
  }
  allocated_ += bytes;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return p;
}

size_t Backend::budget_left() const {
  if (budget_ == 0) return SIZE_MAX;
  size_t left = allocated_ < budget_ ? budget_ - allocated_ : 0;
  if (region_)
    left = std::min(left, region_->reserved() - std::min(region_->reserved(), region_->top()));
  return left;
}

void Backend::free(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (region_)
    region_->free(p);
  else
    cudaFree(p);
  allocated_ -= std::min(allocated_, bytes);
}

void Backend::set_batch_invariant(bool on) {
  batch_invariant_ = on;
  gemm_->set_batch_invariant(on);
}

void Backend::reserve_arena(size_t bytes) {
  if (bytes <= arena_.capacity()) return;
  CHECK(arena_.mark() == 0, "device arena grown while {} bytes are in use", arena_.mark());
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued ops may still read the old arena
  if (arena_.base()) free(arena_.base(), arena_.capacity());
  arena_.attach(nullptr, 0);
  arena_.attach(malloc(bytes), bytes);
}

cudaEvent_t Backend::event() {
  if (events_used_ == events_.size()) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[events_used_++];
}

void Backend::set_profiling(bool on) {
  profiling_ = on;
}

void Backend::range_begin() noexcept {
  try {
    cudaEvent_t e = event();
    if (cudaEventRecord(e, stream_) != cudaSuccess) e = nullptr;
    open_.push_back(e);
  } catch (...) {
    open_.push_back(nullptr);
  }
}

void Backend::range_end(std::string name) noexcept {
  if (open_.empty()) return;
  cudaEvent_t b = open_.back();
  open_.pop_back();
  try {
    cudaEvent_t e = event();
    if (b != nullptr && cudaEventRecord(e, stream_) == cudaSuccess)
      ranges_.push_back({std::move(name), b, e});
  } catch (...) {
  }
}

std::vector<OpTime> Backend::collect_profile() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::map<std::string, OpTime> by_name;
  for (const Range& r : ranges_) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, r.begin, r.end));
    OpTime& t = by_name[r.name];
    t.name = r.name;
    t.ms += ms;
    t.calls += 1;
  }
  std::vector<OpTime> v;
  for (auto& [name, t] : by_name) v.push_back(t);
  std::sort(v.begin(), v.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return v;
}

void Backend::reset_profile() {
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  ranges_.clear();
  open_.clear();
  events_used_ = 0;
}

}  // namespace fp8rl::cuda
