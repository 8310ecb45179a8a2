// The explicit context every op receives: which device runs it and where transient buffers
// come from. There is no global stream, handle or allocator anywhere in fp8rl.
//
// A CPU context is {Device::cpu, &arena}. A CUDA context comes from CudaDevice::context()
// (ops/device.h); its `cuda` member is the backend (stream, cuBLASLt handle and workspace,
// device memory arena), opaque here so that no CUDA header reaches model code.
#pragma once

#include "core/arena.h"
#include "core/tensor.h"

namespace fp8rl {

namespace cuda {
class Backend;  // ops/cuda/backend.h
}
struct PlannedDevice;  // ops/memory.h

struct Context {
  Device device = Device::cpu;
  // CPU: every transient buffer (activations, dequantized weights, attention scores). Ops
  // rewind it before returning; callers size it with reserve(). Unused by CUDA contexts,
  // whose transient buffers come from the backend's device arena (ops::scratch_alloc).
  Arena* scratch = nullptr;
  cuda::Backend* cuda = nullptr;  // set iff device == cuda
  // CPU only: emulate the CUDA backend's bf16 activations. Every value that the CUDA kernels
  // store in bf16 (op outputs, hence the KV cache; P inside attention; the operands of the
  // dequantize-to-bf16 GEMM fallback; unquantized weights and embeddings, bf16 on the device)
  // is rounded to bf16 (RNE) at the same point, still held in f32 tensors; logits stay fp32.
  // Why: an FP8 forward is discontinuous (one ulp moves an activation across an e4m3 rounding
  // boundary, and the flip cascades), so CUDA FP8 logits can only be held to the bf16 bound
  // against a CPU forward whose activations carry the same bf16 roundings. With it the two
  // differ by fp32 reduction order and intrinsic ulps only. Off: the exact fp32 reference.
  bool bf16_activations = false;
  // A measuring dry run: ops check their operands and take their scratch (declared per op,
  // e.g. linear_scratch_bytes) from `scratch`, which must be a measuring Arena
  // (Arena::measuring) of this device, but compute nothing and touch no memory. A forward run
  // so at the largest step shape gives the arena high water it needs, before any step runs:
  // the memory plan is measured, not written as a byte formula.
  bool dry_run = false;
  // A run planned without its device (a dry run's estimate, cli::SessionOptions::plan_only):
  // what its planned buffers add up to on the device it plans for, and that device's memory
  // budget (ops/memory.h); null otherwise.
  PlannedDevice* planned = nullptr;

  // The dtype of activations between ops: exact fp32 on the CPU reference (also with
  // bf16_activations, whose values are bf16 but stored as f32), bf16 on CUDA (fp32 math inside
  // every kernel, fp32 accumulation in every reduction).
  DType activation_dtype() const { return device == Device::cuda ? DType::bf16 : DType::f32; }
};

}  // namespace fp8rl
