#include "engine/block_manager.h"

#include <algorithm>

#include "core/check.h"
#include "core/rng.h"

namespace fp8rl {

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching), blocks_(size_t(num_blocks)) {
  CHECK(num_blocks > 0, "the KV pool needs at least one block, got {}", num_blocks);
  CHECK(block_size > 0, "block size must be positive, got {}", block_size);
  for (int32_t b = 0; b < num_blocks; ++b) blocks_[b].free_pos = free_.insert(free_.end(), b);
}

void BlockManager::check_block(int32_t block) const {
  CHECK(block >= 0 && block < num_blocks(), "block id {} outside the pool of {}", block,
        num_blocks());
}

int32_t BlockManager::ref_count(int32_t block) const {
  check_block(block);
  return blocks_[block].ref;
}

bool BlockManager::is_cached(int32_t block) const {
  check_block(block);
  return blocks_[block].cached;
}

void BlockManager::set_adapter_version(uint64_t version) {
  CHECK(num_used() == 0 || version == adapter_version_,
        "the adapter version changes while {} KV blocks are in use: finish or preempt every "
        "sequence first",
        num_used());
  adapter_version_ = version;
}

uint64_t BlockManager::block_key(uint64_t parent, std::span<const int32_t> tokens) const {
  uint64_t h = splitmix64(parent ^ 0x6b76626c6f636b31ull);
  h = splitmix64(h ^ adapter_version_);
  for (int32_t t : tokens) h = splitmix64(h ^ uint64_t(uint32_t(t)));
  return h;
}

int32_t BlockManager::lookup(uint64_t key, uint64_t parent, std::span<const int32_t> tokens) const {
  const auto it = cache_.find(key);
  if (it == cache_.end()) return -1;
  const Block& b = blocks_[it->second];
  const bool same = b.parent == parent && b.version == adapter_version_ &&
                    std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end());
  return same ? it->second : -1;
}

void BlockManager::uncache(int32_t block) {
  Block& b = blocks_[block];
  if (!b.cached) return;
  const auto it = cache_.find(b.key);
  if (it != cache_.end() && it->second == block) cache_.erase(it);
  b.cached = false;
  b.tokens.clear();
}

int32_t BlockManager::allocate() {
  CHECK(!free_.empty(), "no free KV block (pool of {})", num_blocks());
  const int32_t block = free_.front();
  free_.pop_front();
  uncache(block);  // its old content is about to be overwritten
  blocks_[block].ref = 1;
  return block;
}

void BlockManager::retain(int32_t block) {
  check_block(block);
  Block& b = blocks_[block];
  if (b.ref == 0) free_.erase(b.free_pos);
  num_shared_ += b.ref == 1;
  ++b.ref;
}

void BlockManager::release(int32_t block) {
  check_block(block);
  Block& b = blocks_[block];
  CHECK(b.ref > 0, "block {} released more often than referenced", block);
  num_shared_ -= b.ref == 2;
  if (--b.ref > 0) return;
  // Blocks with nothing to reuse go out first; cached ones in the order they were freed.
  b.free_pos = b.cached ? free_.insert(free_.end(), block) : free_.insert(free_.begin(), block);
}

PrefixMatch BlockManager::match_prefix(const Sequence& seq) const {
  PrefixMatch match;
  if (!prefix_caching_) return match;
  // At least the last token stays to compute: its logits row is what the step is for.
  const int64_t limit = (seq.size() - 1) / block_size_;
  uint64_t parent = 0;
  for (int64_t i = 0; i < limit; ++i) {
    const std::span<const int32_t> tokens(seq.tokens.data() + i * block_size_, size_t(block_size_));
    const uint64_t key = block_key(parent, tokens);
    const int32_t block = lookup(key, parent, tokens);
    if (block < 0) break;
    match.blocks.push_back(block);
    match.hashes.push_back(key);
    match.num_free += blocks_[block].ref == 0;
    parent = key;
  }
  return match;
}

void BlockManager::adopt_prefix(Sequence& seq, const PrefixMatch& match) {
  CHECK(seq.block_table.empty() && seq.num_computed == 0,
        "sequence {} adopts a cached prefix while holding blocks", seq.id);
  for (int32_t block : match.blocks) {
    CHECK(blocks_[block].cached, "block {} left the prefix cache before adoption", block);
    retain(block);
  }
  seq.block_table = match.blocks;
  seq.block_hashes = match.hashes;
  seq.num_computed = match.num_tokens(block_size_);
}

int32_t BlockManager::blocks_needed(const Sequence& seq, int64_t num_new) const {
  if (num_new <= 0) return 0;
  const int64_t first = seq.num_computed / block_size_;
  const int64_t last = (seq.num_computed + num_new - 1) / block_size_;
  int32_t n = 0;
  for (int64_t i = first; i <= last; ++i) {
    if (i < int64_t(seq.block_table.size()))
      n += blocks_[seq.block_table[i]].ref > 1;  // copy-on-write
    else
      ++n;
  }
  return n;
}

int64_t BlockManager::max_new_tokens(const Sequence& seq, int32_t num_blocks, int64_t cap) const {
  // blocks_needed is monotone in the token count: binary search the largest count that fits.
  int64_t lo = 0, hi = std::max<int64_t>(cap, 0);
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (blocks_needed(seq, mid) <= num_blocks)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

void BlockManager::allocate_slots(Sequence& seq, int64_t num_new, std::vector<BlockCopy>& copies) {
  if (num_new <= 0) return;
  const int32_t need = blocks_needed(seq, num_new);
  CHECK(need <= num_free(), "sequence {} needs {} KV blocks, {} are free", seq.id, need,
        num_free());
  const int64_t first = seq.num_computed / block_size_;
  const int64_t last = (seq.num_computed + num_new - 1) / block_size_;
  for (int64_t i = first; i <= last; ++i) {
    if (i < int64_t(seq.block_table.size())) {
      const int32_t old = seq.block_table[i];
      if (blocks_[old].ref == 1) continue;
      // Only a partial block is ever shared and written: full blocks lie before num_computed.
      CHECK(i >= int64_t(seq.block_hashes.size()), "copy-on-write of a full block {}", old);
      const int32_t fresh = allocate();
      copies.push_back({old, fresh});
      release(old);
      seq.block_table[i] = fresh;
    } else {
      CHECK(i == int64_t(seq.block_table.size()), "sequence {} block table has a gap", seq.id);
      seq.block_table.push_back(allocate());
    }
  }
}

void BlockManager::register_computed(Sequence& seq) {
  const int64_t full = seq.num_computed / block_size_;
  CHECK(full <= int64_t(seq.block_table.size()), "sequence {}: {} computed tokens, {} blocks",
        seq.id, seq.num_computed, seq.block_table.size());
  if (!prefix_caching_) return;
  for (int64_t i = int64_t(seq.block_hashes.size()); i < full; ++i) {
    const uint64_t parent = i == 0 ? 0 : seq.block_hashes[i - 1];
    const std::span<const int32_t> tokens(seq.tokens.data() + i * block_size_, size_t(block_size_));
    const uint64_t key = block_key(parent, tokens);
    seq.block_hashes.push_back(key);
    const int32_t block = seq.block_table[i];
    Block& b = blocks_[block];
    if (b.cached) {
      // Shared with a fork sibling or adopted from the cache: the same prefix, the same key.
      CHECK(b.key == key, "block {} is cached under another prefix", block);
      continue;
    }
    if (cache_.contains(key)) continue;  // the same prefix computed twice: keep the first
    b.cached = true;
    b.key = key;
    b.parent = parent;
    b.version = adapter_version_;
    b.tokens.assign(tokens.begin(), tokens.end());
    cache_.emplace(key, block);
  }
}

void BlockManager::fork(const Sequence& parent, Sequence& child) {
  CHECK(child.block_table.empty(), "fork into sequence {} that holds blocks", child.id);
  for (int32_t block : parent.block_table) retain(block);
  child.block_table = parent.block_table;
  child.block_hashes = parent.block_hashes;
}

void BlockManager::free_sequence(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) release(*it);
  seq.block_table.clear();
  seq.block_hashes.clear();
}

void BlockManager::validate() const {
  std::vector<char> listed(blocks_.size(), 0);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const int32_t b = *it;
    check_block(b);
    CHECK(!listed[b], "block {} twice in the free list", b);
    listed[b] = 1;
    CHECK(blocks_[b].ref == 0, "free-listed block {} has ref {}", b, blocks_[b].ref);
    CHECK(blocks_[b].free_pos == it, "block {} free-list position is stale", b);
  }
  for (int32_t b = 0; b < num_blocks(); ++b) {
    CHECK(blocks_[b].ref >= 0, "block {} has ref {}", b, blocks_[b].ref);
    CHECK((blocks_[b].ref == 0) == bool(listed[b]), "block {} ref {} but free-listed {}", b,
          blocks_[b].ref, bool(listed[b]));
    if (blocks_[b].cached) {
      const auto it = cache_.find(blocks_[b].key);
      CHECK(it != cache_.end() && it->second == b, "cached block {} missing from the map", b);
      CHECK(int32_t(blocks_[b].tokens.size()) == block_size_, "cached block {} not full", b);
    }
  }
  const auto shared =
      std::count_if(blocks_.begin(), blocks_.end(), [](const Block& b) { return b.ref > 1; });
  CHECK(shared == num_shared_, "{} shared blocks counted, {} found", num_shared_, shared);
  for (const auto& [key, b] : cache_) {
    check_block(b);
    CHECK(blocks_[b].cached && blocks_[b].key == key, "cache entry for block {} is stale", b);
  }
}

}  // namespace fp8rl
