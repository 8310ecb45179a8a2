// Continuous batching for the generation engine: which sequences compute which tokens in the
// next forward, and which KV blocks hold them. Host only; the engine runs the forward.
//
// One step, as the engine drives it:
//   StepPlan plan = scheduler.schedule();
//   engine: block copies (plan.copies) on the device, then one forward over plan.chunks
//   scheduler.commit(plan);                      // num_computed += num_new, prefix cache
//   for each chunk with num_samples > 0:         // its logits row was computed
//     num_samples == 1: append_token(seq, t)     (or finish(seq) on a stop rule)
//     num_samples == n: ids = fork(seq, n); append_token(ids[i], t_i) for each sample
//
// Policy. The token budget (max_num_batched_tokens) and max_num_seqs bound a step. Running
// sequences needing one token (decode) go first, in admission order; then running sequences
// still prefilling get chunks of what is left (chunked prefill; a chunk may shrink to the free
// blocks); then waiting sequences are admitted strictly first-in first-out: the head is
// admitted only when its whole chunk's blocks are free, and nobody overtakes it. When a decode
// needs a block and none is free, the most recently admitted running sequence is preempted by
// recompute: it releases its blocks and goes to the front of the waiting queue with
// num_computed = 0 (prompt and generated tokens are then recomputed, mostly from the prefix
// cache, and it samples again only once its last token is computed). If no running sequence
// can make progress, the most recent is preempted too, so a step never comes back empty while
// there is work: a request is only accepted when it fits the pool alone (fits_ever), and the
// oldest running sequence alone always fits.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace fp8rl {

// The value of a token appended before it was sampled (Scheduler::append_token): never a
// vocabulary id, so that a step reading it by mistake fails its input validation.
constexpr int32_t kPendingToken = -1;

struct SchedulerConfig {
  int32_t num_blocks = 0;                 // physical KV blocks in the pool
  int32_t block_size = 16;                // token slots per block
  int64_t max_num_batched_tokens = 8192;  // tokens of one forward
  int32_t max_num_seqs = 256;             // sequences of one forward (and admitted at once)
  bool prefix_caching = true;
};

// Tokens [start, start + num_new) of sequence `seq` are computed by the step.
struct ScheduledChunk {
  int64_t seq = -1;
  int64_t start = 0;  // num_computed before the step: the first position
  int64_t num_new = 0;
  // 0: the chunk ends before the sequence's last token, no logits row is needed. k > 0: the
  // row of position start + num_new - 1 is sampled k times (k > 1: the prompt of a request
  // with k samples just finished; fork it into k sequences).
  int32_t num_samples = 0;
  bool needs_logits() const { return num_samples > 0; }
};

struct StepPlan {
  int64_t step = -1;                   // commit() checks it is the plan scheduled last
  std::vector<ScheduledChunk> chunks;  // decode chunks first, then prefill chunks
  // Before the forward. Independent of each other (distinct destinations, no destination is
  // also a source), so one batched kernel may run them in any order.
  std::vector<BlockCopy> copies;
  std::vector<int64_t> preempted;  // sequences sent back to waiting by this step
  int64_t num_tokens = 0;          // sum of num_new
  bool empty() const { return chunks.empty(); }
};

struct SchedulerStats {
  int32_t blocks_used = 0, blocks_free = 0, blocks_shared = 0, blocks_cached = 0;
  int64_t prefix_hit_tokens = 0;  // tokens whose KV came from the prefix cache at admission
  int64_t preemptions = 0;
  int64_t block_copies = 0;  // copy-on-write copies planned
  int64_t num_running = 0, num_waiting = 0;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  // Whether a sequence of num_tokens tokens fits the pool on its own. A request is accepted
  // when fits_ever(prompt_len + max_tokens) (one more than the KV ever computed, a safe bound).
  bool fits_ever(int64_t num_tokens) const;
  // Queues a request's prompt as one waiting sequence that samples num_samples tokens from its
  // last prompt row; returns its id. Throws when the request can never fit the pool.
  int64_t add_request(int64_t request, std::span<const int32_t> prompt, int32_t num_samples,
                      int64_t max_tokens);

  // The next step. Every plan, an empty one too, is committed before the next schedule();
  // between them the plan's sequences and blocks must not change (no finish()).
  StepPlan schedule();
  void commit(const StepPlan& plan);
  // The token sampled for `seq` after its chunk reached its last token; kPendingToken when the
  // next step is planned before this one's samples are read (EngineOptions::async_scheduling).
  void append_token(int64_t seq, int32_t token);
  // Replaces the pending token appended last with the one sampled (the sequence may have been
  // preempted meanwhile: its tokens stay). Before the next commit(), which hashes full blocks.
  void resolve_token(int64_t seq, int32_t token);
  // Splits a sequence whose prompt just finished into its request's n samples, all sharing its
  // blocks; ids[0] == seq (sample 0), ids[i] is sample i. Append each sample's token next.
  std::vector<int64_t> fork(int64_t seq, int32_t n);
  // Ends a sequence (stop rule, max tokens, abort): its blocks are released; its tokens stay
  // readable until forget().
  void finish(int64_t seq);
  void forget(int64_t seq);  // drops a finished sequence's record

  // Needs every sequence finished (see BlockManager::set_adapter_version).
  void set_adapter_version(uint64_t version) { blocks_.set_adapter_version(version); }

  const Sequence& sequence(int64_t seq) const;
  std::span<const int32_t> block_table(int64_t seq) const { return sequence(seq).block_table; }
  const std::vector<int64_t>& running() const { return running_; }  // admission order
  const std::deque<int64_t>& waiting() const { return waiting_; }   // queue order
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  const BlockManager& block_manager() const { return blocks_; }
  const SchedulerConfig& config() const { return config_; }
  SchedulerStats stats() const;

 private:
  Sequence& get(int64_t seq);
  void preempt(int64_t seq, StepPlan& plan);
  void push_chunk(Sequence& seq, int64_t num_new, StepPlan& plan);
  void schedule_decodes(StepPlan& plan, int64_t& budget);
  void schedule_prefills(StepPlan& plan, int64_t& budget);
  void admit_waiting(StepPlan& plan, int64_t& budget);
  static void check_copies_independent(const StepPlan& plan);

  SchedulerConfig config_;
  BlockManager blocks_;
  std::unordered_map<int64_t, Sequence> seqs_;
  std::vector<int64_t> running_;  // holds blocks; admission order (fork samples after parent)
  std::deque<int64_t> waiting_;   // holds no blocks
  int64_t next_id_ = 0;
  int64_t next_step_ = 0;
  int64_t uncommitted_ = -1;  // step of the plan awaiting commit()
  int64_t prefix_hit_tokens_ = 0, preemptions_ = 0, block_copies_ = 0;
};

}  // namespace fp8rl
