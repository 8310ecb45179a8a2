// Activation offloading: with checkpointing, each layer's checkpointed input
// waits in host memory between the forward and the backward and the device keeps two [T, H]
// buffers. The gradients equal those of plain checkpointing bit for bit; the plan moves the
// inputs from the pass arena to host memory.
#include <gtest/gtest.h>

#include <cmath>

#include "model/adapter.h"
#include "model/model_test_util.h"
#include "ops/backward.h"
#include "train/logprob_pass.h"

namespace fp8rl {
namespace {

struct PassResult {
  std::vector<float> logprobs, grads;
  PassPlan plan;
};

PassResult run_pass(const Model& m, const LoraAdapter& adapter, const PackedSequences& batch,
                    bool offload) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  LogprobPass pass(ctx, m, &adapter);
  PassOptions o;
  o.checkpointing = true;
  o.offload = offload;
  PassResult r;
  r.plan = pass.plan(batch, o);
  pass.forward(batch, o);
  r.logprobs.assign(pass.logprobs().begin(), pass.logprobs().end());
  r.grads.assign(size_t(adapter.master_params().numel()), 0.0f);
  pass.backward(std::vector<float>(batch.ids.size(), -0.01f),
                TensorView(r.grads.data(), DType::f32, {int64_t(r.grads.size())}));
  return r;
}

TEST(ActivationOffloading, GivesTheGradientsOfCheckpointing) {
  // The demo model has 4 layers: with 2 device buffers, layers 0 and 1 are overwritten in the
  // forward and must come back from the host copies for the recompute.
  Model m = test::load_model(FP8RL_SOURCE_DIR "/examples/demo/model", Fp8Scheme::row);
  ASSERT_GE(m.config().num_layers, 3);
  LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"all-linear"};
  LoraAdapter adapter = LoraAdapter::init(lc, m, 3);
  const TensorView p = adapter.master_params();
  for (int64_t i = 0; i < p.numel(); ++i)
    p.ptr<float>()[i] += 0.02f * std::sin(float(i));  // B != 0
  std::vector<int32_t> ids, targets;
  for (int32_t i = 0; i < 29; ++i) {
    ids.push_back((i * 7 + 3) % int32_t(m.config().vocab_size));
    targets.push_back(i % 5 == 0 ? ops::kIgnoreIndex
                                 : (i * 11 + 1) % int32_t(m.config().vocab_size));
  }
  const std::vector<int64_t> cu{0, 13, 29};
  const PackedSequences batch{ids, targets, cu};
  const PassResult ckpt = run_pass(m, adapter, batch, false);
  const PassResult off = run_pass(m, adapter, batch, true);
  EXPECT_EQ(off.logprobs, ckpt.logprobs);
  EXPECT_EQ(off.grads, ckpt.grads);
  // Control: the gradients are not trivially equal (they depend on every layer's input).
  EXPECT_TRUE(std::any_of(off.grads.begin(), off.grads.end(), [](float g) { return g != 0.0f; }));
  // The plan: L inputs of [T, H] f32 in host memory, L - 2 fewer in the pass arena.
  const size_t row = size_t(ids.size() * m.config().hidden_size) * sizeof(float);
  const size_t layers = size_t(m.config().num_layers);
  EXPECT_EQ(ckpt.plan.host_bytes, 0u);
  EXPECT_GE(off.plan.host_bytes, layers * row);
  EXPECT_LE(off.plan.saved_bytes + (layers - 2) * row, ckpt.plan.saved_bytes);
}

TEST(ActivationOffloading, NeedsCheckpointing) {
  Model m = test::load_model(FP8RL_SOURCE_DIR "/examples/demo/model", Fp8Scheme::row);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  LogprobPass pass(ctx, m, nullptr);
  const std::vector<int32_t> ids{1, 2, 3}, targets{2, 3, ops::kIgnoreIndex};
  const std::vector<int64_t> cu{0, 3};
  PassOptions o;
  o.offload = true;
  EXPECT_THROW(pass.forward({ids, targets, cu}, o), Error);
}

}  // namespace
}  // namespace fp8rl
