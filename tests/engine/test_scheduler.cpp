// Scheduler: admission, chunked prefill, decode-first ordering, fork + copy-on-write, prefix
// reuse, preemption by recompute, and scheduling invariance of a fake deterministic model.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/check.h"
#include "engine/scheduler.h"
#include "fake_engine.h"

namespace fp8rl {
namespace {

using test::FakeEngine;
using test::FakeRequest;
using test::Outputs;
using test::run_alone;

std::vector<int32_t> counting_tokens(int32_t n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(Scheduler, RejectsARequestThatCanNeverFitThePool) {
  Scheduler s({.num_blocks = 4, .block_size = 16});
  EXPECT_TRUE(s.fits_ever(64));
  EXPECT_FALSE(s.fits_ever(65));
  const std::vector<int32_t> prompt = counting_tokens(60, 0);
  EXPECT_THROW(s.add_request(0, prompt, 1, 5), Error);
  EXPECT_EQ(s.add_request(0, prompt, 1, 4), 0);
  EXPECT_THROW(s.add_request(1, std::vector<int32_t>{}, 1, 4), Error);
}

TEST(Scheduler, ChunkedPrefillRespectsTheTokenBudget) {
  const FakeRequest r{counting_tokens(100, 0), 2, 10};
  Scheduler s({.num_blocks = 64, .block_size = 16, .max_num_batched_tokens = 32});
  FakeEngine e(s);
  e.add(0, r);
  const int64_t expect_start[] = {0, 32, 64, 96};
  const int64_t expect_new[] = {32, 32, 32, 4};
  for (int i = 0; i < 4; ++i) {
    const StepPlan plan = e.step();
    ASSERT_EQ(plan.chunks.size(), 1u);
    EXPECT_EQ(plan.chunks[0].start, expect_start[i]);
    EXPECT_EQ(plan.chunks[0].num_new, expect_new[i]);
    EXPECT_EQ(plan.chunks[0].num_samples, i == 3 ? 2 : 0);  // logits only at the prompt's end
  }
  EXPECT_EQ(s.running().size(), 2u);  // forked into its two samples
  while (s.has_work()) EXPECT_LE(e.step().num_tokens, 32);
  EXPECT_EQ(e.outputs(), run_alone({r}));
}

TEST(Scheduler, DecodesGoFirstThenPrefillChunks) {
  Scheduler s({.num_blocks = 64, .block_size = 16, .max_num_batched_tokens = 16});
  FakeEngine e(s);
  e.add(0, {counting_tokens(5, 0), 1, 20});
  StepPlan plan = e.step();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].num_samples, 1);
  const int64_t a = plan.chunks[0].seq;
  const int64_t b = e.add(1, {counting_tokens(40, 100), 1, 5});
  for (int64_t start_b : {0, 15}) {
    plan = e.step();
    ASSERT_EQ(plan.chunks.size(), 2u);
    EXPECT_EQ(plan.chunks[0].seq, a);
    EXPECT_EQ(plan.chunks[0].num_new, 1);
    EXPECT_EQ(plan.chunks[1].seq, b);
    EXPECT_EQ(plan.chunks[1].start, start_b);
    EXPECT_EQ(plan.chunks[1].num_new, 15);  // what the decode left of the budget
    EXPECT_EQ(plan.chunks[1].num_samples, 0);
  }
}

TEST(Scheduler, MaxNumSeqsBoundsAdmissionFifo) {
  Scheduler s({.num_blocks = 64, .block_size = 16, .max_num_seqs = 2});
  FakeEngine e(s);
  for (int64_t r = 0; r < 3; ++r) e.add(r, {counting_tokens(4, int32_t(10 * r)), 1, 3});
  const StepPlan plan = e.step();
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].seq, 0);
  EXPECT_EQ(plan.chunks[1].seq, 1);
  EXPECT_EQ(s.waiting().size(), 1u);
  EXPECT_EQ(s.waiting().front(), 2);
}

TEST(Scheduler, ForkSharesThePromptAndCopiesTheSharedPartialBlockOnce) {
  Scheduler s({.num_blocks = 32, .block_size = 16});
  FakeEngine e(s);
  e.add(0, {counting_tokens(20, 0), 3, 4});
  StepPlan plan = e.step();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].num_samples, 3);
  ASSERT_EQ(s.running().size(), 3u);
  const auto& t0 = s.sequence(s.running()[0]).block_table;
  for (int64_t id : s.running()) EXPECT_EQ(s.sequence(id).block_table, t0);
  EXPECT_EQ(s.stats().blocks_used, 2);
  EXPECT_EQ(s.stats().blocks_shared, 2);
  const int32_t partial = t0[1];
  plan = e.step();  // three decodes at position 20, inside the shared block [16, 32)
  ASSERT_EQ(plan.chunks.size(), 3u);
  ASSERT_EQ(plan.copies.size(), 2u);  // the third sample then owns it alone
  for (const BlockCopy& c : plan.copies) EXPECT_EQ(c.src, partial);
  EXPECT_EQ(s.stats().blocks_used, 4);
  EXPECT_EQ(s.block_manager().ref_count(t0[0]), 3);  // the full block is still shared
  e.run();
  EXPECT_EQ(e.outputs(), run_alone({{counting_tokens(20, 0), 3, 4}}));
  EXPECT_EQ(s.stats().blocks_used, 0);
}

TEST(Scheduler, IdenticalPromptReusesCachedBlocksButComputesTheLastBlock) {
  for (bool caching : {true, false}) {
    Scheduler s({.num_blocks = 32, .block_size = 16, .prefix_caching = caching});
    FakeEngine e(s);
    const FakeRequest r{counting_tokens(32, 0), 1, 1};
    e.add(0, r);
    e.run();
    e.add(1, r);
    const StepPlan plan = e.step();
    ASSERT_EQ(plan.chunks.size(), 1u);
    EXPECT_EQ(plan.chunks[0].start, caching ? 16 : 0);
    EXPECT_EQ(plan.chunks[0].num_new, caching ? 16 : 32);
    EXPECT_EQ(plan.chunks[0].num_samples, 1);
    EXPECT_EQ(s.stats().prefix_hit_tokens, caching ? 16 : 0);
    EXPECT_EQ(e.outputs().at({1, 0}), e.outputs().at({0, 0}));
  }
}

TEST(Scheduler, PreemptsTheNewestByRecomputeAndResumesItToTheSameTokens) {
  // 6 blocks = 96 slots; each request may grow to 90 tokens, so both cannot live together.
  const std::vector<FakeRequest> reqs{{counting_tokens(30, 0), 1, 60},
                                      {counting_tokens(30, 500), 1, 60}};
  Scheduler s({.num_blocks = 6, .block_size = 16, .max_num_batched_tokens = 16});
  FakeEngine e(s);
  const int64_t a = e.add(0, reqs[0]);
  const int64_t b = e.add(1, reqs[1]);
  StepPlan plan;
  for (int i = 0; i < 200 && plan.preempted.empty(); ++i) plan = e.step();
  ASSERT_EQ(plan.preempted, std::vector<int64_t>{b});  // the most recently admitted
  const Sequence& victim = s.sequence(b);
  EXPECT_EQ(victim.status, SeqStatus::waiting);
  EXPECT_EQ(victim.num_computed, 0);
  EXPECT_TRUE(victim.block_table.empty());
  EXPECT_EQ(s.waiting().front(), b);
  EXPECT_EQ(s.running(), std::vector<int64_t>{a});
  const int64_t tokens_at_preemption = victim.size();
  EXPECT_GT(victim.num_generated(), 0);
  // Recompute: chunks of the victim sample only when they reach its last token.
  while (s.has_work()) {
    plan = e.step();
    for (const ScheduledChunk& c : plan.chunks) {
      if (c.seq != b || s.sequence(b).status == SeqStatus::finished) continue;
      if (c.start + c.num_new < tokens_at_preemption) {
        EXPECT_EQ(c.num_samples, 0);
      }
    }
  }
  EXPECT_GE(s.stats().preemptions, 1);
  EXPECT_EQ(e.outputs(), run_alone(reqs));
}

TEST(Scheduler, ForkSamplesThatCannotLiveTogetherPreemptEachOther) {
  // 4 samples of up to 60 tokens (4 blocks each) in a pool of 6 blocks.
  const std::vector<FakeRequest> reqs{{counting_tokens(20, 0), 4, 40}};
  for (bool caching : {true, false}) {
    Scheduler s({.num_blocks = 6, .block_size = 16, .prefix_caching = caching});
    FakeEngine e(s);
    e.add(0, reqs[0]);
    e.run();
    EXPECT_GT(s.stats().preemptions, 0);
    EXPECT_EQ(s.stats().blocks_used, 0);
    EXPECT_EQ(e.outputs(), run_alone(reqs));
  }
}

TEST(Scheduler, ProtocolMisuseIsAnError) {
  Scheduler s({.num_blocks = 8, .block_size = 16});
  const int64_t id = s.add_request(0, counting_tokens(8, 0), 2, 4);
  StepPlan plan = s.schedule();
  EXPECT_THROW(s.schedule(), Error);           // the previous plan is not committed
  EXPECT_THROW(s.append_token(id, 1), Error);  // its last token is not computed yet
  s.commit(plan);
  EXPECT_THROW(s.append_token(id, 1), Error);  // two samples: fork first
  EXPECT_THROW(s.fork(id, 3), Error);          // wrong sample count
  const std::vector<int64_t> ids = s.fork(id, 2);
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], id);
  EXPECT_THROW(s.schedule(), Error);  // both samples await their first token
  s.append_token(ids[0], 1);
  s.append_token(ids[1], 2);
  EXPECT_THROW(s.commit(plan), Error);  // already committed
  plan = s.schedule();
  EXPECT_EQ(plan.num_tokens, 2);
}

std::vector<FakeRequest> random_requests(uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  auto rnd = [&](int64_t n) { return int64_t(rng() % uint64_t(n)); };
  const std::vector<std::vector<int32_t>> stems{counting_tokens(48, 0), counting_tokens(21, 200),
                                                counting_tokens(64, 400)};
  std::vector<FakeRequest> reqs;
  for (int i = 0; i < count; ++i) {
    FakeRequest r;
    if (rnd(2) == 0) {  // half share a stem (GRPO prompts share a system prompt)
      const auto& stem = stems[size_t(rnd(3))];
      r.prompt.assign(stem.begin(), stem.begin() + 1 + rnd(int64_t(stem.size())));
    }
    for (int64_t k = rnd(40); k >= 0; --k) r.prompt.push_back(int32_t(900 + rnd(50)));
    r.num_samples = int32_t(1 + rnd(4));
    r.max_tokens = 1 + rnd(48);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// Requests arrive a few per step into a small pool; returns what came out.
Outputs simulate(const SchedulerConfig& config, const std::vector<FakeRequest>& reqs,
                 bool drop_copies, SchedulerStats* stats) {
  Scheduler s(config);
  FakeEngine e(s);
  e.drop_copies = drop_copies;
  size_t next = 0;
  for (int64_t step = 0; step < 100000 && (next < reqs.size() || s.has_work()); ++step) {
    for (int k = 0; k < 3 && next < reqs.size(); ++k, ++next) e.add(int64_t(next), reqs[next]);
    const StepPlan plan = e.step();
    EXPECT_LE(plan.num_tokens, config.max_num_batched_tokens);
    EXPECT_LE(int64_t(plan.chunks.size()), config.max_num_seqs);
    EXPECT_TRUE(!plan.empty() || !s.has_work()) << "empty step with work left";
  }
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(s.stats().blocks_used, 0);
  s.block_manager().validate();
  if (stats) *stats = s.stats();
  return e.outputs();
}

class SchedulingInvariance : public ::testing::TestWithParam<uint64_t> {};

TEST_P(SchedulingInvariance, FakeModelUnderPressureMatchesEachRequestAlone) {
  const std::vector<FakeRequest> reqs = random_requests(GetParam(), 60);
  const Outputs alone = run_alone(reqs);
  size_t samples = 0;
  for (const FakeRequest& r : reqs) samples += size_t(r.num_samples);
  ASSERT_EQ(alone.size(), samples);
  const SchedulerConfig configs[] = {
      {.num_blocks = 40, .block_size = 16, .max_num_batched_tokens = 64, .max_num_seqs = 16},
      {.num_blocks = 40,
       .block_size = 16,
       .max_num_batched_tokens = 20,
       .max_num_seqs = 4,
       .prefix_caching = false},
      {.num_blocks = 12, .block_size = 16, .max_num_batched_tokens = 2048, .max_num_seqs = 64},
      {.num_blocks = 300, .block_size = 16, .max_num_batched_tokens = 512, .max_num_seqs = 256},
  };
  for (const SchedulerConfig& c : configs) {
    SCOPED_TRACE(::testing::Message()
                 << "pool " << c.num_blocks << " budget " << c.max_num_batched_tokens << " caching "
                 << c.prefix_caching);
    SchedulerStats st;
    EXPECT_EQ(simulate(c, reqs, false, &st), alone);
    EXPECT_GT(st.block_copies, 0);
    if (c.prefix_caching) {
      EXPECT_GT(st.prefix_hit_tokens, 0);
    }
    if (c.num_blocks <= 40 && c.max_num_seqs >= 16) {
      EXPECT_GT(st.preemptions, 0);  // the pool was really short
    }
  }
  // Negative control: skipping the copy-on-write copies changes the tokens.
  EXPECT_NE(simulate(configs[0], reqs, true, nullptr), alone);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulingInvariance, ::testing::Values(42, 43, 44));

TEST(Scheduler, AdapterVersionChangeNeverReusesOldKv) {
  const std::vector<FakeRequest> reqs = random_requests(7, 20);
  Scheduler s({.num_blocks = 40, .block_size = 16, .max_num_batched_tokens = 64});
  FakeEngine e(s);  // one simulated KV pool across both versions, as on the device
  for (size_t r = 0; r < reqs.size(); ++r) e.add(int64_t(r), reqs[r]);
  e.run();
  const Outputs v0 = e.outputs();
  EXPECT_EQ(v0, run_alone(reqs, 0));
  e.set_adapter(1);
  const int64_t hits_before = s.stats().prefix_hit_tokens;
  for (size_t r = 0; r < reqs.size(); ++r) e.add(int64_t(r), reqs[r]);
  e.run();
  const Outputs v1 = e.outputs();
  EXPECT_EQ(v1, run_alone(reqs, 1));
  EXPECT_NE(v1, v0);  // the fake model depends on the adapter, so stale KV would show
  EXPECT_GT(s.stats().prefix_hit_tokens, hits_before);  // version 1 still reuses its own KV
}

}  // namespace
}  // namespace fp8rl
