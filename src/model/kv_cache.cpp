#include "model/kv_cache.h"

#include "ops/ops.h"

namespace fp8rl {

KvCache::KvCache(const ModelConfig& c, int64_t capacity) {
  Context host{Device::cpu, nullptr};  // host buffers need no arena
  init(c, capacity, host);
}

KvCache::KvCache(const ModelConfig& c, int64_t capacity, Context& ctx) { init(c, capacity, ctx); }

void KvCache::init(const ModelConfig& c, int64_t capacity, Context& ctx) {
  CHECK(capacity > 0, "KV cache capacity must be positive, got {}", capacity);
  dtype_ = ctx.activation_dtype();
  layers_ = c.num_layers;
  heads_ = c.num_kv_heads;
  head_dim_ = c.head_dim;
  capacity_ = capacity;
  const size_t bytes = size_t(layers_ * capacity * heads_ * head_dim_) * dtype_size(dtype_);
  k_ = DeviceBuffer(ctx, bytes);
  v_ = DeviceBuffer(ctx, bytes);
  const Shape all{layers_, capacity, heads_, head_dim_};
  ops::fill_zero(ctx, k_.view(all, dtype_));
  ops::fill_zero(ctx, v_.view(all, dtype_));
}

TensorView KvCache::layer_of(const DeviceBuffer& b, int64_t layer) const {
  CHECK(layer >= 0 && layer < layers_, "KV cache layer {} out of range [0, {})", layer, layers_);
  const size_t per_layer = size_t(capacity_ * heads_ * head_dim_) * dtype_size(dtype_);
  return b.view({capacity_, heads_, head_dim_}, dtype_, size_t(layer) * per_layer);
}

TensorView KvCache::k(int64_t layer) const { return layer_of(k_, layer); }
TensorView KvCache::v(int64_t layer) const { return layer_of(v_, layer); }

void KvCache::advance(int64_t n) {
  CHECK(n >= 0 && length_ + n <= capacity_, "KV cache overflow: {} + {} slots > capacity {}",
        length_, n, capacity_);
  length_ += n;
}

void KvCache::truncate(int64_t n) {
  CHECK(n >= 0 && n <= length_, "KV cache truncate to {} outside [0, {}]", n, length_);
  length_ = n;
}

}  // namespace fp8rl
