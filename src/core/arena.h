// A bump allocator for activations and scratch: one allocation up front, views handed out in
// order, released all at once by rewinding to a mark. Nothing is allocated inside an op.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace fp8rl {

class Arena {
 public:
  explicit Arena(size_t capacity_bytes = 0);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Grows the backing store; only legal while nothing is allocated (mark 0).
  void reserve(size_t capacity_bytes);
  TensorView alloc(Shape shape, DType dtype);  // 64-byte aligned, contents undefined
  size_t mark() const { return used_; }
  void rewind(size_t mark);
  size_t capacity() const { return capacity_; }
  size_t high_water() const { return high_water_; }

 private:
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t high_water_ = 0;
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
