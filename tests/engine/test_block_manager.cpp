// BlockManager: reference counts, copy-on-write, the prefix cache and its eviction order, and a
// model check of the invariants under random operation sequences.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "core/check.h"
#include "engine/block_manager.h"

namespace fp8rl {
namespace {

constexpr int32_t kBs = 16;

Sequence make_seq(int64_t id, std::vector<int32_t> tokens) {
  Sequence s;
  s.id = id;
  s.prompt_len = int64_t(tokens.size());
  s.tokens = std::move(tokens);
  return s;
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Admits seq (prefix match + adoption) and computes all its tokens.
void compute_all(BlockManager& bm, Sequence& seq) {
  bm.adopt_prefix(seq, bm.match_prefix(seq));
  std::vector<BlockCopy> copies;
  bm.allocate_slots(seq, seq.num_remaining(), copies);
  EXPECT_TRUE(copies.empty());
  seq.num_computed = seq.size();
  bm.register_computed(seq);
}

TEST(BlockManager, ForkSharesBlocksAndCowCopiesOnlyThePartialBlock) {
  BlockManager bm(32, kBs, true);
  Sequence parent = make_seq(0, iota_tokens(40, 100));  // 2 full blocks + 8 tokens
  compute_all(bm, parent);
  ASSERT_EQ(parent.block_table.size(), 3u);
  std::vector<Sequence> seqs{parent};
  for (int64_t k = 1; k < 4; ++k) {
    seqs.push_back(make_seq(k, parent.tokens));
    seqs.back().num_computed = parent.num_computed;
    bm.fork(parent, seqs.back());
  }
  for (const Sequence& s : seqs) EXPECT_EQ(s.block_table, parent.block_table);
  for (int32_t b : parent.block_table) EXPECT_EQ(bm.ref_count(b), 4);
  EXPECT_EQ(bm.num_shared(), 3);
  EXPECT_EQ(bm.num_used(), 3);

  // Each sample appends its first token at position 40, inside the shared partial block.
  std::vector<BlockCopy> copies;
  for (Sequence& s : seqs) {
    s.tokens.push_back(int32_t(s.id));
    EXPECT_EQ(bm.blocks_needed(s, 1), bm.ref_count(s.block_table[2]) > 1 ? 1 : 0);
    bm.allocate_slots(s, 1, copies);
  }
  // The first three copy the partial block; the last is then its only owner and writes it.
  ASSERT_EQ(copies.size(), 3u);
  for (const BlockCopy& c : copies) EXPECT_EQ(c.src, parent.block_table[2]);
  EXPECT_EQ(seqs[3].block_table, parent.block_table);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(seqs[k].block_table[2], copies[k].dst);
    EXPECT_EQ(bm.ref_count(copies[k].dst), 1);
  }
  for (const Sequence& s : seqs) {  // full blocks stay shared, never copied
    EXPECT_EQ(s.block_table[0], parent.block_table[0]);
    EXPECT_EQ(s.block_table[1], parent.block_table[1]);
  }
  EXPECT_EQ(bm.ref_count(parent.block_table[0]), 4);
  EXPECT_EQ(bm.ref_count(parent.block_table[2]), 1);
  EXPECT_EQ(bm.num_used(), 6);
  for (Sequence& s : seqs) bm.free_sequence(s);
  EXPECT_EQ(bm.num_free(), 32);
  bm.validate();
}

TEST(BlockManager, ForkOfBlockAlignedPromptCopiesNothing) {
  BlockManager bm(16, kBs, true);
  Sequence parent = make_seq(0, iota_tokens(32, 0));
  compute_all(bm, parent);
  Sequence child = make_seq(1, parent.tokens);
  child.num_computed = parent.num_computed;
  bm.fork(parent, child);
  std::vector<BlockCopy> copies;
  for (Sequence* s : {&parent, &child}) {
    s->tokens.push_back(5);
    bm.allocate_slots(*s, 1, copies);
  }
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(parent.block_table.size(), 3u);
  EXPECT_NE(parent.block_table[2], child.block_table[2]);
  EXPECT_EQ(bm.num_used(), 4);
}

TEST(BlockManager, PrefixCacheHitsIdenticalFullBlocksOnly) {
  BlockManager bm(32, kBs, true);
  Sequence a = make_seq(0, iota_tokens(40, 0));  // blocks: [0,16) [16,32) partial [32,40)
  compute_all(bm, a);
  EXPECT_EQ(bm.num_cached(), 2);  // the partial block is never cached
  EXPECT_TRUE(bm.is_cached(a.block_table[0]));
  EXPECT_FALSE(bm.is_cached(a.block_table[2]));

  // Same 32-token prefix, other suffix: both full blocks hit.
  std::vector<int32_t> tb = iota_tokens(32, 0);
  for (int32_t t : iota_tokens(20, 500)) tb.push_back(t);
  Sequence b = make_seq(1, tb);
  PrefixMatch m = bm.match_prefix(b);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.blocks[0], a.block_table[0]);
  EXPECT_EQ(m.blocks[1], a.block_table[1]);
  EXPECT_EQ(m.num_free, 0);
  bm.adopt_prefix(b, m);
  EXPECT_EQ(b.num_computed, 32);
  EXPECT_EQ(bm.ref_count(a.block_table[0]), 2);

  // A's exact tokens: its partial third block is not cached, so only 2 blocks hit.
  Sequence c = make_seq(2, a.tokens);
  EXPECT_EQ(bm.match_prefix(c).blocks.size(), 2u);

  // The chain names the whole prefix: a different first block misses the second too.
  std::vector<int32_t> td = a.tokens;
  td[3] = 999;
  Sequence d = make_seq(3, td);
  EXPECT_TRUE(bm.match_prefix(d).blocks.empty());
  // A second block of equal content after another first block is not a hit either.
  std::vector<int32_t> te = iota_tokens(16, 700);
  for (int32_t t : iota_tokens(24, 16)) te.push_back(t);
  Sequence e = make_seq(4, te);
  EXPECT_TRUE(bm.match_prefix(e).blocks.empty());
  bm.validate();
}

TEST(BlockManager, WholePromptHitLeavesTheLastBlockToCompute) {
  BlockManager bm(32, kBs, true);
  Sequence a = make_seq(0, iota_tokens(32, 0));
  compute_all(bm, a);
  EXPECT_EQ(bm.num_cached(), 2);
  Sequence b = make_seq(1, a.tokens);  // the whole prompt is cached
  PrefixMatch m = bm.match_prefix(b);
  ASSERT_EQ(m.blocks.size(), 1u);  // the last block is recomputed so its logits exist
  bm.adopt_prefix(b, m);
  EXPECT_EQ(b.num_computed, 16);
  EXPECT_EQ(b.num_remaining(), 16);
  std::vector<BlockCopy> copies;
  bm.allocate_slots(b, 16, copies);
  EXPECT_TRUE(copies.empty());
  EXPECT_NE(b.block_table[1], a.block_table[1]);  // a fresh block, not the cached one
  EXPECT_EQ(bm.ref_count(a.block_table[1]), 1);
  // One token prompt: nothing can be reused.
  Sequence one = make_seq(2, {0});
  EXPECT_TRUE(bm.match_prefix(one).blocks.empty());
}

TEST(BlockManager, AdapterVersionSeparatesCachedKv) {
  BlockManager bm(32, kBs, true);
  Sequence a = make_seq(0, iota_tokens(48, 0));
  compute_all(bm, a);
  const std::vector<int32_t> at = a.block_table;
  EXPECT_THROW(bm.set_adapter_version(1), Error);  // blocks in use
  bm.free_sequence(a);
  Sequence b = make_seq(1, a.tokens);
  EXPECT_EQ(bm.match_prefix(b).blocks.size(), 2u);  // same version: hit (the control)
  bm.set_adapter_version(1);
  EXPECT_TRUE(bm.match_prefix(b).blocks.empty());  // KV of version 0 is not reused
  compute_all(bm, b);
  EXPECT_EQ(b.num_computed, 48);
  EXPECT_EQ(bm.num_cached(), 6);  // 3 full blocks of version 1 next to 3 of version 0
  bm.free_sequence(b);
  bm.set_adapter_version(0);
  Sequence c = make_seq(2, a.tokens);
  const PrefixMatch m = bm.match_prefix(c);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.blocks[0], at[0]);  // version 0's blocks survived the detour
  EXPECT_EQ(m.blocks[1], at[1]);
  EXPECT_EQ(m.num_free, 2);
  bm.validate();
}

TEST(BlockManager, FreedCachedBlocksLiveUntilReallocatedLeastRecentlyFreedFirst) {
  BlockManager bm(6, kBs, true);
  Sequence a = make_seq(0, iota_tokens(33, 0));  // 2 full blocks + 1 token
  compute_all(bm, a);
  const std::vector<int32_t> at = a.block_table;
  bm.free_sequence(a);
  EXPECT_EQ(bm.num_free(), 6);
  Sequence b = make_seq(1, iota_tokens(33, 0));
  PrefixMatch m = bm.match_prefix(b);
  ASSERT_EQ(m.blocks.size(), 2u);  // free, but still cached
  EXPECT_EQ(m.num_free, 2);
  // Uncached blocks go out first (4 of them, including a's partial block), then the cached
  // ones, the prefix's tail (freed first) before its head.
  for (int i = 0; i < 4; ++i) {
    const int32_t got = bm.allocate();
    EXPECT_NE(got, at[0]);
    EXPECT_NE(got, at[1]);
  }
  EXPECT_EQ(bm.match_prefix(b).blocks.size(), 2u);
  EXPECT_EQ(bm.allocate(), at[1]);
  EXPECT_FALSE(bm.is_cached(at[1]));
  m = bm.match_prefix(b);
  ASSERT_EQ(m.blocks.size(), 1u);
  EXPECT_EQ(m.blocks[0], at[0]);
  bm.validate();
  EXPECT_EQ(bm.allocate(), at[0]);
  EXPECT_THROW(bm.allocate(), Error);  // pool exhausted
}

TEST(BlockManager, EvictsTheLeastRecentlyFreedSequenceFirst) {
  BlockManager bm(4, kBs, true);
  Sequence x = make_seq(0, iota_tokens(32, 0)), y = make_seq(1, iota_tokens(32, 100));
  compute_all(bm, x);
  compute_all(bm, y);
  bm.free_sequence(x);
  bm.free_sequence(y);
  bm.allocate();
  bm.allocate();  // x's blocks go
  EXPECT_TRUE(bm.match_prefix(make_seq(2, iota_tokens(33, 0))).blocks.empty());
  EXPECT_EQ(bm.match_prefix(make_seq(3, iota_tokens(33, 100))).blocks.size(), 2u);
}

TEST(BlockManager, SlotOfAPositionGoesThroughTheBlockTable) {
  Sequence s = make_seq(0, iota_tokens(40, 0));
  s.block_table = {7, 2, 5};
  EXPECT_EQ(s.slot(0, kBs), 7 * 16);
  EXPECT_EQ(s.slot(15, kBs), 7 * 16 + 15);
  EXPECT_EQ(s.slot(16, kBs), 2 * 16);
  EXPECT_EQ(s.slot(39, kBs), 5 * 16 + 7);
}

TEST(BlockManager, PrefixCachingOffNeverHits) {
  BlockManager bm(16, kBs, false);
  Sequence a = make_seq(0, iota_tokens(48, 0));
  compute_all(bm, a);
  EXPECT_EQ(bm.num_cached(), 0);
  EXPECT_TRUE(bm.match_prefix(make_seq(1, a.tokens)).blocks.empty());
}

TEST(BlockManager, MaxNewTokensMatchesBlocksNeeded) {
  BlockManager bm(16, kBs, true);
  Sequence a = make_seq(0, iota_tokens(20, 0));
  compute_all(bm, a);  // 2 blocks, 12 free slots in the second
  a.tokens.resize(200, 3);
  EXPECT_EQ(bm.max_new_tokens(a, 0, 100), 12);
  EXPECT_EQ(bm.max_new_tokens(a, 2, 100), 44);
  EXPECT_EQ(bm.max_new_tokens(a, 2, 30), 30);
  Sequence b = make_seq(1, a.tokens);
  b.tokens.resize(20);
  b.num_computed = 20;
  bm.fork(a, b);  // the second block is now shared: appending costs a copy first
  EXPECT_EQ(bm.max_new_tokens(a, 0, 100), 0);
  EXPECT_EQ(bm.max_new_tokens(a, 1, 100), 12);
}

// Random operations on a set of sequences; after every one the manager's state must agree with
// the block tables: ref(b) == entries referencing b, free <=> unreferenced, and the simulated KV
// read through each table equals what that sequence computed.
TEST(BlockManager, RandomOperationsKeepInvariants) {
  for (bool caching : {true, false}) {
    std::mt19937_64 rng(caching ? 1 : 2);
    const int32_t num_blocks = 24;
    BlockManager bm(num_blocks, kBs, caching);
    std::vector<uint64_t> kv(size_t(num_blocks) * kBs, 0);
    std::map<int64_t, Sequence> live;
    int64_t next_id = 0;
    int64_t hits = 0, copies_seen = 0, forks = 0;
    auto rnd = [&](int64_t n) { return int64_t(rng() % uint64_t(n)); };
    auto expected_kv = [&](const Sequence& s, int64_t p) {
      uint64_t h = 0;
      for (int64_t q = 0; q <= p; ++q) h = h * 1000003u + uint64_t(s.tokens[q]) + 1;
      return h;
    };
    auto compute = [&](Sequence& s, int64_t n) {
      std::vector<BlockCopy> copies;
      bm.allocate_slots(s, n, copies);
      for (const BlockCopy& c : copies)
        std::copy_n(kv.begin() + c.src * kBs, kBs, kv.begin() + c.dst * kBs);
      copies_seen += int64_t(copies.size());
      for (int64_t p = s.num_computed; p < s.num_computed + n; ++p)
        kv[size_t(s.block_table[p / kBs]) * kBs + p % kBs] = expected_kv(s, p);
      s.num_computed += n;
      bm.register_computed(s);
    };
    // A few shared stems so prompts share prefixes.
    const std::vector<std::vector<int32_t>> stems{iota_tokens(40, 0), iota_tokens(16, 300),
                                                  iota_tokens(33, 600)};
    for (int op = 0; op < 4000; ++op) {
      const int64_t kind = rnd(10);
      if (kind <= 2) {  // admit a new sequence and compute a first chunk
        std::vector<int32_t> tokens;
        if (rnd(3) > 0) {
          const auto& stem = stems[size_t(rnd(3))];
          tokens.assign(stem.begin(), stem.begin() + 1 + rnd(int64_t(stem.size())));
        }
        for (int64_t i = rnd(20); i >= 0; --i) tokens.push_back(int32_t(1000 + rnd(4)));
        Sequence s = make_seq(next_id++, tokens);
        const PrefixMatch m = bm.match_prefix(s);
        const int64_t n = 1 + rnd(s.size() - m.num_tokens(kBs));
        const int64_t need =
            bm.blocks_for(m.num_tokens(kBs) + n) - int64_t(m.blocks.size()) + m.num_free;
        if (need > bm.num_free()) continue;
        bm.adopt_prefix(s, m);
        hits += m.num_tokens(kBs);
        compute(s, n);
        live.emplace(s.id, std::move(s));
      } else if (!live.empty()) {
        auto it = live.begin();
        std::advance(it, rnd(int64_t(live.size())));
        Sequence& s = it->second;
        if (kind <= 5) {  // compute more (appending a token when all are computed)
          if (s.num_remaining() == 0) s.tokens.push_back(int32_t(rnd(50)));
          const int64_t n = bm.max_new_tokens(s, bm.num_free(), 1 + rnd(s.num_remaining()));
          if (n > 0) compute(s, n);
        } else if (kind <= 7) {  // fork
          if (s.num_remaining() != 0) continue;
          Sequence c = make_seq(next_id++, s.tokens);
          c.num_computed = s.num_computed;
          bm.fork(s, c);
          ++forks;
          live.emplace(c.id, std::move(c));
        } else {  // finish or preempt: both release every block
          bm.free_sequence(s);
          live.erase(it);
        }
      }
      if (live.empty() && rnd(4) == 0) bm.set_adapter_version(uint64_t(rnd(2)));

      bm.validate();
      std::vector<int32_t> refs(num_blocks, 0);
      for (const auto& [id, s] : live) {
        ASSERT_EQ(int64_t(s.block_table.size()), bm.blocks_for(s.num_computed)) << id;
        for (int32_t b : s.block_table) ++refs[b];
        for (int64_t p = 0; p < s.num_computed; ++p)
          ASSERT_EQ(kv[size_t(s.block_table[p / kBs]) * kBs + p % kBs], expected_kv(s, p))
              << "op " << op << " sequence " << id << " position " << p;
      }
      int32_t free_count = 0;
      for (int32_t b = 0; b < num_blocks; ++b) {
        ASSERT_EQ(bm.ref_count(b), refs[b]) << "op " << op << " block " << b;
        ASSERT_EQ(bm.is_free(b), refs[b] == 0);
        free_count += refs[b] == 0;
      }
      ASSERT_EQ(bm.num_free(), free_count);
    }
    // The random walk exercised what it checks.
    EXPECT_GT(copies_seen, 0);
    EXPECT_GT(forks, 0);
    if (caching) {
      EXPECT_GT(hits, 0);
    } else {
      EXPECT_EQ(hits, 0);
    }
  }
}

}  // namespace
}  // namespace fp8rl
