// One differentiable pass of the policy over packed sequences: the training forward (saving
// activations), the per-token log-probabilities of given targets under the temperature-scaled
// full-vocabulary distribution (ops::lm_head_cross_entropy: no [T, V] logits), then the
// backward of any loss of those log-probabilities into the LoRA gradients. SFT uses it with
// d loss / d logprob = -1 / num_targets; GRPO and DPO with their losses' derivatives.
//
// Memory: what lives from the forward to the backward (the step description, targets, the
// saved activations, the loss outputs: one arena) and the batch's KV pool lie at the start of
// a StandbyRegion (ops/standby_region.h): the pass's own, or one it shares with the engine,
// which holds it as its KV pool while it generates (GRPO's standby memory). Both and the
// context's scratch are sized before the pass by a measuring dry run of the whole pass
// (forward, loss and backward), so nothing is allocated inside it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/adapter.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/step.h"
#include "model/tape.h"
#include "ops/context.h"
#include "ops/memory.h"
#include "ops/standby_region.h"

namespace fp8rl {

// Variable-length sequences packed into one row of T tokens (padding-free).
struct PackedSequences {
  std::span<const int32_t> ids;         // [T]
  std::span<const int32_t> targets;     // [T] token predicted at each position, or -100
  std::span<const int64_t> cu_seqlens;  // [S+1] sequence s owns rows cu_seqlens[s] ..
  // MoE models: experts to replay, [T, L, k] i32 (the engine's CompletionOutput::routing of
  // each sequence, concatenated; -1 rows route themselves). Empty: the model routes.
  std::span<const int32_t> routing = {};
};

struct PassOptions {
  bool checkpointing = false;  // per decoder layer (model/tape.h)
  // With checkpointing: the layer inputs in host memory (page-locked on CUDA) between the
  // forward and the backward (TRL's activation_offloading).
  bool offload = false;
  float temperature = 1.0f;   // logprobs of softmax(logits / temperature)
  float lora_dropout = 0.0f;  // PEFT's lora_dropout (training passes only)
  uint64_t dropout_seed = 0;  // this pass's dropout stream
  bool entropy = false;       // also the per-token entropy of the distribution
  // The reference policy of GRPO's KL term and of DPO instead of the pass's adapter: the
  // adapter given to set_reference(), or the base model (no backward may follow).
  bool reference = false;
  // MoE models: keep the experts each layer used (routing()).
  bool record_routing = false;
  // Non-empty: a scoring pass (a sequence classifier's): the final normed hidden states at
  // these packed rows (pooled(), [S, H]) instead of log-probabilities (targets are ignored),
  // and backward_pooled() takes the gradient of a loss of them. The span must outlive forward().
  std::span<const int64_t> pooled_rows = {};
};

// Bytes a pass takes, by part (the memory plan of `--dry-run`).
struct PassPlan {
  size_t saved_bytes = 0;    // the pass arena: saved activations, step, targets, loss outputs
  size_t scratch_bytes = 0;  // the context's scratch high water (forward, loss, backward)
  size_t kv_bytes = 0;       // the KV pool of the batch
  size_t host_bytes = 0;     // offloaded layer inputs, in host memory
  // Bytes of the region the pass holds: the saved arena (aligned), then the KV pool.
  size_t region_bytes() const;
};

class LogprobPass {
 public:
  // The adapter the forward runs with and backward() takes gradients of (null: the model
  // alone, no gradients); it must fit the model (LoraAdapter::check_fits).
  // region: the standby region to hold during a pass (it must outlive the pass object);
  // null: a region of the pass's own.
  LogprobPass(Context& ctx, const Model& model, const LoraAdapter* adapter,
              StandbyRegion* region = nullptr);
  ~LogprobPass();
  LogprobPass(const LogprobPass&) = delete;
  // The adapter a PassOptions::reference forward runs with (null, the default: the base
  // model); it must fit the model and outlive the pass.
  void set_reference(const LoraAdapter* reference);
  LogprobPass& operator=(const LogprobPass&) = delete;

  // The plan of a pass over `batch` (measured by a dry run; allocates nothing but a one-block
  // KV pool for the dry run).
  PassPlan plan(const PackedSequences& batch, const PassOptions& options);

  // The forward: fills logprobs() (0 at ignored targets) and, if asked, entropies(); keeps
  // what backward() needs. Every sequence is a full prefill from position 0.
  void forward(const PackedSequences& batch, const PassOptions& options);
  std::span<const float> logprobs() const { return logprobs_; }    // [T]
  std::span<const float> entropies() const { return entropies_; }  // [T] (options.entropy)
  // [T, L, k] the experts each MoE layer used (options.record_routing; dense layers' -1).
  std::span<const int32_t> routing() const { return routing_; }
  // With replay (PackedSequences::routing): of the (token, MoE layer) choices replayed, how
  // many sets of experts the layer's own top-k would have made differently, and how many.
  struct ReplayChanges {
    int64_t changed = 0, replayed = 0;
  };
  ReplayChanges replay_changes() const { return replay_changes_; }

  // grads (f32 [P] like adapter->master_params(), on the host or the context's device) +=
  // d/d(adapter) sum_t dlogprob[t] * logprob[t], for the last forward(). Host gradients of a
  // CUDA pass go through a device buffer and one copy back.
  void backward(std::span<const float> dlogprob, const TensorView& grads);
  // A scoring pass's hidden states, f32 [S, H] row-major on the host.
  std::span<const float> pooled() const { return pooled_; }
  // grads (f32 [P] on the context's device) += d/d(adapter) of a loss whose gradient with
  // respect to pooled() is d_pooled (f32 [S, H], host), for the last scoring forward().
  void backward_pooled(std::span<const float> d_pooled, const TensorView& grads);

 private:
  struct Buffers;
  void run(Context& ctx, Arena& arena, Arena& host, KvPool& kv, const PackedSequences& batch,
           const PassOptions& options, Buffers& out);
  void backward_on(Context& ctx, const Buffers& b, const KvPool& kv, const TensorView& dlogprob,
                   const TensorView& grads);
  void backward_pooled_on(Context& ctx, const Buffers& b, const KvPool& kv, const float* d_pooled,
                          const TensorView& grads);
  void check_backward() const;

  // Takes the region for a pass of plan p: the arena over its first bytes, the KV pool after
  // them (kept, not re-zeroed, while the pass held the region since the last pass and the
  // pool still fits where it lies).
  void hold_region(const PassPlan& p, int64_t kv_blocks);

  Context& ctx_;
  const Model& model_;
  const LoraAdapter* adapter_;
  const LoraAdapter* reference_ = nullptr;
  std::unique_ptr<StandbyRegion> own_region_;
  StandbyRegion* region_;
  void* held_base_ = nullptr;  // the region's address at the last pass
  std::unique_ptr<Arena> arena_;
  DeviceBuffer host_storage_;  // offloaded layer inputs (pinned on CUDA)
  std::unique_ptr<Arena> host_arena_;
  DeviceBuffer device_grads_;  // CUDA: [P] f32 gradients of one backward
  std::unique_ptr<KvPool> kv_;
  std::unique_ptr<KvPool> probe_kv_;  // the dry run's one-block pool
  std::unique_ptr<Buffers> last_;
  PassOptions last_options_;
  std::vector<float> logprobs_, entropies_, pooled_;
  std::vector<int32_t> routing_;
  ReplayChanges replay_changes_;
};

}  // namespace fp8rl
