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

struct Context {
  Device device = Device::cpu;
  // CPU: every transient buffer (activations, dequantized weights, attention scores). Ops
  // rewind it before returning; callers size it with reserve(). Unused by CUDA contexts,
  // whose transient buffers come from the backend's device arena (ops::scratch_alloc).
  Arena* scratch = nullptr;
  cuda::Backend* cuda = nullptr;  // set iff device == cuda

  // The dtype of activations between ops: exact fp32 on the CPU reference, bf16 on CUDA
  // (fp32 math inside every kernel, fp32 accumulation in every reduction).
  DType activation_dtype() const { return device == Device::cuda ? DType::bf16 : DType::f32; }
};

}  // namespace fp8rl
