// The key/value cache of one sequence: every layer's rotated keys and values by cache slot.
// The paged engine of a later issue replaces the storage, not the forward that fills it.
#pragma once

#include "core/tensor.h"
#include "formats/model_config.h"
#include "ops/context.h"
#include "ops/memory.h"

namespace fp8rl {

class KvCache {
 public:
  // On the host, f32 (the CPU forward).
  KvCache(const ModelConfig& config, int64_t capacity);
  // On ctx's device in its activation dtype (bf16 on CUDA), zero-filled.
  KvCache(const ModelConfig& config, int64_t capacity, Context& ctx);

  TensorView k(int64_t layer) const;          // [C, Hkv, D]
  TensorView v(int64_t layer) const;          // [C, Hkv, D]
  int64_t length() const { return length_; }  // slots filled
  int64_t capacity() const { return capacity_; }
  Device device() const { return k_.device(); }
  DType dtype() const { return dtype_; }
  void advance(int64_t n);   // n more slots are filled
  void truncate(int64_t n);  // keep the first n slots
  size_t nbytes() const { return k_.size() + v_.size(); }

 private:
  void init(const ModelConfig& config, int64_t capacity, Context& ctx);
  TensorView layer_of(const DeviceBuffer& b, int64_t layer) const;
  DeviceBuffer k_, v_;  // [L, C, Hkv, D]
  DType dtype_ = DType::f32;
  int64_t layers_ = 0, heads_ = 0, head_dim_ = 0;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
};

}  // namespace fp8rl
