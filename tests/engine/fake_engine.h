// A stand-in for the generation engine that drives a Scheduler the way the real one does, with
// a deterministic fake model over a simulated paged KV pool:
//   KV of position p  = H(KV of position p - 1 read through the block table, token p, p, adapter)
//   logits state      = H(every KV slot of positions 0..p read through the block table)
//   sampled token     = H(state, sample index) % vocab
// so a sampled token depends on every slot the sequence reads. A missing block copy, a block
// shared with a sequence that writes it, or a prefix-cache block of other content or another
// adapter changes the tokens. Every write also checks that no other live sequence maps the
// block.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "engine/scheduler.h"

namespace fp8rl::test {

struct FakeRequest {
  std::vector<int32_t> prompt;
  int32_t num_samples = 1;
  int64_t max_tokens = 1;
};

// (request, sample) -> prompt and generated tokens
using Outputs = std::map<std::pair<int64_t, int32_t>, std::vector<int32_t>>;

inline uint64_t mix(uint64_t a, uint64_t b) {
  return splitmix64(a ^ splitmix64(b));
}

class FakeEngine {
 public:
  static constexpr int32_t kVocab = 1000;
  static constexpr int32_t kStop = 7;  // a sampled kStop ends the sample (a stop rule)

  FakeEngine(Scheduler& s, uint64_t adapter = 0)
      : s_(s),
        adapter_(adapter),
        kv_(size_t(s.config().num_blocks) * s.config().block_size, 0xdeadbeefull) {}

  bool drop_copies = false;  // the negative control: ignore the plan's copy-on-write

  // A new adapter: later forwards compute other KV; outputs restart.
  void set_adapter(uint64_t adapter) {
    s_.set_adapter_version(adapter);
    adapter_ = adapter;
    outputs_.clear();
  }

  int64_t add(int64_t request, const FakeRequest& r) {
    max_tokens_[request] = r.max_tokens;
    return s_.add_request(request, r.prompt, r.num_samples, r.max_tokens);
  }

  // One schedule / forward / commit / sample round; returns the plan for inspection.
  StepPlan step() {
    StepPlan plan = s_.schedule();
    const int32_t bs = s_.config().block_size;
    // The copies are independent (one batched kernel may run them in any order): no block is
    // both a source and a destination, destinations are distinct. Run them backwards to show it.
    for (const BlockCopy& c : plan.copies) {
      EXPECT_EQ(std::count_if(plan.copies.begin(), plan.copies.end(),
                              [&](const BlockCopy& o) { return o.src == c.dst; }),
                0)
          << "block " << c.dst << " is a copy source and destination in step " << plan.step;
      EXPECT_EQ(std::count_if(plan.copies.begin(), plan.copies.end(),
                              [&](const BlockCopy& o) { return o.dst == c.dst; }),
                1);
    }
    if (!drop_copies)
      for (auto c = plan.copies.rbegin(); c != plan.copies.rend(); ++c)
        std::copy_n(kv_.begin() + int64_t(c->src) * bs, bs, kv_.begin() + int64_t(c->dst) * bs);
    std::vector<std::pair<int64_t, uint64_t>> rows;  // (seq, state) to sample from
    for (const ScheduledChunk& c : plan.chunks) {
      const Sequence& seq = s_.sequence(c.seq);
      EXPECT_EQ(c.start, seq.num_computed);
      for (int64_t p = c.start; p < c.start + c.num_new; ++p) {
        check_exclusive(seq, p);
        const uint64_t prev = p == 0 ? 0 : kv_[slot(seq, p - 1)];
        kv_[slot(seq, p)] = mix(mix(prev, uint64_t(seq.tokens[p])), mix(uint64_t(p), adapter_));
        ++writes_;
      }
      if (c.needs_logits()) {
        uint64_t state = 0;
        for (int64_t p = 0; p < c.start + c.num_new; ++p) state = mix(state, kv_[slot(seq, p)]);
        rows.push_back({c.seq, state});
      }
    }
    s_.commit(plan);
    for (const ScheduledChunk& c : plan.chunks) {
      if (!c.needs_logits()) continue;
      const uint64_t state = std::find_if(rows.begin(), rows.end(), [&](const auto& r) {
                               return r.first == c.seq;
                             })->second;
      const std::vector<int64_t> ids =
          c.num_samples > 1 ? s_.fork(c.seq, c.num_samples) : std::vector<int64_t>{c.seq};
      for (int64_t id : ids) {
        const Sequence& seq = s_.sequence(id);
        const int32_t token = int32_t(mix(state, uint64_t(seq.sample)) % kVocab);
        s_.append_token(id, token);
        if (token == kStop || seq.num_generated() == max_tokens_.at(seq.request)) {
          outputs_[{seq.request, seq.sample}] = seq.tokens;
          s_.finish(id);
        }
      }
    }
    return plan;
  }

  // Steps until no work is left; fails the test instead of looping forever.
  void run(int64_t max_steps = 100000) {
    for (int64_t i = 0; i < max_steps && s_.has_work(); ++i) step();
    EXPECT_FALSE(s_.has_work()) << "no completion within " << max_steps << " steps";
  }

  const Outputs& outputs() const { return outputs_; }
  int64_t writes() const { return writes_; }

 private:
  int64_t slot(const Sequence& seq, int64_t p) const {
    const int32_t bs = s_.config().block_size;
    EXPECT_LT(p / bs, int64_t(seq.block_table.size())) << "sequence " << seq.id << " pos " << p;
    return seq.slot(p, bs);
  }

  // The block written at position p belongs to seq alone.
  void check_exclusive(const Sequence& seq, int64_t p) {
    const int32_t block = seq.block_table[p / s_.config().block_size];
    EXPECT_EQ(s_.block_manager().ref_count(block), 1) << "write into shared block " << block;
    for (int64_t other : s_.running()) {
      if (other == seq.id) continue;
      const auto& table = s_.sequence(other).block_table;
      EXPECT_EQ(std::count(table.begin(), table.end(), block), 0)
          << "sequence " << seq.id << " writes block " << block << " that sequence " << other
          << " reads";
    }
  }

  Scheduler& s_;
  uint64_t adapter_;
  std::vector<uint64_t> kv_;  // [num_blocks * block_size] simulated KV per slot
  std::map<int64_t, int64_t> max_tokens_;
  Outputs outputs_;
  int64_t writes_ = 0;
};

// Each request run alone in a pool with room for everything, prefix caching off.
inline Outputs run_alone(const std::vector<FakeRequest>& requests, uint64_t adapter = 0) {
  Outputs all;
  for (size_t r = 0; r < requests.size(); ++r) {
    Scheduler s({.num_blocks = 4096, .block_size = 16, .prefix_caching = false});
    s.set_adapter_version(adapter);
    FakeEngine e(s, adapter);
    e.add(int64_t(r), requests[r]);
    e.run();
    all.insert(e.outputs().begin(), e.outputs().end());
  }
  return all;
}

}  // namespace fp8rl::test
