// The explicit context every op receives: which device runs it and where transient buffers
// come from. There is no global stream, handle or allocator anywhere in fp8rl.
#pragma once

#include "core/arena.h"
#include "core/tensor.h"

namespace fp8rl {

struct Context {
  Device device = Device::cpu;
  // Transient per-op buffers (dequantized weights, quantized activations, attention scores).
  // Ops rewind it before returning; callers size it with reserve().
  Arena* scratch = nullptr;
};

}  // namespace fp8rl
