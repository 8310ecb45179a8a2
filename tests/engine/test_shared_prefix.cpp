// The host-side grouping of a decode step's shared prefixes (engine/shared_prefix.h).
#include "engine/shared_prefix.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/arena.h"

namespace fp8rl {
namespace {

constexpr int64_t kPrefixBlock = 16;

// A decode row per (table, tokens in the cache after the step).
struct Row {
  std::vector<int32_t> table;
  int64_t context;
};

StepInput decode_step(const std::vector<Row>& rows) {
  StepInput in;
  for (const Row& r : rows) {
    const int32_t token = 1;
    in.add_sequence({&token, 1}, r.context - 1, r.table, kPrefixBlock, StepInput::Logits::last);
  }
  in.pack_block_tables();
  describe_shared_prefixes(in, kPrefixBlock);
  return in;
}

// The groups as (members, prefix tokens), checked against the capacity layout on the way.
std::vector<std::pair<std::vector<int32_t>, int32_t>> groups_of(const StepInput& in) {
  const size_t seqs = size_t(in.num_seqs());
  EXPECT_TRUE(in.has_prefixes);
  EXPECT_EQ(in.prefix_cu_members.size(), seqs / 2 + 1);
  EXPECT_EQ(in.prefix_members.size(), seqs);
  EXPECT_EQ(in.prefix_lens.size(), seqs / 2);
  EXPECT_EQ(in.prefix_len_of_seq.size(), seqs);
  EXPECT_EQ(in.prefix_cu_members[0], 0);
  std::vector<std::pair<std::vector<int32_t>, int32_t>> out;
  std::vector<int32_t> len_of_seq(seqs, 0);
  for (size_t g = 0; g + 1 < in.prefix_cu_members.size(); ++g) {
    const int32_t m0 = in.prefix_cu_members[g], m1 = in.prefix_cu_members[g + 1];
    EXPECT_LE(m0, m1);
    if (m0 == m1) {  // the unused tail: empty groups of length 0 only
      EXPECT_EQ(in.prefix_lens[g], 0);
      continue;
    }
    EXPECT_TRUE(out.size() == g) << "an empty group before a real one";
    std::vector<int32_t> members(in.prefix_members.begin() + m0, in.prefix_members.begin() + m1);
    for (int32_t s : members) len_of_seq[size_t(s)] = in.prefix_lens[g];
    out.emplace_back(members, in.prefix_lens[g]);
  }
  EXPECT_EQ(len_of_seq, in.prefix_len_of_seq);
  return out;
}

using Groups = std::vector<std::pair<std::vector<int32_t>, int32_t>>;

TEST(SharedPrefix, ForkedSamplesShareTheirFullPromptBlocks) {
  // Four samples of a 3.3-block prompt, 5 tokens into their private copy of the last block.
  std::vector<Row> rows;
  for (int32_t i = 0; i < 4; ++i) rows.push_back({{10, 11, 12, 20 + i}, 3 * kPrefixBlock + 5});
  EXPECT_EQ(groups_of(decode_step(rows)), (Groups{{{0, 1, 2, 3}, int32_t(3 * kPrefixBlock)}}));
}

TEST(SharedPrefix, UnrelatedSequencesFormNoGroup) {
  const StepInput in =
      decode_step({{{1, 2, 3}, 40}, {{4, 5, 6}, 40}, {{7, 8}, 20}, {{9, 10, 11}, 40}});
  EXPECT_EQ(groups_of(in), Groups{});
  EXPECT_EQ(in.prefix_cu_members, (std::vector<int32_t>{0, 0, 0}));
}

TEST(SharedPrefix, StopsAtTheFirstDifferingBlock) {
  EXPECT_EQ(groups_of(decode_step({{{1, 2, 3, 4}, 60}, {{1, 2, 5, 6}, 60}})),
            (Groups{{{0, 1}, int32_t(2 * kPrefixBlock)}}));
}

TEST(SharedPrefix, StopsBeforeTheBlockOfThePosition) {
  // Both tables hold blocks 1, 2, 3; the query at position 39 sits in the third (a partial
  // block written this step), so only the first two are shared.
  EXPECT_EQ(groups_of(decode_step({{{1, 2, 3}, 40}, {{1, 2, 3}, 40}})),
            (Groups{{{0, 1}, int32_t(2 * kPrefixBlock)}}));
  // Position 32 is the first slot of block 2: blocks 1 and 2 lie below it (0..31).
  EXPECT_EQ(groups_of(decode_step({{{1, 2, 3}, 33}, {{1, 2, 3}, 33}})),
            (Groups{{{0, 1}, int32_t(2 * kPrefixBlock)}}));
  // Position 31 is the last slot of the second block: only the first lies below it.
  EXPECT_EQ(groups_of(decode_step({{{1, 2, 3}, 32}, {{1, 2, 3}, 32}})),
            (Groups{{{0, 1}, int32_t(kPrefixBlock)}}));
  // Position 15 is inside the first block: no prefix at all.
  EXPECT_EQ(groups_of(decode_step({{{1, 2, 3}, 16}, {{1, 2, 3}, 16}})), Groups{});
}

TEST(SharedPrefix, StopsAtTheShortestMember) {
  EXPECT_EQ(groups_of(decode_step({{{1, 2, 3, 4, 5, 6, 7}, 100}, {{1, 2, 3, 4}, 40}})),
            (Groups{{{0, 1}, int32_t(2 * kPrefixBlock)}}));
}

TEST(SharedPrefix, SplitsPromptsThatShareOnlyTheirFirstBlocks) {
  // Prompts A (3 samples) and B (2) share a template block 1, then differ; C shares block 1
  // alone and runs per sequence; D is unrelated. Rows interleaved.
  const StepInput in = decode_step({
      {{1, 2, 3, 40}, 3 * kPrefixBlock + 2},  // A
      {{1, 5, 6, 50}, 3 * kPrefixBlock + 2},  // B
      {{1, 7, 8, 9}, 4 * kPrefixBlock},       // C
      {{1, 2, 3, 41}, 3 * kPrefixBlock + 2},  // A
      {{30, 31}, 2 * kPrefixBlock},           // D
      {{1, 5, 6, 51}, 3 * kPrefixBlock + 2},  // B
      {{1, 2, 3, 42}, 3 * kPrefixBlock + 2},  // A
  });
  EXPECT_EQ(groups_of(in),
            (Groups{{{0, 3, 6}, int32_t(3 * kPrefixBlock)}, {{1, 5}, int32_t(3 * kPrefixBlock)}}));
  EXPECT_EQ(in.prefix_len_of_seq[2], 0);
  EXPECT_EQ(in.prefix_len_of_seq[4], 0);
}

TEST(SharedPrefix, KeepsTheCommonPartWhenEveryPartIsAlone) {
  // Three prompts sharing two blocks, one sample each: one group of the two blocks.
  EXPECT_EQ(groups_of(decode_step({{{1, 2, 3}, 45}, {{1, 2, 4}, 45}, {{1, 2, 5}, 45}})),
            (Groups{{{0, 1, 2}, int32_t(2 * kPrefixBlock)}}));
}

TEST(SharedPrefix, PrefillChunksAndPaddingAreNeverGrouped) {
  StepInput in;
  const std::vector<int32_t> table{1, 2, 3, 4};
  const std::vector<int32_t> tokens(8, 1);
  in.add_sequence({tokens.data(), 8}, 40, table, kPrefixBlock, StepInput::Logits::last);  // a chunk
  in.add_sequence({tokens.data(), 1}, 47, table, kPrefixBlock, StepInput::Logits::last);
  in.add_padding_sequence(99);
  in.add_padding_sequence(99);
  in.pack_block_tables();
  describe_shared_prefixes(in, kPrefixBlock);
  EXPECT_EQ(groups_of(in), Groups{});
}

TEST(SharedPrefix, FillsTheCapacityOfTheBatch) {
  // 5 sequences: capacity 2 groups; one group of 2 and the padding of a 5-row batch.
  StepInput in;
  const int32_t token = 1;
  for (const std::vector<int32_t>& t :
       {std::vector<int32_t>{3, 4, 5}, std::vector<int32_t>{3, 4, 6}})
    in.add_sequence({&token, 1}, 39, t, kPrefixBlock, StepInput::Logits::last);
  for (int i = 0; i < 3; ++i) in.add_padding_sequence(99);
  in.pack_block_tables();
  describe_shared_prefixes(in, kPrefixBlock);
  EXPECT_EQ(groups_of(in), (Groups{{{0, 1}, int32_t(2 * kPrefixBlock)}}));
  EXPECT_EQ(in.prefix_cu_members, (std::vector<int32_t>{0, 2, 2}));
  EXPECT_EQ(in.prefix_lens, (std::vector<int32_t>{int32_t(2 * kPrefixBlock), 0}));
}

TEST(SharedPrefix, DropsGroupsBelowTheMinimumPrefix) {
  // Two prompts' samples: one over 3 shared blocks, one over 1; a minimum of 2 blocks keeps
  // the first group only, a minimum of 4 neither, 0 both.
  auto step = [](int64_t min_tokens) {
    StepInput in;
    const int32_t token = 1;
    for (const std::vector<int32_t>& t :
         {std::vector<int32_t>{1, 2, 3, 10}, std::vector<int32_t>{1, 2, 3, 11},
          std::vector<int32_t>{5, 20, 21, 22}, std::vector<int32_t>{5, 30, 31, 32}})
      in.add_sequence({&token, 1}, 4 * kPrefixBlock - 1, t, kPrefixBlock, StepInput::Logits::last);
    in.pack_block_tables();
    describe_shared_prefixes(in, kPrefixBlock, min_tokens);
    return groups_of(in);
  };
  EXPECT_EQ(step(0),
            (Groups{{{0, 1}, int32_t(3 * kPrefixBlock)}, {{2, 3}, int32_t(kPrefixBlock)}}));
  EXPECT_EQ(step(2 * kPrefixBlock), (Groups{{{0, 1}, int32_t(3 * kPrefixBlock)}}));
  EXPECT_EQ(step(4 * kPrefixBlock), Groups{});
}

TEST(SharedPrefix, UploadedWithTheStep) {
  // The description travels in the step's one upload, at sizes fixed by S.
  Arena arena;
  Context ctx{Device::cpu, &arena};
  std::vector<Row> rows;
  for (int32_t i = 0; i < 3; ++i) rows.push_back({{10, 11, 20 + i}, 2 * kPrefixBlock + 1});
  StepInput in = decode_step(rows);
  std::vector<int32_t> storage(size_t(step_elements(in)), -7);
  const StepBatch b =
      upload_step(ctx, in, TensorView(storage.data(), DType::i32, {int64_t(storage.size())}));
  ASSERT_TRUE(b.attn.has_prefixes());
  EXPECT_EQ(b.attn.prefix_cu_members.numel(), 2);
  EXPECT_EQ(b.attn.prefix_members.numel(), 3);
  EXPECT_EQ(b.attn.prefix_lens.numel(), 1);
  EXPECT_EQ(b.attn.prefix_lens.ptr<int32_t>()[0], int32_t(2 * kPrefixBlock));
  const int32_t* len_of_seq = b.attn.prefix_len_of_seq.ptr<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(len_of_seq, len_of_seq + 3), in.prefix_len_of_seq);
  // Without a description the step is smaller and the batch has none.
  StepInput plain;
  for (const Row& r : rows) {
    const int32_t token = 1;
    plain.add_sequence({&token, 1}, r.context - 1, r.table, kPrefixBlock, StepInput::Logits::last);
  }
  plain.pack_block_tables();
  EXPECT_EQ(step_elements(plain) + shared_prefix_elements(3), step_elements(in));
  std::vector<int32_t> storage2(size_t(step_elements(plain)), 0);
  const StepBatch b2 =
      upload_step(ctx, plain, TensorView(storage2.data(), DType::i32, {int64_t(storage2.size())}));
  EXPECT_FALSE(b2.attn.has_prefixes());
}

}  // namespace
}  // namespace fp8rl
