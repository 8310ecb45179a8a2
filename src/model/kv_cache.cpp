#include "model/kv_cache.h"

#include "ops/ops.h"

namespace fp8rl {

namespace {
int64_t blocks_for(int64_t slots) {
  return (slots + kKvBlockSize - 1) / kKvBlockSize;
}

// Bytes of one layer's K (or V) values of one block, and of its scales.
size_t value_bytes(const ModelConfig& c, DType dtype) {
  return size_t(kKvBlockSize * c.num_kv_heads * c.head_dim) * dtype_size(dtype);
}
size_t scale_bytes(const ModelConfig& c, KvDType kv) {
  return kv == KvDType::f8e4m3 ? size_t(kKvBlockSize * c.num_kv_heads) * sizeof(float) : 0;
}
DType value_dtype(const Context& ctx, KvDType kv) {
  return kv == KvDType::f8e4m3 ? DType::f8e4m3 : ctx.activation_dtype();
}
}  // namespace

KvDType parse_kv_dtype(const std::string& name) {
  if (name == "bf16") return KvDType::activation;
  if (name == "fp8") return KvDType::f8e4m3;
  RAISE("--kv-dtype {}: expected bf16 or fp8", name);
}

KvPool::KvPool(const ModelConfig& c, int64_t num_blocks, Context& ctx, KvDType kv) {
  CHECK(num_blocks > 0, "KV pool needs at least one block, got {}", num_blocks);
  buf_ = DeviceBuffer(ctx, size_t(num_blocks) * block_bytes(c, ctx, kv));
  init(c, num_blocks, ctx, kv, buf_.data());
}

KvPool::KvPool(const ModelConfig& c, int64_t num_blocks, Context& ctx, KvDType kv, void* memory) {
  CHECK(num_blocks > 0, "KV pool needs at least one block, got {}", num_blocks);
  init(c, num_blocks, ctx, kv, memory);
}

void KvPool::init(const ModelConfig& c, int64_t num_blocks, Context& ctx, KvDType kv,
                  void* memory) {
  kv_ = kv;
  dtype_ = value_dtype(ctx, kv);
  layers_ = c.num_layers;
  heads_ = c.num_kv_heads;
  head_dim_ = c.head_dim;
  num_blocks_ = num_blocks;
  memory_ = TensorView(memory, DType::f8e4m3, {int64_t(size_t(num_blocks) * block_bytes(c, ctx, kv))},
                       ctx.device);
  // Zeroed so that a slot read before it is written (padding rows of a block, whose
  // probabilities are 0 but whose NaN would still poison 0 * v) holds no NaN.
  ops::fill_zero(ctx, memory_);
}

TensorView KvPool::at(Shape shape, DType dtype, size_t offset) const {
  return TensorView(static_cast<char*>(memory_.data) + offset, dtype, shape, memory_.device);
}

size_t KvPool::block_bytes(const ModelConfig& c, const Context& ctx, KvDType kv) {
  return size_t(2 * c.num_layers) * (value_bytes(c, value_dtype(ctx, kv)) + scale_bytes(c, kv));
}

TensorView KvPool::layer_of(int64_t layer, int64_t kv) const {
  CHECK(layer >= 0 && layer < layers_, "KV pool layer {} out of range [0, {})", layer, layers_);
  const Shape shape{num_blocks_, kKvBlockSize, heads_, head_dim_};
  const size_t per = size_t(shape.numel()) * dtype_size(dtype_);
  return at(shape, dtype_, size_t(2 * layer + kv) * per);
}

TensorView KvPool::scale_of(int64_t layer, int64_t kv) const {
  CHECK(layer >= 0 && layer < layers_, "KV pool layer {} out of range [0, {})", layer, layers_);
  if (kv_ != KvDType::f8e4m3) return {};
  const Shape shape{num_blocks_, kKvBlockSize, heads_};
  const size_t values = size_t(2 * layers_ * num_blocks_ * kKvBlockSize * heads_ * head_dim_);
  return at(shape, DType::f32,
            values + size_t(2 * layer + kv) * size_t(shape.numel()) * sizeof(float));
}

TensorView KvPool::k(int64_t layer) const {
  return layer_of(layer, 0);
}
TensorView KvPool::v(int64_t layer) const {
  return layer_of(layer, 1);
}
TensorView KvPool::k_scale(int64_t layer) const {
  return scale_of(layer, 0);
}
TensorView KvPool::v_scale(int64_t layer) const {
  return scale_of(layer, 1);
}

std::vector<int32_t> KvPool::take_blocks(int64_t n) {
  CHECK(n >= 0 && taken_ + n <= num_blocks_, "KV pool exhausted: {} more blocks, {} of {} taken", n,
        taken_, num_blocks_);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t(taken_ + i);
  taken_ += n;
  return ids;
}

KvCache::KvCache(const ModelConfig& c, int64_t capacity) {
  CHECK(capacity > 0, "KV cache capacity must be positive, got {}", capacity);
  Context host{Device::cpu, nullptr};  // host buffers need no arena
  owned_ = std::make_unique<KvPool>(c, blocks_for(capacity), host);
  pool_ = owned_.get();
  reserve_blocks(capacity);
}

KvCache::KvCache(const ModelConfig& c, int64_t capacity, Context& ctx) {
  CHECK(capacity > 0, "KV cache capacity must be positive, got {}", capacity);
  owned_ = std::make_unique<KvPool>(c, blocks_for(capacity), ctx);
  pool_ = owned_.get();
  reserve_blocks(capacity);
}

KvCache::KvCache(KvPool& pool, int64_t capacity) : pool_(&pool) {
  CHECK(capacity > 0, "KV cache capacity must be positive, got {}", capacity);
  reserve_blocks(capacity);
}

void KvCache::reserve_blocks(int64_t capacity) {
  capacity_ = capacity;
  blocks_ = pool_->take_blocks(blocks_for(capacity));
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
