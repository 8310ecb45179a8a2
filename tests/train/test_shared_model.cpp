// One model, one memory: the engine and the trainer read the same FP8
// weights and the same adapter tensors. The trainer's recomputed log-probabilities of the
// engine's samples equal the engine's own bit for bit on the CPU (both under the
// temperature-scaled full-vocabulary distribution), and an update of the adapter's masters reaches
// the engine's next rollout with no copy and no sync step.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine.h"
#include "model/adapter.h"
#include "model/model_test_util.h"
#include "ops/backward.h"
#include "tolerances.h"
#include "train/logprob_pass.h"

namespace fp8rl {
namespace {

using namespace test;

struct Rollout {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestOutput> outputs;
};

Rollout rollout(const Model& m, const LoraAdapter& adapter, double temperature) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  EngineOptions o;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 64;
  Engine engine(ctx, m, &adapter, nullptr, {}, o);
  engine.set_adapter_version(adapter.version());
  Rollout r;
  const std::vector<int32_t> ids = golden_ids("llama");
  r.prompts = {std::vector<int32_t>(ids.begin(), ids.begin() + 5),
               std::vector<int32_t>(ids.begin() + 7, ids.begin() + 16)};
  std::vector<GenerationRequest> requests;
  for (const auto& p : r.prompts) {
    GenerationRequest q;
    q.prompt_ids = p;
    q.params.n = 3;
    q.params.temperature = temperature;
    q.params.max_tokens = 6;
    q.params.seed = 7;
    q.params.ignore_eos = true;
    q.params.processed_logprobs = true;
    requests.push_back(q);
  }
  r.outputs = engine.generate(requests);
  return r;
}

// max |trainer - engine| over every sampled token, the trainer's pass over prompt +
// completion packed together with targets on the completion only.
double trainer_mismatch(const Model& m, const LoraAdapter& adapter, const Rollout& r,
                        float temperature) {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0};
  std::vector<float> engine_logprobs;
  for (size_t p = 0; p < r.prompts.size(); ++p)
    for (const CompletionOutput& c : r.outputs[p].completions) {
      const size_t first = ids.size();
      ids.insert(ids.end(), r.prompts[p].begin(), r.prompts[p].end());
      ids.insert(ids.end(), c.ids.begin(), c.ids.end() - 1);  // the last sample predicts nothing
      targets.resize(ids.size(), ops::kIgnoreIndex);
      for (size_t j = 0; j < c.ids.size(); ++j) {
        targets[first + r.prompts[p].size() - 1 + j] = c.ids[j];
      }
      engine_logprobs.insert(engine_logprobs.end(), c.processed_logprobs.begin(),
                             c.processed_logprobs.end());
      cu.push_back(int64_t(ids.size()));
    }
  Arena arena;
  Context ctx{Device::cpu, &arena};
  LogprobPass pass(ctx, m, &adapter);
  PassOptions o;
  o.temperature = temperature;
  pass.forward({ids, targets, cu}, o);
  double err = 0;
  size_t k = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    if (targets[t] != ops::kIgnoreIndex)
      err = std::max(err, std::fabs(double(pass.logprobs()[t]) - engine_logprobs[k++]));
  EXPECT_EQ(k, engine_logprobs.size());
  return err;
}

TEST(SharedModel, TrainerLogprobsEqualTheEngines) {
  Model m = load_model(golden_dir("llama"), Fp8Scheme::row);
  const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir("llama") + "/adapter", m);
  for (float temperature : {1.0f, 0.7f}) {
    const Rollout r = rollout(m, adapter, temperature);
    const double err = trainer_mismatch(m, adapter, r, temperature);
    // Exactly: the same batch-invariant kernels and one log-softmax (ops/cpu/log_softmax.h).
    EXPECT_EQ(err, 0.0);
    // Control: under another temperature the same tokens' logprobs differ.
    EXPECT_GT(trainer_mismatch(m, adapter, r, temperature * 1.5f), 1e-3);
  }
}

// The reference policy (GRPO's KL term, DPO) is the pass without its adapter: the logprobs of
// a pass over the model alone, bit for bit, and not the policy's (the control). The model is
// never changed, and no backward follows a reference forward.
TEST(SharedModel, ReferencePassIsTheBaseModel) {
  const Model m = load_model(golden_dir("llama"), Fp8Scheme::row);
  const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir("llama") + "/adapter", m);
  const std::vector<int32_t> ids = golden_ids("llama");
  const std::vector<int32_t> tids(ids.begin(), ids.begin() + 12);
  std::vector<int32_t> targets(tids.begin() + 1, tids.end());
  targets.push_back(ops::kIgnoreIndex);
  const std::vector<int64_t> cu{0, 5, 12};
  const PackedSequences batch{tids, targets, cu};
  Arena arena;
  Context ctx{Device::cpu, &arena};
  LogprobPass pass(ctx, m, &adapter), base(ctx, m, nullptr);
  PassOptions reference;
  reference.reference = true;
  pass.forward(batch, reference);
  const std::vector<float> ref(pass.logprobs().begin(), pass.logprobs().end());
  std::vector<float> grads(size_t(adapter.master_params().numel()), 0.0f);
  EXPECT_THROW(pass.backward(std::vector<float>(tids.size(), 1.0f),
                             TensorView(grads.data(), DType::f32, {int64_t(grads.size())})),
               Error);
  base.forward(batch, {});
  EXPECT_TRUE(std::equal(ref.begin(), ref.end(), base.logprobs().begin()));
  pass.forward(batch, {});
  double moved = 0;
  for (size_t t = 0; t + 1 < ref.size(); ++t)
    moved = std::max(moved, std::fabs(double(pass.logprobs()[t]) - ref[t]));
  EXPECT_GT(moved, 1e-3) << "the policy's logprobs are the reference's: the adapter did nothing";
}

TEST(SharedModel, AnAdapterUpdateReachesTheNextRollout) {
  Model m = load_model(golden_dir("llama"), Fp8Scheme::row);
  LoraAdapter adapter = LoraAdapter::load_peft(golden_dir("llama") + "/adapter", m);
  const Rollout before = rollout(m, adapter, 1.0f);
  // What an optimizer step does: the masters change in place, the version is bumped.
  const TensorView p = adapter.master_params();
  for (int64_t i = 0; i < p.numel(); ++i) p.ptr<float>()[i] *= 1.5f;
  adapter.mark_updated();
  const Rollout after = rollout(m, adapter, 1.0f);
  double moved = 0;
  for (size_t q = 0; q < before.outputs.size(); ++q)
    for (size_t s = 0; s < before.outputs[q].completions.size(); ++s) {
      const auto& a = before.outputs[q].completions[s];
      const auto& b = after.outputs[q].completions[s];
      moved = std::max(moved, std::fabs(double(a.processed_logprobs[0]) - b.processed_logprobs[0]));
    }
  EXPECT_GT(moved, 1e-3) << "the engine did not see the updated adapter";
  // And the trainer agrees with the engine under the new values.
  EXPECT_EQ(trainer_mismatch(m, adapter, after, 1.0f), 0.0);
}

// Standby memory: the engine's KV pool and the training pass's saved
// activations and KV take turns in one StandbyRegion. Each phase's results equal those of the
// same phase with memory of its own, bit for bit, after the other phase wrote over the region.
TEST(StandbyRegion, EngineAndTrainerTakeTurnsInOneRegion) {
  Model m = load_model(golden_dir("llama"), Fp8Scheme::row);
  const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir("llama") + "/adapter", m);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  EngineOptions o;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 64;
  o.kv_memory_bytes = 24 * KvPool::block_bytes(m.config(), ctx);
  const std::vector<int32_t> ids = golden_ids("llama");
  std::vector<GenerationRequest> requests(2);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].prompt_ids.assign(ids.begin() + int64_t(i) * 3, ids.begin() + 21);
    requests[i].params.n = 3;
    requests[i].params.max_tokens = 6;
    requests[i].params.seed = 11;
    requests[i].params.ignore_eos = true;
    requests[i].params.processed_logprobs = true;
  }
  // The training batch: the prompts packed, loss on every next token.
  std::vector<int32_t> tids(ids.begin(), ids.begin() + 21), targets(tids.begin() + 1, tids.end());
  targets.push_back(ops::kIgnoreIndex);
  const std::vector<int64_t> cu{0, 9, 21};
  const PackedSequences batch{tids, targets, cu};

  // Each phase with memory of its own.
  Engine own_engine(ctx, m, &adapter, nullptr, {}, o);
  const std::vector<RequestOutput> want = own_engine.generate(requests);
  const int64_t first_call_hits = own_engine.stats().prefix_hit_tokens;
  LogprobPass own_pass(ctx, m, &adapter);
  own_pass.forward(batch, {});
  const std::vector<float> want_logprobs(own_pass.logprobs().begin(), own_pass.logprobs().end());

  StandbyRegion region(ctx);
  LogprobPass pass(ctx, m, &adapter, &region);
  region.reserve(std::max(pass.plan(batch, {}).region_bytes(),
                          size_t(o.kv_memory_bytes) + KvPool::block_bytes(m.config(), ctx)));
  Engine engine(ctx, m, &adapter, nullptr, {}, o, &region);
  const auto same_outputs = [&](const std::vector<RequestOutput>& got) {
    for (size_t q = 0; q < want.size(); ++q)
      for (size_t s = 0; s < want[q].completions.size(); ++s) {
        EXPECT_EQ(got[q].completions[s].ids, want[q].completions[s].ids);
        EXPECT_EQ(got[q].completions[s].processed_logprobs,
                  want[q].completions[s].processed_logprobs);
      }
  };
  std::vector<float> grads(size_t(adapter.master_params().numel()), 0.0f);
  const TensorView grads_view(grads.data(), DType::f32, {int64_t(grads.size())});
  for (int round = 0; round < 2; ++round) {
    same_outputs(engine.generate(requests));
    EXPECT_NE(region.holder(), &pass);
    const std::vector<char> engine_bytes(static_cast<char*>(region.data()),
                                         static_cast<char*>(region.data()) + 4096);
    pass.forward(batch, {});
    EXPECT_EQ(region.holder(), &pass);
    EXPECT_TRUE(std::equal(want_logprobs.begin(), want_logprobs.end(), pass.logprobs().begin()));
    // Control: the pass did write where the engine's KV was (one memory, not two).
    EXPECT_FALSE(
        std::equal(engine_bytes.begin(), engine_bytes.end(), static_cast<char*>(region.data())));
    pass.backward(std::vector<float>(tids.size(), 1.0f), grads_view);
  }
  EXPECT_EQ(region.allocations(), 1);
  EXPECT_EQ(engine.stats().region_takebacks, 2);
  // The engine took the region back: the pass's saved activations are gone.
  pass.forward(batch, {});
  (void)engine.generate(requests);
  EXPECT_THROW(pass.backward(std::vector<float>(tids.size(), 1.0f), grads_view), Error);
  // Each call's prompts were in the prefix cache of the call before (same adapter version):
  // had the engine kept that cache over the pass's writes, it would have hit (and reused
  // overwritten blocks); it starts empty each time, as the engine with memory of its own
  // does on its first call.
  EXPECT_EQ(engine.stats().prefix_hit_tokens, 3 * first_call_hits);
  // Control: an engine that keeps its cache does hit on a second call.
  (void)own_engine.generate(requests);
  EXPECT_GT(own_engine.stats().prefix_hit_tokens, 2 * first_call_hits);
}

}  // namespace
}  // namespace fp8rl
