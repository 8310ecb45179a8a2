// A CUDA device opened for the ops: one stream, a cuBLASLt handle with its fixed workspace, a
// device memory arena, the FP8 capabilities found at start, and per-op timing for benchmarks.
// CUDA-free on purpose: the CLI and the model include this, never a CUDA header.
//
//   CudaDevice dev;                      // device 0
//   Context ctx = dev.context();         // pass to Model::to_device, KvCache, forward, ops
//
// In a build without CUDA every constructor raises and count() is 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ops/context.h"
#include "ops/gpu_support.h"
#include "ops/linear.h"

namespace fp8rl {

struct CudaDeviceOptions {
  int ordinal = 0;
  size_t workspace_bytes = size_t(32) << 20;  // cuBLASLt workspace (the NVIDIA samples' size)
  size_t arena_bytes = size_t(64) << 20;      // initial device arena; forward() grows it
  // Attention on the Hopper wgmma kernel where the device runs it; false keeps the mma.sync
  // kernel (tests hold both to the CPU reference on the same GPU).
  bool wgmma_attention = true;
  // The attention backward on the tiled tensor-core kernels (FlashAttention-2, mma.sync) where
  // they apply; false keeps the reference kernels (a warp per row), for tests and timing.
  bool tiled_attention_backward = true;
  // The prefix kernel of the shared-prefix decode path (ops::PagedBatch's prefix_*) on the
  // tensor cores (P rounded to bf16); false: on the CUDA cores with P in fp32, for tests and
  // timing.
  bool shared_prefix_mma = true;
  // The paged decode kernel (each sequence's own keys) on the tensor cores, with a cp.async
  // ring of K/V tiles (FP8 pools: of codes and scales), for head dims up to 128; false: the
  // CUDA-core kernel, for tests and timing. Both keep P to ~fp32 accuracy (kCudaPagedDecode).
  bool decode_mma = true;
  // The tensor-core decode kernel's blocks each take several (sequence, KV head, chunk) items,
  // copying an item's first K/V tile while the one before finishes, over a grid sized to what
  // this many multiprocessors hold at once: -1, all of them; 0, a block per item (for tests and
  // timing); n > 0, n of them (tests: blocks with many items at small shapes).
  int persistent_decode_sms = -1;
  // A frozen FP8-row weight's input gradient as an FP8 GEMM (dY times the row scales,
  // quantized per token to e4m3, against a per-call transposed copy of the codes); false: the
  // reference path, dY and the dequantized weight in bf16 (ops/cuda/linear.cpp).
  bool fp8_input_gradient = true;
  // Decode-sized FP8 GEMMs that leave SMs idle run concurrently on a second stream: gate and
  // up side by side, and a lone GEMM (o_proj, down_proj) as two K halves summed in fp32
  // (ops/cuda/linear.cpp); false: one GEMM at a time, for tests and timing.
  bool concurrent_linears = true;
  // FP8 GEMMs of at most 16 rows (row or tensor scaled weights) on the weight-streaming
  // kernel (ops/cuda/linear.cu), which keeps the memory bus busy at a rollout's few rows;
  // false: cuBLASLt at every size, for tests and timing.
  bool streaming_linears = true;
  // A group's LoRA down products (x A^T over its stacked A matrices) computed by the streaming
  // launch itself, in blocks ahead of its weight tiles; false: a bf16 GEMM before it.
  bool streaming_lora_down = true;
  // Every buffer, the scratch arena and the cuBLASLt workspace carved from one device region
  // (ops/cuda/device_region.h: addresses reserved once, memory mapped as far as it is used);
  // false, or a driver without virtual memory management: one cudaMalloc per buffer.
  bool device_region = true;
  // The bytes all of the above may hold on the device (--gpu-memory): the region is reserved
  // to this size and an allocation beyond it is refused, naming the budget
  // (ops/memory_budget.h); 0: the device's memory.
  size_t memory_budget = 0;
  // The compute capability whose code paths to take instead of the device's own, as major * 10
  // + minor (ops/gpu_support.h, FP8RL_CUDA_CAPABILITY); 0: the device's.
  int forced_capability = 0;
};

// One op category's device time, summed over calls, from CUDA events around each op.
struct OpTime {
  std::string name;  // "linear 4096x4096 row", "attention", "rms_norm", ...
  double ms = 0;
  int64_t calls = 0;
};

class CudaDevice;

// A sequence of ops recorded by CudaDevice::begin_capture/end_capture, replayable on the
// device's stream with the same buffers (a CUDA graph: one launch for the whole sequence).
class CudaGraph {
 public:
  CudaGraph() = default;
  CudaGraph(CudaGraph&& o) noexcept;
  CudaGraph& operator=(CudaGraph&& o) noexcept;
  ~CudaGraph();
  // Launches the recorded ops again (asynchronous, like the ops themselves).
  void replay();
  size_t nodes() const { return nodes_; }  // kernels, memsets and copies recorded

 private:
  friend class CudaDevice;
  void* exec_ = nullptr;  // cudaGraphExec_t
  void* stream_ = nullptr;
  size_t nodes_ = 0;
};

class CudaDevice {
 public:
  // Visible CUDA devices; 0 when there is none or this build has no CUDA backend.
  static int count();
  // Whether this build has the CUDA backend at all.
  static bool built();
  // What `fp8rl info --device cuda` prints: device, compute capability, memory, cuBLASLt
  // version, and which FP8 GEMM path each scheme takes on it (native cuBLASLt scaling mode or
  // the dequantize-to-bf16 fallback).
  static std::string describe(int ordinal = 0);

  explicit CudaDevice(const CudaDeviceOptions& options = {});
  ~CudaDevice();
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  Context context();
  void synchronize();
  std::string name() const;
  // Which GEMM each scheme runs on this device ("cuBLASLt OUTER_VEC_32F", "bf16 fallback").
  std::string gemm_path(Fp8Scheme scheme) const;
  // What ops/gpu_support.h decides from: the compute capability and the native FP8 modes.
  GpuCapability capability() const;
  // The GEMM the last ops::linear on this device ran, e.g. "fp8 OUTER_VEC_32F".
  std::string last_linear_path() const;
  // The last ops::paged_attention's tensor-core decode kernel: {items, blocks that took them};
  // {0, 0} when that kernel did not run.
  std::pair<int64_t, int64_t> last_decode_grid() const;

  // Per-op timing: while on, every op records CUDA events around itself (adds a little
  // overhead; off by default). profile() synchronizes and returns the sums since reset.
  void set_profiling(bool on);
  std::vector<OpTime> profile();
  void reset_profile();

  // Milliseconds per call of the bare cuBLASLt GEMM that linear() runs for this weight and
  // `m` rows: operands pre-quantized with random data, the same algorithm, `iters` timed
  // calls after a warm-up. The anchor for the in-model linear time of the same shape.
  double time_gemm(const LinearWeight& w, int64_t m, int iters);

  // Self-check of the division in the device's FP8 quantizers (a multiply by the reciprocal
  // with an fma correction) against IEEE division, the recipe's: the number of differing
  // quotients over divisor significands 1 + (b_first + i * b_step) 2^-23, i < b_count, times
  // every dividend significand in [1, 2); one differing pair's bits go to bad (if any).
  // b_first 0, b_count 2^23, b_step 1 covers every pair of floats the quantizers can divide.
  uint64_t check_fp8_quotient(uint32_t b_first, uint32_t b_count, uint32_t b_step,
                              uint32_t (&bad)[2]);

  // CUDA graph capture: ops on this device's context between the two calls are recorded
  // instead of run. Every op is capturable (no allocation, host transfer or synchronization
  // inside a launch) as long as its operands already live on the device; transfers to or from
  // host memory are not, and end_capture() then raises with CUDA's error. Buffers the ops use
  // (arena scratch too) must stay valid while the graph is replayed.
  void begin_capture();
  CudaGraph end_capture();
  // The same on the stream of a CUDA context, for code that holds a Context only (the engine).
  static void begin_capture(Context& ctx);
  static CudaGraph end_capture(Context& ctx);

  size_t arena_high_water() const;  // peak bytes of the device arena
  size_t memory_used() const;       // device memory in use now (all processes), bytes
  size_t memory_total() const;
  size_t peak_allocated() const;  // peak bytes this process has cudaMalloc'd (buffers + arena)

 private:
  std::unique_ptr<cuda::Backend> backend_;
};

// The error of a build without nvcc asked for CUDA work.
[[noreturn]] void raise_no_cuda();

}  // namespace fp8rl
