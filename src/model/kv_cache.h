// The key/value cache of one sequence: every layer's rotated keys and values by cache slot.
// The paged engine of a later issue replaces the storage, not the forward that fills it.
#pragma once

#include "core/tensor.h"
#include "formats/model_config.h"

namespace fp8rl {

class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t capacity);

  TensorView k(int64_t layer) const;          // [C, Hkv, D] f32
  TensorView v(int64_t layer) const;          // [C, Hkv, D] f32
  int64_t length() const { return length_; }  // slots filled
  int64_t capacity() const { return capacity_; }
  void advance(int64_t n);   // n more slots are filled
  void truncate(int64_t n);  // keep the first n slots
  size_t nbytes() const { return k_.nbytes() + v_.nbytes(); }

 private:
  Tensor k_, v_;  // [L, C, Hkv, D]
  int64_t capacity_ = 0;
  int64_t length_ = 0;
};

}  // namespace fp8rl
