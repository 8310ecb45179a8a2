// What one forward step computes: the per-step batch description. The engine's scheduler (or
// a simple caller through forward(SequenceInput...)) builds a StepInput on the host; it is
// uploaded once per step into i32 tensors on the device (StepBatch), and the forward reads
// nothing else about the batch: no per-sequence host loop, no host memory inside the step.
//
// Sequences s = 0..S-1 each bring n_s new tokens, stacked into T = sum n_s rows. New token i of
// s sits at position context_lens[s] - n_s + i and is stored at pool slot slot_mapping[row].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "formats/model_config.h"
#include "ops/context.h"
#include "ops/ops.h"

namespace fp8rl {

struct StepInput {
  std::vector<int32_t> ids;           // [T] token ids
  std::vector<int32_t> positions;     // [T] RoPE positions
  std::vector<int32_t> slot_mapping;  // [T] pool slot of each new key/value
  std::vector<int32_t> cu_q;          // [S+1] rows of sequence s: cu_q[s] .. cu_q[s+1]
  std::vector<int32_t> context_lens;  // [S] cached tokens of s after this step
  std::vector<int32_t> block_tables;  // [S, blocks_per_seq] row-major, padded with 0
  int64_t blocks_per_seq = 0;
  std::vector<int32_t> logit_rows;  // [R] rows whose logits the step returns, in this order
  int64_t max_query_len = 0, max_context_len = 0;
  // The shared-prefix description of a decode step (ops::PagedBatch's prefix_*; filled by
  // engine/shared_prefix.h after the tables are packed), uploaded with the rest when set.
  bool has_prefixes = false;
  std::vector<int32_t> prefix_cu_members;  // [S/2 + 1]
  std::vector<int32_t> prefix_members;     // [S]
  std::vector<int32_t> prefix_lens;        // [S/2]
  std::vector<int32_t> prefix_len_of_seq;  // [S]

  StepInput() : cu_q{0} {}
  int64_t num_tokens() const { return int64_t(ids.size()); }
  int64_t num_seqs() const { return int64_t(context_lens.size()); }
  int64_t num_logit_rows() const { return int64_t(logit_rows.size()); }

  // Appends a sequence: `tokens` new tokens at positions first_position.., the sequence's whole
  // block table, and whether to return logits for all its new rows or only its last.
  // Block tables are padded when the step is finished (finish()).
  enum class Logits { none, last, all };
  void add_sequence(std::span<const int32_t> tokens, int64_t first_position,
                    std::span<const int32_t> block_table, int64_t block_size, Logits logits);
  // A padding sequence (a CUDA graph's batch is a fixed bucket size): one token 0 at position
  // 0 whose key/value are not stored (slot -1) and whose attention reads slot 0 of
  // `null_block`, a block no sequence owns; its logits row is computed and ignored.
  void add_padding_sequence(int32_t null_block);
  // Block tables at least `width` blocks wide and the attention bound max_context_len at least
  // width * block_size: a captured step's shapes must not change from step to step.
  void pad_to_width(int64_t width, int64_t block_size);
  // Host-side validation against the model and the pool (ids in the vocabulary, slots inside
  // the pool, positions inside the model's context, max_context): every error names the
  // sequence.
  void validate(const ModelConfig& config, int64_t pool_blocks, int64_t block_size) const;
  // Packs the tables given to add_sequence into block_tables [S, blocks_per_seq]; called by
  // upload_step.
  void pack_block_tables();

 private:
  // The tables given to add_sequence, one after the other, until packed: sequence s's are
  // table_ids_[table_ends_[s - 1], table_ends_[s]).
  std::vector<int32_t> table_ids_;
  std::vector<size_t> table_ends_;
  int64_t min_width_ = 1;
};

// The largest step a memory plan must hold.
struct StepShape {
  int64_t tokens = 1;       // T: new tokens of all sequences
  int64_t seqs = 1;         // S
  int64_t logit_rows = 1;   // R
  int64_t max_context = 1;  // longest sequence (cached + new)
};
// A host step of `shape` (token ids 0, every block table pointing at block 0): the first
// sequence takes all tokens but one per other sequence, each reaches max_context. The largest
// activations, attention work and block tables a step of that shape can have: what a
// measuring dry run (Context::dry_run) runs.
StepInput step_of_shape(const StepShape& shape, int64_t block_size);

// The step on the device: views into one i32 buffer.
struct StepBatch {
  TensorView ids, positions, slot_mapping;  // [T] i32
  TensorView logit_rows;                    // [R] i32
  ops::PagedBatch attn;                     // cu_q, context_lens, block_tables + host bounds
  // MoE routing, [L, T, k] i32 expert ids by layer and token (dense layers' rows unused; host
  // memory, as the MoE ops are the CPU's). routing_replay: each MoE layer uses these experts
  // instead of its own top-k, a token whose first id is -1 routing itself (routing replay:
  // the trainer takes the engine's choices). routing_record: each MoE layer writes the experts
  // it used. routing_chosen (with replay): each MoE layer's own top-k. Empty: none of these.
  TensorView routing_replay, routing_record, routing_chosen;
  int64_t num_tokens() const { return ids.numel(); }
  int64_t num_logit_rows() const { return logit_rows.numel(); }
};

// i32 elements a StepInput takes on the device (the upload's size).
int64_t step_elements(const StepInput& in);
// i32 elements a shared-prefix description of S sequences adds to step_elements.
int64_t shared_prefix_elements(int64_t seqs);
// Packs `in` and copies it into `storage` (i32 [>= step_elements(in)] on ctx.device) as one
// host-to-device transfer; the StepBatch views point into storage. With `staging` (host i32
// [>= step_elements(in)], page-locked for a CUDA context: DeviceBuffer::pinned_host) the
// values are laid out there and the transfer is asynchronous: the caller keeps staging
// unchanged until the stream has passed the copy.
StepBatch upload_step(Context& ctx, StepInput& in, const TensorView& storage,
                      const TensorView& staging = {});

}  // namespace fp8rl
