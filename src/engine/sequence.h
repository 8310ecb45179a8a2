// One sequence of the generation engine as the host sees it: its tokens, how many of them have
// KV in the cache, and the physical blocks that hold that KV. The scheduler owns sequences; the
// block manager edits their block tables; the engine reads both to build a step's batch.
#pragma once

#include <cstdint>
#include <vector>

namespace fp8rl {

enum class SeqStatus {
  waiting,   // holds no blocks; queued for (re)admission, num_computed == 0
  running,   // admitted: holds the blocks of its first num_computed tokens (and of a step's)
  finished,  // blocks released; the tokens stay readable
};

struct Sequence {
  int64_t id = -1;
  int64_t request = -1;  // index of the request the sequence samples for
  int32_t sample = 0;    // which of the request's samples (0 until and through the fork)
  // Tokens to sample from the logits row of the last token: the request's n while the prompt
  // is not yet forked, 1 after. A preempted, unforked sequence keeps n, so the fork happens
  // exactly once whatever the preemptions.
  int32_t num_samples = 1;
  int64_t max_tokens = 0;       // generated tokens allowed (admission checks the pool fits them)
  std::vector<int32_t> tokens;  // prompt then generated tokens
  int64_t prompt_len = 0;
  // Tokens whose KV is in the cache (positions [0, num_computed)). A step computes
  // [num_computed, num_computed + num_new); when that reaches tokens.size() the step's logits
  // row of the last position is sampled. A decode step therefore has num_new == 1: the token
  // sampled last step is the one whose KV is computed now.
  int64_t num_computed = 0;
  // block_table[i] holds the KV of positions [i * block_size, (i + 1) * block_size).
  std::vector<int32_t> block_table;
  // Prefix-cache hash of each full block of block_table whose KV is computed, chained from
  // block 0 (block_hashes[i] names tokens [0, (i + 1) * block_size) and the adapter version).
  std::vector<uint64_t> block_hashes;
  SeqStatus status = SeqStatus::waiting;

  int64_t size() const { return int64_t(tokens.size()); }
  int64_t num_generated() const { return size() - prompt_len; }
  // Tokens still to compute before the next logits row.
  int64_t num_remaining() const { return size() - num_computed; }
  // Cache slot of position p (the forward's slot mapping): block_table[p / bs] * bs + p % bs.
  int64_t slot(int64_t p, int32_t block_size) const {
    return int64_t(block_table[size_t(p / block_size)]) * block_size + p % block_size;
  }
};

}  // namespace fp8rl
