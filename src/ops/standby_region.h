// Standby memory: one allocation on ctx's device that the two phases of RL take turns holding
// (what Unsloth gets from vLLM's sleep mode, here without a second process): the engine's KV
// block pool while it generates, the training pass's saved activations and its KV while the
// trainer runs. The memory is never given back to the driver between phases; a phase takes it
// over and the previous holder's contents are gone, which each holder notices by comparing
// holder() with itself before it trusts what it left there.
#pragma once

#include <cstddef>

#include "ops/memory.h"

namespace fp8rl {

class StandbyRegion {
 public:
  explicit StandbyRegion(Context& ctx) : ctx_(ctx) {}
  StandbyRegion(const StandbyRegion&) = delete;
  StandbyRegion& operator=(const StandbyRegion&) = delete;

  // Makes `holder` the holder of the region's first `bytes` and returns their address. A
  // region smaller than `bytes` is grown first (the old allocation freed before the new one
  // is made, so the region moves: a holder must compare the address with what it had).
  void* acquire(const void* holder, size_t bytes);
  // Sizes the region to at least `bytes` now (before any holder: one allocation for a run).
  void reserve(size_t bytes);
  const void* holder() const { return holder_; }
  void* data() const { return buffer_.data(); }
  size_t size() const { return buffer_.size(); }
  int64_t allocations() const { return allocations_; }  // how often it was (re)allocated

 private:
  Context& ctx_;
  DeviceBuffer buffer_;
  const void* holder_ = nullptr;
  int64_t allocations_ = 0;
};

}  // namespace fp8rl
