#include "model/kv_cache.h"

namespace fp8rl {

KvCache::KvCache(const ModelConfig& c, int64_t capacity) : capacity_(capacity) {
  CHECK(capacity > 0, "KV cache capacity must be positive, got {}", capacity);
  k_ = Tensor::zeros({c.num_layers, capacity, c.num_kv_heads, c.head_dim}, DType::f32);
  v_ = Tensor::zeros({c.num_layers, capacity, c.num_kv_heads, c.head_dim}, DType::f32);
}

static TensorView layer_of(const Tensor& t, int64_t layer) {
  const Shape& s = t.shape();
  CHECK(layer >= 0 && layer < s[0], "KV cache layer {} out of range [0, {})", layer, s[0]);
  return TensorView(t.ptr<float>() + layer * s[1] * s[2] * s[3], DType::f32, {s[1], s[2], s[3]});
}

TensorView KvCache::k(int64_t layer) const {
  return layer_of(k_, layer);
}
TensorView KvCache::v(int64_t layer) const {
  return layer_of(v_, layer);
}

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
