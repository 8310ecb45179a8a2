// The CUDA backend object behind a CUDA Context: one device, one stream, the cuBLASLt handle
// with its fixed workspace, the device arena for transient tensors, the FP8 capabilities found
// at start, the GEMM plan cache and the per-op profiler. Explicit, never global: every op gets
// it through ctx.cuda. Only ops/cuda/ includes this header (it brings the CUDA headers).
#pragma once

#include "core/arena.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "ops/cuda/kernels.h"
#include "ops/device.h"
#include "ops/gpu_support.h"

// The CHECK family for CUDA and cuBLAS(Lt) calls: file, line, the call and the error string.
#define CUDA_CHECK(expr)                                                        \
  do {                                                                          \
    const cudaError_t fp8rl_e_ = (expr);                                        \
    if (fp8rl_e_ != cudaSuccess) [[unlikely]]                                   \
      ::fp8rl::detail::raise_error(                                             \
          __FILE__, __LINE__,                                                   \
          ::fmt::format("CUDA error {} ({}) in {}", cudaGetErrorName(fp8rl_e_), \
                        cudaGetErrorString(fp8rl_e_), #expr));                  \
  } while (0)
#define CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                       \
    const cublasStatus_t fp8rl_s_ = (expr);                                                  \
    if (fp8rl_s_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                      \
      ::fp8rl::detail::raise_error(                                                          \
          __FILE__, __LINE__,                                                                \
          ::fmt::format("cuBLAS error {} in {}", cublasLtGetStatusString(fp8rl_s_), #expr)); \
  } while (0)

namespace fp8rl::cuda {

class Gemm;
class DeviceRegion;

// What the device can do, decided once at start from its compute capability and cuBLASLt's
// answers for each scaling mode (quant/fp8.h): sm_90 has all three FP8 schemes, sm_89 and
// sm_10x/12x per-tensor only, older GPUs none. A scheme without a native path runs through
// the dequantize-to-bf16 GEMM: slower, never wrong.
struct Capabilities {
  int ordinal = 0;
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  size_t memory = 0;
  size_t cublaslt_version = 0;
  bool fp8_tensor = false;  // SCALAR_32F x SCALAR_32F
  bool fp8_outer = false;   // OUTER_VEC_32F x OUTER_VEC_32F (per-row weights, per-token acts)
  bool fp8_block = false;   // BLK128x128_32F weights x VEC128_32F activations
  // The wgmma attention kernel runs here (sm_90 with this build's sm_90a code) and is not
  // switched off by CudaDeviceOptions::wgmma_attention; else the mma.sync kernel runs.
  bool attention_wgmma = false;
  // The attention backward runs the tiled mma.sync kernels where they apply
  // (CudaDeviceOptions::tiled_attention_backward; head dims in attention_backward_dims, the
  // mask of attention_backward_mma_init); else the reference kernels.
  bool attention_backward_tiled = true;
  unsigned attention_backward_dims = 0;
  // The shared-prefix decode path's prefix kernel on mma.sync (CudaDeviceOptions::
  // shared_prefix_mma); else on the CUDA cores.
  bool shared_prefix_mma = true;
  // The paged decode kernel on mma.sync (CudaDeviceOptions::decode_mma); else the CUDA cores.
  bool decode_mma = true;
  // AttentionArgs::decode_sms of the decode kernel (CudaDeviceOptions::persistent_decode_sms,
  // at most the device's multiprocessors; 0: a block per item).
  int decode_sms = 0;
  // linear_backward_input of FP8-row weights on the FP8 tensor cores
  // (CudaDeviceOptions::fp8_input_gradient); else through the dequantized weight in bf16.
  bool fp8_input_gradient = true;
  // Small FP8 GEMMs on two streams (CudaDeviceOptions::concurrent_linears).
  bool concurrent_linears = true;
  // FP8 GEMMs of few rows on the weight-streaming kernel (CudaDeviceOptions::
  // streaming_linears; mma.sync on e4m3, sm_89 and later).
  bool streaming_linears = true;
  // A group's LoRA down products inside its streaming launch (CudaDeviceOptions::
  // streaming_lora_down); else one GEMM before it.
  bool streaming_lora_down = true;
  // All device memory is carved from one region (CudaDeviceOptions::device_region, where the
  // driver supports virtual memory management); else one cudaMalloc per buffer.
  bool device_region = false;
};
// The capabilities as the plain decisions of ops/gpu_support.h take them.
GpuCapability gpu_capability(const Capabilities& c);

class Backend {
 public:
  Backend(const CudaDeviceOptions& options);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  int ordinal() const { return caps_.ordinal; }
  cudaStream_t stream() const { return stream_; }
  // A second stream for work that runs beside stream()'s: fork() makes side_stream() wait for
  // everything queued on stream() so far, join() makes stream() wait for everything queued on
  // side_stream(). Both are stream operations, so a CUDA graph captured on stream() records the
  // fork and the join as edges.
  cudaStream_t side_stream() const { return side_stream_; }
  void fork();
  void join();
  cublasLtHandle_t lt() const { return lt_; }
  const Capabilities& caps() const { return caps_; }
  Gemm& gemm() { return *gemm_; }
  Arena& arena() { return arena_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // Grows the arena to `bytes` (synchronizes; only when nothing is allocated from it).
  void reserve_arena(size_t bytes);

  // Batch-invariant kernels (ops/exactness.h): GEMMs pinned to one algorithm per shape,
  // attention always on the prefill kernel (a decode step's rows too).
  void set_batch_invariant(bool on);
  bool batch_invariant() const { return batch_invariant_; }

  // The counters of the streaming kernel's down products (StreamingDown::sync), zero between
  // launches. Launches that use them run on stream() only, one after another.
  unsigned* streaming_sync() const { return streaming_sync_; }

  // The GEMM the last linear() ran ("fp8 outer", "bf16", "fp8 dequantized to bf16", ...): for
  // tests and benchmarks that report which path a shape took on this device.
  const char* last_linear_path = "";
  // The last paged_attention's tensor-core decode kernel: its items and blocks (tests of the
  // persistent grid, CudaDeviceOptions::persistent_decode_sms).
  DecodeGrid last_decode_grid;

  // Device memory with a byte count for the peak-memory report: a block of the device region
  // (ops/cuda/device_region.h), or one cudaMalloc each when the region is off.
  void* malloc(size_t bytes);
  void free(void* p, size_t bytes);
  // The region, or null when the device runs without one.
  DeviceRegion* region() { return region_.get(); }
  size_t peak_allocated() const { return peak_allocated_; }
  // CudaDeviceOptions::memory_budget (0: none) and what it leaves for one more block: the
  // budget less what is held, and with the region at most the room above its highest block.
  size_t memory_budget() const { return budget_; }
  size_t budget_left() const;
  size_t allocated() const { return allocated_; }
  void reset_peak_allocated() { peak_allocated_ = allocated_; }

  // Per-op profiling with CUDA events (off by default).
  bool profiling() const { return profiling_; }
  void set_profiling(bool on);
  // Never throw (they run in destructors); a failed event record drops the range.
  void range_begin() noexcept;
  void range_end(std::string name) noexcept;
  std::vector<OpTime> collect_profile();  // synchronizes
  void reset_profile();

 private:
  cudaEvent_t event();
  Capabilities caps_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  std::unique_ptr<DeviceRegion> region_;  // declared before what is carved from it
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  unsigned* streaming_sync_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  Arena arena_{Device::cuda, 256};  // 256-byte aligned views into one cudaMalloc
  size_t allocated_ = 0, peak_allocated_ = 0;
  size_t budget_ = 0;
  bool profiling_ = false;
  bool batch_invariant_ = false;
  std::vector<cudaEvent_t> events_;  // pool, reused after reset_profile()
  size_t events_used_ = 0;
  std::vector<cudaEvent_t> open_;  // begin events of ranges not yet ended
  struct Range {
    std::string name;
    cudaEvent_t begin, end;
  };
  std::vector<Range> ranges_;
};

}  // namespace fp8rl::cuda
