// The KV cache's physical blocks on the host side: reference counts, the free list and the
// prefix cache. It never touches KV memory; it decides which block ids hold which positions and
// lists the block copies (copy-on-write) the engine performs on the device before a forward.
//
// A block is free when no block table references it (ref count 0). A free block may still hold
// the computed KV of a full block registered in the prefix cache: it stays findable by its hash
// until it is handed out again. The free list is ordered for that: blocks with no cached
// content are handed out first, then cached ones least recently freed first, so a prefix that
// was just released (a finished sample, a preempted sequence) is the last to be forgotten.
//
// Prefix-cache key of a full block: H(parent block's key, adapter version, its block_size
// tokens), chained from the first block, so a key names the whole prefix up to the block's end
// under one adapter version. KV computed under one adapter is never reused under another. The
// key's inputs are stored with the block and compared on lookup, so a 64-bit hash collision
// cannot hand out wrong KV.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"

namespace fp8rl {

// A device-side copy of a whole block (all layers, K and V) that must happen before the step's
// forward: the copy-on-write of a shared partial block a sequence is about to append to.
struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
  bool operator==(const BlockCopy&) const = default;
};

// The cached full blocks a sequence's tokens can start from.
struct PrefixMatch {
  std::vector<int32_t> blocks;   // physical ids, in logical order
  std::vector<uint64_t> hashes;  // their chained keys
  int32_t num_free = 0;          // of those, currently free (taking them lowers num_free())
  int64_t num_tokens(int32_t block_size) const { return int64_t(blocks.size()) * block_size; }
};

class BlockManager {
 public:
  BlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching);

  int32_t num_blocks() const { return int32_t(blocks_.size()); }
  int32_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  int32_t num_free() const { return int32_t(free_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  int32_t num_shared() const { return num_shared_; }  // blocks in more than one table entry
  int32_t num_cached() const { return int32_t(cache_.size()); }  // registered full blocks
  int32_t ref_count(int32_t block) const;
  bool is_free(int32_t block) const { return ref_count(block) == 0; }
  bool is_cached(int32_t block) const;

  // The adapter version prefix-cache keys are made under. Changing it while blocks are in use
  // would mix KV of two adapters in one live sequence, so it needs every block free. Blocks
  // cached under other versions stay (a later switch back may reuse them) but never match.
  void set_adapter_version(uint64_t version);
  uint64_t adapter_version() const { return adapter_version_; }

  // Number of blocks of `num_tokens` positions.
  int64_t blocks_for(int64_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }

  // --- Sequence-level operations (what the scheduler uses) ---

  // The longest chain of cached full blocks that seq.tokens starts with, leaving at least the
  // last token uncomputed so the forward still produces its logits row. Read-only; empty when
  // prefix caching is off.
  PrefixMatch match_prefix(const Sequence& seq) const;
  // Makes `match` the start of seq's (empty) block table: ref++ on each block, num_computed =
  // its tokens.
  void adopt_prefix(Sequence& seq, const PrefixMatch& match);
  // Fresh blocks that computing seq's next num_new tokens takes: blocks past the table's end,
  // plus a copy of the last block when it is shared (ref > 1) and is written to.
  int32_t blocks_needed(const Sequence& seq, int64_t num_new) const;
  // The most tokens (<= cap) seq can compute next with at most `num_blocks` fresh blocks.
  int64_t max_new_tokens(const Sequence& seq, int32_t num_blocks, int64_t cap) const;
  // Gives seq the slots of its next num_new tokens: copy-on-write of a shared last block
  // (appended to `copies`), then fresh blocks. Needs blocks_needed() <= num_free().
  void allocate_slots(Sequence& seq, int64_t num_new, std::vector<BlockCopy>& copies);
  // Registers seq's newly full computed blocks in the prefix cache (after num_computed grew).
  // A block whose key another block already holds stays unregistered: the first copy wins.
  void register_computed(Sequence& seq);
  // child shares every block of parent (ref++); child's table must be empty.
  void fork(const Sequence& parent, Sequence& child);
  // Releases every block of seq, last block first (so a prefix's tail is forgotten before its
  // head), and empties its table and hashes.
  void free_sequence(Sequence& seq);

  // --- Block-level operations ---

  // A free block with ref 1; its cached content (if any) is forgotten. Needs num_free() > 0.
  int32_t allocate();
  void retain(int32_t block);   // ref++ (a free block leaves the free list)
  void release(int32_t block);  // ref--; at 0 the block joins the free list

  // Key of the full block after `parent` (0 for the first block) holding `tokens`.
  uint64_t block_key(uint64_t parent, std::span<const int32_t> tokens) const;

  // Internal consistency (free list == blocks with ref 0, no duplicates, cache map <-> block
  // keys); throws fp8rl::Error on a violation. For tests; O(num_blocks).
  void validate() const;

 private:
  struct Block {
    int32_t ref = 0;
    bool cached = false;  // registered in cache_ under `key`
    uint64_t key = 0;
    // The key's inputs, compared on lookup (collision safety).
    uint64_t parent = 0;
    uint64_t version = 0;
    std::vector<int32_t> tokens;
    std::list<int32_t>::iterator free_pos;  // valid while ref == 0
  };

  int32_t lookup(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) const;
  void uncache(int32_t block);
  void check_block(int32_t block) const;

  int32_t block_size_;
  bool prefix_caching_;
  uint64_t adapter_version_ = 0;
  int32_t num_shared_ = 0;
  std::vector<Block> blocks_;
  std::list<int32_t> free_;                      // front: handed out next
  std::unordered_map<uint64_t, int32_t> cache_;  // key -> block
};

}  // namespace fp8rl
