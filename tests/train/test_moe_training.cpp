// Training Qwen3-MoE with LoRA on the attention projections, the router and experts frozen:
// the backward runs through each MoE layer's experts and its routing weights' softmax
// (ops::moe_experts_backward, ops::moe_route_backward; their finite-difference checks with
// negative controls are in tests/ops/test_backward.cpp). Here the whole pass: its LoRA
// gradients against central differences of its own loss, and checkpointing equal to saving.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

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
  // The 12 largest gradients of layer 0 (whose MLP is the MoE block every gradient of it
  // passes through) and of layer 1, against central differences of the f32 pass.
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
      if ((i < layer0_end) == first && n < 12) {
        picked.push_back(i);
        ++n;
      }
  }
  // Error: the f32 loss's rounding (~1e-7 of |loss| ~ 1, over 2h: ~1e-4) plus the truncation
  // h^2/6 |L'''|; measured 3e-4 of the largest gradient (0.75). A missing term of the MoE
  // backward moves layer 0's gradients by O(10%) (the op tests' negative controls).
  const double h = 1e-3;
  double max_g = 0.0, max_err = 0.0;
  float* v = p.ptr<float>();
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
  std::printf("max |grad| %.3g, max |grad - fd| %.3g\n", max_g, max_err);
  EXPECT_GT(max_g, 1e-4);
  EXPECT_LE(max_err, 1e-2 * max_g);
}

}  // namespace
}  // namespace fp8rl
