// The paged KV cache. One pool per model holds the keys and values of every layer in blocks of
// kKvBlockSize token slots; a sequence owns a list of blocks (its block table), so sequences
// of any length share one region with no per-sequence capacity, and the n samples of a GRPO
// prompt can share the prompt's blocks. The engine's block manager decides who owns which
// block; KvCache below is the simple owner for callers without one (CLI logits, benchmarks,
// tests): a sequence with its blocks reserved up front.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "formats/model_config.h"
#include "ops/context.h"
#include "ops/memory.h"

namespace fp8rl {

// 16 slots: GRPO prompts are short (tens to hundreds of tokens), and only full blocks can be
// shared by content across requests, so small blocks share most of a prompt; the last,
// partial block of a prompt is shared by its n samples until one writes to it (copy on write).
// nano-vllm's 256-slot blocks would share nothing of such prompts. Attention reads a block's
// 16 rows as one contiguous 16 x Hkv x D chunk, so smaller blocks would start to cost.
inline constexpr int64_t kKvBlockSize = 16;

// What a KV pool stores: the activation dtype (f32 CPU, bf16 CUDA), or e4m3 codes with one
// fp32 scale per (slot, kv head) for K and for V: each token's head quantized on its own with
// the FP8 recipe (quant/fp8.h, the activation quantization of one group of D values), so a
// token's scale never changes after it is stored and blocks can be shared as they are.
enum class KvDType : uint8_t { activation, f8e4m3 };

// "bf16" (the activation dtype: the name the CLI uses for it) or "fp8".
KvDType parse_kv_dtype(const std::string& name);

class KvPool {
 public:
  // num_blocks blocks on ctx's device, zeroed (scales too: a zero scale dequantizes to 0).
  KvPool(const ModelConfig& config, int64_t num_blocks, Context& ctx,
         KvDType kv = KvDType::activation);
  // The same over `memory` on ctx's device (num_blocks * block_bytes() bytes, owned by the
  // caller and zeroed here): the pool of a StandbyRegion's holder (ops/standby_region.h).
  KvPool(const ModelConfig& config, int64_t num_blocks, Context& ctx, KvDType kv, void* memory);
  // Bytes one block takes over all layers, K and V (codes and scales), on ctx's device.
  static size_t block_bytes(const ModelConfig& config, const Context& ctx,
                            KvDType kv = KvDType::activation);

  TensorView k(int64_t layer) const;  // [num_blocks, block_size, Hkv, D] activation or f8e4m3
  TensorView v(int64_t layer) const;  // [num_blocks, block_size, Hkv, D]
  // The scales of an f8e4m3 pool, [num_blocks, block_size, Hkv] f32; empty otherwise.
  TensorView k_scale(int64_t layer) const;
  TensorView v_scale(int64_t layer) const;
  KvDType kv_dtype() const { return kv_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return kKvBlockSize; }
  int64_t num_layers() const { return layers_; }
  Device device() const { return memory_.device; }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return size_t(memory_.numel()); }

  // The next n unused blocks in order, for owners without a block manager (KvCache); an
  // engine's block manager hands out blocks itself and never calls this.
  std::vector<int32_t> take_blocks(int64_t n);

 private:
  void init(const ModelConfig& config, int64_t num_blocks, Context& ctx, KvDType kv, void* memory);
  TensorView layer_of(int64_t layer, int64_t kv) const;
  TensorView scale_of(int64_t layer, int64_t kv) const;
  TensorView at(Shape shape, DType dtype, size_t offset) const;
  // [L, 2, num_blocks, block_size, Hkv, D], then for f8e4m3 [L, 2, num_blocks, block_size, Hkv]
  // f32 scales; in buf_ (owned) or the caller's memory
  DeviceBuffer buf_;
  TensorView memory_;  // [nbytes] the pool's bytes (typed f8e4m3: one byte each)
  DType dtype_ = DType::f32;
  KvDType kv_ = KvDType::activation;
  int64_t layers_ = 0, heads_ = 0, head_dim_ = 0, num_blocks_ = 0;
  int64_t taken_ = 0;
};

// One sequence's cache for callers without the engine: `capacity` slots of blocks taken from a
// pool up front, filled in order.
class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t capacity);                // its own pool, host f32
  KvCache(const ModelConfig& config, int64_t capacity, Context& ctx);  // its own pool on ctx
  KvCache(KvPool& pool, int64_t capacity);                             // blocks of a shared pool

  KvPool& pool() const { return *pool_; }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int64_t length() const { return length_; }  // slots filled
  int64_t capacity() const { return capacity_; }
  Device device() const { return pool_->device(); }
  DType dtype() const { return pool_->dtype(); }
  void advance(int64_t n);   // n more slots are filled
  void truncate(int64_t n);  // keep the first n slots

 private:
  void reserve_blocks(int64_t capacity);
  std::unique_ptr<KvPool> owned_;
  KvPool* pool_ = nullptr;
  std::vector<int32_t> blocks_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
};

}  // namespace fp8rl
