// Training Qwen3-MoE with LoRA on the attention projections and the experts, the router
// frozen: the backward runs through each MoE layer's experts and its routing weights' softmax
// (ops::moe_experts_backward, ops::moe_route_backward; their finite-difference checks with
// negative controls are in tests/ops/test_backward.cpp). Here the whole pass: its LoRA
// gradients against central differences of its own loss, checkpointing equal to saving, and
// expert adapters through PEFT's files.
// Routing replay: the engine records each token's experts, and the trainer's pass uses them
// where its own top-k would differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "engine/engine.h"
#include "formats/safetensors.h"
#include "model/adapter.h"
#include "model/model_test_util.h"
#include "model/presets.h"
#include "ops/backward.h"
#include "train/logprob_pass.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;

struct TinyMoeDir {
  std::string dir;
  TinyMoeDir() {
    dir = (fs::temp_directory_path() / ("fp8rl_moe_train_" + std::to_string(::getpid()))).string();
    nlohmann::json c = preset_config_json("qwen3-moe-tiny");
    c["initializer_range"] = 0.1;  // routing decided by clear margins
    write_random_checkpoint(c, dir, 11);
  }
  ~TinyMoeDir() { fs::remove_all(dir); }
};

const std::string& tiny_dir() {
  static const TinyMoeDir d;
  return d.dir;
}

struct Batch {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0, 7, 16};
  PackedSequences packed() const { return {ids, targets, cu}; }
};

Batch make_batch(int64_t vocab) {
  Batch b;
  for (int32_t i = 0; i < 16; ++i) {
    b.ids.push_back((i * 37 + 5) % int32_t(vocab));
    b.targets.push_back(i == 6 || i == 15 ? ops::kIgnoreIndex : (i * 53 + 2) % int32_t(vocab));
  }
  return b;
}

// sum_t dl * logprob[t] (dl = -0.1 per target), and optionally its LoRA gradients.
double pass_loss(const Model& m, const LoraAdapter& a, const Batch& b, bool checkpointing,
                 std::vector<float>* grads) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  LogprobPass pass(ctx, m, &a);
  PassOptions o;
  o.checkpointing = checkpointing;
  pass.forward(b.packed(), o);
  double loss = 0.0;
  std::vector<float> dl(b.ids.size(), 0.0f);
  for (size_t t = 0; t < b.ids.size(); ++t)
    if (b.targets[t] != ops::kIgnoreIndex) {
      dl[t] = -0.1f;
      loss += double(dl[t]) * double(pass.logprobs()[t]);
    }
  if (grads != nullptr) {
    grads->assign(size_t(a.master_params().numel()), 0.0f);
    pass.backward(dl, TensorView(grads->data(), DType::f32, {int64_t(grads->size())}));
  }
  return loss;
}

// The largest |g[i]| and |g[i] - central difference| over the picked adapter parameters
// (step 1e-3 on the master weight, the f32 pass without checkpointing).
std::pair<double, double> check_by_differences(const Model& m, LoraAdapter& a, const Batch& b,
                                               const std::vector<float>& g,
                                               const std::vector<size_t>& picked) {
  const double h = 1e-3;
  double max_g = 0.0, max_err = 0.0;
  float* v = a.master_params().ptr<float>();
  for (size_t i : picked) {
    const float v0 = v[i];
    v[i] = v0 + float(h);
    const double lp = pass_loss(m, a, b, false, nullptr);
    v[i] = v0 - float(h);
    const double lm = pass_loss(m, a, b, false, nullptr);
    v[i] = v0;
    const double fd = (lp - lm) / (double(v0 + float(h)) - double(v0 - float(h)));
    max_g = std::max(max_g, std::fabs(double(g[i])));
    max_err = std::max(max_err, std::fabs(fd - double(g[i])));
  }
  return {max_g, max_err};
}

LoraAdapter attention_adapter(const Model& m) {
  LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj"};
  LoraAdapter a = LoraAdapter::init(lc, m, 5);
  const TensorView p = a.master_params();
  for (int64_t i = 0; i < p.numel(); ++i)
    p.ptr<float>()[i] += 0.05f * std::sin(float(i));  // B != 0
  return a;
}

TEST(MoeTraining, AttentionLoraGradientsMatchFiniteDifferences) {
  const Model m = test::load_model(tiny_dir());
  ASSERT_TRUE(m.config().layers[0].moe && !m.config().layers[1].moe);
  LoraAdapter a = attention_adapter(m);
  const Batch b = make_batch(m.config().vocab_size);
  std::vector<float> g;
  pass_loss(m, a, b, false, &g);
  // Checkpointing recomputes the layers (the MoE routing included): the same gradients.
  std::vector<float> g_ckpt;
  pass_loss(m, a, b, true, &g_ckpt);
  EXPECT_EQ(g, g_ckpt);
  // The 6 largest gradients of layer 0 (whose MLP is the MoE block every gradient of it
  // passes through) and of layer 1, against central differences of the f32 pass (a few, as
  // each is two passes: the suite also runs under ASan).
  const TensorView p = a.master_params();
  std::vector<size_t> order(g.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return std::fabs(g[x]) > std::fabs(g[y]); });
  const size_t layer0_end = size_t(a.slice(p, 1, 0, false).ptr<float>() - p.ptr<float>());
  std::vector<size_t> picked;
  for (const bool first : {true, false}) {
    size_t n = 0;
    for (size_t i : order)
      if ((i < layer0_end) == first && n < 6) {
        picked.push_back(i);
        ++n;
      }
  }
  // Error: the f32 loss's rounding (~1e-7 of |loss| ~ 1, over 2h: ~1e-4) plus the truncation
  // h^2/6 |L'''|; measured 3e-4 of the largest gradient (0.75). A missing term of the MoE
  // backward moves layer 0's gradients by O(10%) (the op tests' negative controls).
  const auto [max_g, max_err] = check_by_differences(m, a, b, g, picked);
  std::printf("max |grad| %.3g, max |grad - fd| %.3g\n", max_g, max_err);
  EXPECT_GT(max_g, 1e-4);
  EXPECT_LE(max_err, 1e-2 * max_g);
}

// LoRA on the experts too (PEFT's per-expert modules, A and B stacked per expert): the pass's
// expert gradients against central differences, and the adapter through PEFT's files.
TEST(MoeTraining, ExpertLoraGradientsMatchFiniteDifferencesAndRoundTripPeft) {
  const Model m = test::load_model(tiny_dir());
  LoraConfig lc;
  lc.r = 2;
  lc.lora_alpha = 4;
  lc.target_modules = {"q_proj", "gate_proj", "up_proj", "down_proj"};
  LoraAdapter a = LoraAdapter::init(lc, m, 9);
  ASSERT_EQ(a.experts(0, 6), 4);  // layer 0's experts
  ASSERT_EQ(a.experts(1, 6), 0);  // layer 1's dense MLP
  const TensorView p = a.master_params();
  for (int64_t i = 0; i < p.numel(); ++i) p.ptr<float>()[i] += 0.05f * std::sin(float(i));
  const Batch b = make_batch(m.config().vocab_size);
  std::vector<float> g;
  pass_loss(m, a, b, false, &g);
  // The 4 largest gradients of each expert projection's A and B of layer 0.
  std::vector<size_t> picked;
  for (int proj = 4; proj < 7; ++proj)
    for (const bool is_b : {false, true}) {
      const TensorView v = a.slice(p, 0, proj, is_b);
      const size_t first = size_t(v.ptr<float>() - p.ptr<float>());
      std::vector<size_t> idx(size_t(v.numel()));
      std::iota(idx.begin(), idx.end(), first);
      std::partial_sort(idx.begin(), idx.begin() + 4, idx.end(),
                        [&](size_t x, size_t y) { return std::fabs(g[x]) > std::fabs(g[y]); });
      picked.insert(picked.end(), idx.begin(), idx.begin() + 4);
    }
  const auto [max_g, max_err] = check_by_differences(m, a, b, g, picked);
  std::printf("experts: max |grad| %.3g, max |grad - fd| %.3g\n", max_g, max_err);
  EXPECT_GT(max_g, 1e-4);
  EXPECT_LE(max_err, 1e-2 * max_g);  // the bound of the attention test above
  // PEFT's files: one module per expert, read back to the same masters.
  const std::string dir = tiny_dir() + "_adapter";
  a.save_peft(dir, "tiny");
  const Checkpoint files = Checkpoint::open(dir + "/adapter_model.safetensors");
  EXPECT_TRUE(
      files.contains("base_model.model.model.layers.0.mlp.experts.3.up_proj.lora_A.weight"));
  EXPECT_TRUE(files.contains("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight"));
  const LoraAdapter back = LoraAdapter::load_peft(dir, m);
  ASSERT_EQ(back.master_params().numel(), p.numel());
  EXPECT_EQ(std::memcmp(back.master_params().data, p.data, p.nbytes()), 0);
  fs::remove_all(dir);
}

// The engine generates with the experts' adapters as the trainer's pass computes them: each
// sampled token's logprob equal bit for bit on the CPU (negative control: the base model's).
TEST(MoeTraining, EngineAndPassAgreeWithExpertLora) {
  const Model m = test::load_model(tiny_dir());
  LoraConfig lc;
  lc.r = 2;
  lc.lora_alpha = 4;
  lc.target_modules = {"gate_proj", "up_proj", "down_proj"};
  LoraAdapter a = LoraAdapter::init(lc, m, 4);
  const TensorView p = a.master_params();
  for (int64_t i = 0; i < p.numel(); ++i) p.ptr<float>()[i] += 0.05f * std::sin(float(i));
  Arena arena;
  Context ctx{Device::cpu, &arena};
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.max_num_batched_tokens = 64;
  GenerationRequest req;
  req.prompt_ids = {5, 17, 200, 3, 99};
  req.params.max_tokens = 6;
  req.params.ignore_eos = true;
  req.params.seed = 1;
  req.params.processed_logprobs = true;
  CompletionOutput c;
  {
    Engine engine(ctx, m, &a, nullptr, {}, eo);
    c = engine.generate({&req, 1})[0].completions[0];
  }
  Batch b;
  b.cu = {0};
  const size_t prompt = req.prompt_ids.size();
  b.ids = req.prompt_ids;
  b.ids.insert(b.ids.end(), c.ids.begin(), c.ids.end() - 1);
  for (size_t i = 0; i < b.ids.size(); ++i)
    b.targets.push_back(i + 1 < prompt ? ops::kIgnoreIndex : c.ids[i + 1 - prompt]);
  b.cu.push_back(int64_t(b.ids.size()));
  const auto logprobs = [&](const LoraAdapter* adapter) {
    Arena pa;
    Context pc{Device::cpu, &pa};
    LogprobPass pass(pc, m, adapter);
    pass.forward(b.packed(), PassOptions{});
    return std::vector<float>(pass.logprobs().begin() + int64_t(prompt) - 1, pass.logprobs().end());
  };
  EXPECT_EQ(logprobs(&a), c.processed_logprobs);
  EXPECT_NE(logprobs(nullptr), c.processed_logprobs);
}

// (token, MoE layer) choices of [positions, L, k] routing whose expert sets differ between a
// and b (the order within a set does not change the output: experts are summed by index).
int64_t differing_choices(const Model& m, std::span<const int32_t> a, std::span<const int32_t> b,
                          int64_t positions) {
  const int64_t layers = m.config().num_layers, k = m.config().moe.top_k;
  int64_t n = 0;
  for (int64_t i = 0; i < positions; ++i)
    for (int64_t l = 0; l < layers; ++l) {
      if (!m.config().layers[size_t(l)].moe) continue;
      std::vector<int32_t> x(a.begin() + (i * layers + l) * k,
                             a.begin() + (i * layers + l + 1) * k);
      std::vector<int32_t> y(b.begin() + (i * layers + l) * k,
                             b.begin() + (i * layers + l + 1) * k);
      std::sort(x.begin(), x.end());
      std::sort(y.begin(), y.end());
      n += x != y;
    }
  return n;
}

TEST(MoeRoutingReplay, TrainerUsesTheEnginesExpertsWhereItsOwnWouldDiffer) {
  const Model m = test::load_model(tiny_dir());
  const int64_t layers = m.config().num_layers, k = m.config().moe.top_k;
  LoraAdapter a = attention_adapter(m);
  // The engine samples two completions and records their routing.
  Arena arena;
  Context ctx{Device::cpu, &arena};
  EngineOptions eo;
  eo.max_num_seqs = 4;
  eo.max_num_batched_tokens = 64;
  eo.record_routing = true;
  GenerationRequest req;
  req.prompt_ids = {5, 17, 200, 3, 99, 42, 7};
  req.params.n = 2;
  req.params.max_tokens = 8;
  req.params.ignore_eos = true;
  req.params.seed = 3;
  std::vector<RequestOutput> out;
  {
    Engine engine(ctx, m, &a, nullptr, {}, eo);
    out = engine.generate({&req, 1});
  }
  // Packed for the trainer: prompt + completion but its last token, whose routing the engine
  // never computed (-1).
  Batch b;
  b.cu = {0};
  std::vector<int32_t> engine_routing;
  for (const CompletionOutput& c : out[0].completions) {
    const int64_t positions = int64_t(req.prompt_ids.size() + c.ids.size());
    ASSERT_EQ(int64_t(c.routing.size()), positions * layers * k);
    EXPECT_TRUE(std::all_of(c.routing.end() - layers * k, c.routing.end(),
                            [](int32_t e) { return e == -1; }));
    b.ids.insert(b.ids.end(), req.prompt_ids.begin(), req.prompt_ids.end());
    b.ids.insert(b.ids.end(), c.ids.begin(), c.ids.end() - 1);
    for (size_t i = 0; i < req.prompt_ids.size() + c.ids.size() - 1; ++i)
      b.targets.push_back(i + 1 < req.prompt_ids.size() ? ops::kIgnoreIndex
                                                        : c.ids[i + 1 - req.prompt_ids.size()]);
    engine_routing.insert(engine_routing.end(), c.routing.begin(), c.routing.end() - layers * k);
    b.cu.push_back(int64_t(b.ids.size()));
  }
  const int64_t t = int64_t(b.ids.size());
  LogprobPass::ReplayChanges changes;  // of the last replaying pass
  const auto pass_routing = [&](bool replay, std::vector<float>* logprobs) {
    Arena pa;
    Context pc{Device::cpu, &pa};
    LogprobPass pass(pc, m, &a);
    PassOptions o;
    o.record_routing = true;
    PackedSequences batch = b.packed();
    if (replay) batch.routing = engine_routing;
    pass.forward(batch, o);
    if (logprobs != nullptr) logprobs->assign(pass.logprobs().begin(), pass.logprobs().end());
    if (replay) changes = pass.replay_changes();
    return std::vector<int32_t>(pass.routing().begin(), pass.routing().end());
  };
  // The same adapter: the trainer chooses as the engine did (CPU forwards are bit-identical).
  EXPECT_EQ(differing_choices(m, pass_routing(false, nullptr), engine_routing, t), 0);
  pass_routing(true, nullptr);
  EXPECT_EQ(changes.changed, 0);
  EXPECT_EQ(changes.replayed, t);  // every token of the one MoE layer
  // An update of the adapter (as after an optimizer step, off-policy micro-batches) large
  // enough to flip some top-k choice: the negative control, without replay they differ.
  const TensorView p = a.master_params();
  const std::vector<float> start(p.ptr<float>(), p.ptr<float>() + p.numel());
  int64_t flipped = 0;
  for (const float scale : {0.02f, 0.05f, 0.1f, 0.2f, 0.5f, 1.0f}) {
    for (int64_t i = 0; i < p.numel(); ++i)
      p.ptr<float>()[i] = start[size_t(i)] + scale * std::cos(float(i) * 0.37f);
    flipped = differing_choices(m, pass_routing(false, nullptr), engine_routing, t);
    if (flipped > 0) break;
  }
  ASSERT_GT(flipped, 0) << "no perturbation flipped a top-k choice";
  std::printf("without replay %ld of %ld MoE choices differ from the engine's\n", long(flipped),
              long(t));
  // With replay the trainer's layers use the engine's experts, every one.
  std::vector<float> lp_replay, lp_own;
  EXPECT_EQ(differing_choices(m, pass_routing(true, &lp_replay), engine_routing, t), 0);
  // What routing/replay_fraction_changed counts: the flips the trainer's own top-k makes.
  EXPECT_EQ(changes.changed, flipped);
  EXPECT_EQ(changes.replayed, t);
  pass_routing(false, &lp_own);
  EXPECT_NE(lp_replay, lp_own);  // the replayed experts change the computation
}

}  // namespace
}  // namespace fp8rl
