// A bump allocator for activations and scratch: one allocation up front, views handed out in
// order, released all at once by rewinding to a mark. Nothing is allocated inside an op.
// It either owns 64-byte aligned host memory, or bumps through memory owned elsewhere (the
// CUDA backend attaches one cudaMalloc and gets views tagged Device::cuda).
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace fp8rl {

class Arena {
 public:
  explicit Arena(size_t capacity_bytes = 0);
  // An arena over external memory of `device`, aligned to `alignment`; empty until attach().
  Arena(Device device, size_t alignment);
  // An arena that hands out addresses nobody may dereference, for a dry run that only
  // measures the high water (Context::dry_run): unbounded, never touches memory.
  static Arena measuring(Device device, size_t alignment);
  Arena(Arena&& o) noexcept;
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Grows the owned backing store; only legal while nothing is allocated (mark 0).
  void reserve(size_t capacity_bytes);
  // Uses [base, base + capacity) owned by the caller; only legal at mark 0.
  void attach(void* base, size_t capacity_bytes);
  TensorView alloc(Shape shape, DType dtype);  // aligned, contents undefined
  void* base() const { return base_; }
  size_t mark() const { return used_; }
  void rewind(size_t mark);
  size_t capacity() const { return capacity_; }
  size_t high_water() const { return high_water_; }
  // The most reserve() was asked for: for a measuring arena, which holds nothing and ignores
  // reserve(), what a real one would hold.
  size_t reserved() const { return reserved_; }

 private:
  char* base_ = nullptr;
  bool owned_ = true;
  Device device_ = Device::cpu;
  size_t alignment_ = 64;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t high_water_ = 0;
  size_t reserved_ = 0;
};

// Rewinds the arena to where it was when the scope began.
class ArenaScope {
 public:
  explicit ArenaScope(Arena& a) : arena_(a), mark_(a.mark()) {}
  ~ArenaScope() { arena_.rewind(mark_); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  Arena& arena_;
  size_t mark_;
};

}  // namespace fp8rl
