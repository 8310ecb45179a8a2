// Mixture-of-experts (Qwen3-MoE) on the CPU: the routing and expert ops against hand
// computations, a tiny random checkpoint (2 layers: one MoE layer of 4 experts with top-2, one
// dense mlp_only layer) loading from the Hub's per-expert layout and transformers 5's fused
// layout to the same logits, controls that the routing and the expert order matter, and the
// clear errors of what MoE models cannot do yet; YaRN on an MoE model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "model/adapter.h"
#include "model/merge.h"
#include "model/presets.h"
#include "model/quantize.h"
#include "model_test_util.h"
#include "ops/backward.h"
#include "ops/ops.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string moe_temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("fp8rl_moe_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

template <typename Fn>
void expect_moe_error(Fn&& fn, const std::string& fragment) {
  try {
    fn();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// The tiny Qwen3-MoE preset with weights of deviation 0.1: routing decided by clear margins.
json tiny_config() {
  json c = preset_config_json("qwen3-moe-tiny");
  c["initializer_range"] = 0.1;
  return c;
}

// Every tensor of a checkpoint as an owned copy, by name.
std::map<std::string, Tensor> read_all(const std::string& dir) {
  const Checkpoint ck = Checkpoint::open(dir);
  std::map<std::string, Tensor> t;
  for (const std::string& n : ck.names()) {
    const TensorView v = ck.view(n);
    Tensor c = Tensor::empty(v.shape, v.dtype);
    std::memcpy(c.view().data, v.data, v.nbytes());
    t[n] = c;
  }
  return t;
}

void write_all(const std::string& dir, const std::map<std::string, Tensor>& tensors,
               const json& config) {
  std::vector<std::pair<std::string, TensorView>> views;
  for (const auto& [n, t] : tensors) views.emplace_back(n, t.view());
  fs::create_directories(dir);
  write_checkpoint(dir, views);
  std::ofstream(dir + "/config.json") << config.dump(2);
}

// The Hub's per-expert checkpoint in `src` rewritten as transformers 5 fuses it:
// experts.gate_up_proj [E, 2I, H] (expert e's gate rows, then its up rows) and
// experts.down_proj [E, H, I] per MoE layer.
void write_fused(const std::string& src, const std::string& dst) {
  std::map<std::string, Tensor> t = read_all(src);
  const json config = json::parse(std::ifstream(src + "/config.json"));
  const ModelConfig c = ModelConfig::from_json(config);
  const int64_t e = c.moe.num_experts, inter = c.moe.intermediate_size, h = c.hidden_size;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.layers[size_t(l)].moe) continue;
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    Tensor gate_up = Tensor::empty({e, 2 * inter, h}, DType::bf16);
    Tensor down = Tensor::empty({e, h, inter}, DType::bf16);
    const size_t block = size_t(inter * h) * 2;
    for (int64_t x = 0; x < e; ++x) {
      const std::string q = p + std::to_string(x) + ".";
      char* gu = static_cast<char*>(gate_up.view().data) + 2 * block * size_t(x);
      std::memcpy(gu, t.at(q + "gate_proj.weight").view().data, block);
      std::memcpy(gu + block, t.at(q + "up_proj.weight").view().data, block);
      std::memcpy(static_cast<char*>(down.view().data) + block * size_t(x),
                  t.at(q + "down_proj.weight").view().data, block);
      for (const char* n : {"gate_proj.weight", "up_proj.weight", "down_proj.weight"})
        t.erase(q + n);
    }
    t[p + "gate_up_proj"] = gate_up;
    t[p + "down_proj"] = down;
  }
  write_all(dst, t, config);
}

// The tiny model, written once per test binary in both layouts.
struct TinyMoe {
  std::string hub, fused;
  TinyMoe() : hub(moe_temp_dir("hub")), fused(moe_temp_dir("fused")) {
    write_random_checkpoint(tiny_config(), hub, 7);
    write_fused(hub, fused);
  }
  ~TinyMoe() {
    fs::remove_all(hub);
    fs::remove_all(fused);
  }
};

const TinyMoe& tiny() {
  static const TinyMoe t;
  return t;
}

const std::vector<int32_t> kIds = {5, 17, 200, 3, 99, 42, 7, 128, 64, 250, 11, 31};

// ---- The ops against hand computations --------------------------------------------------

struct Cpu {
  Arena arena{size_t(1) << 24};
  Context ctx{Device::cpu, &arena};
};

// Softmax over four experts, top-2, with and without renormalization, against the formulas.
TEST(MoeRoute, TopKOfTheSoftmaxAsComputedByHand) {
  // Token t's logits are row t of x W^T: x picks W's columns.
  const float x_data[] = {1, 0, 0, 1, 1, 1};             // [3, 2]
  const float w_data[] = {1, 0.5f, 2, -1, 0, 0, -1, 3};  // [4, 2]: expert rows
  // logits: t0 = [1, 2, 0, -1], t1 = [0.5, -1, 0, 3], t2 = [1.5, 1, 0, 2]
  const double logits[3][4] = {{1, 2, 0, -1}, {0.5, -1, 0, 3}, {1.5, 1, 0, 2}};
  const int32_t top[3][2] = {{1, 0}, {3, 0}, {3, 0}};
  LinearWeight router;
  router.weight = TensorView(const_cast<float*>(w_data), DType::f32, {4, 2});
  const TensorView x(const_cast<float*>(x_data), DType::f32, {3, 2});
  for (bool normalize : {false, true}) {
    SCOPED_TRACE(normalize);
    Cpu cpu;
    Tensor w = Tensor::empty({3, 2}, DType::f32), ids = Tensor::empty({3, 2}, DType::i32);
    ops::moe_route(cpu.ctx, x, router, normalize, w, ids);
    for (int t = 0; t < 3; ++t) {
      double sum = 0;
      for (double l : logits[t]) sum += std::exp(l);
      const double p0 = std::exp(logits[t][top[t][0]]) / sum;
      const double p1 = std::exp(logits[t][top[t][1]]) / sum;
      const double norm = normalize ? p0 + p1 : 1.0;
      EXPECT_EQ(ids.ptr<int32_t>()[2 * t], top[t][0]) << t;
      EXPECT_EQ(ids.ptr<int32_t>()[2 * t + 1], top[t][1]) << t;
      EXPECT_NEAR(w.ptr<float>()[2 * t], p0 / norm, 1e-6) << t;
      EXPECT_NEAR(w.ptr<float>()[2 * t + 1], p1 / norm, 1e-6) << t;
    }
    // Token 0: e / (1 + e) and 1 / (1 + e) once renormalized.
    if (normalize) {
      EXPECT_NEAR(w.ptr<float>()[0], std::exp(1.0) / (1 + std::exp(1.0)), 1e-6);
    }
  }
}

// Equal probabilities go to the lower expert index, as torch.topk orders them.
TEST(MoeRoute, TiesGoToTheLowerExpert) {
  const float x_data[] = {1};
  const float w_data[] = {0, 5, 5, 5};  // logits [0, 5, 5, 5]
  LinearWeight router;
  router.weight = TensorView(const_cast<float*>(w_data), DType::f32, {4, 1});
  Cpu cpu;
  Tensor w = Tensor::empty({1, 2}, DType::f32), ids = Tensor::empty({1, 2}, DType::i32);
  ops::moe_route(cpu.ctx, TensorView(const_cast<float*>(x_data), DType::f32, {1, 1}), router, true,
                 w, ids);
  EXPECT_EQ(ids.ptr<int32_t>()[0], 1);
  EXPECT_EQ(ids.ptr<int32_t>()[1], 2);
  EXPECT_FLOAT_EQ(w.ptr<float>()[0], 0.5f);
}

// Replay: the given experts are kept and only their weights computed (p at them, renormalized
// over them); `chosen` gets the router's own top-k; a row starting with -1 routes itself; a
// replayed id out of range or repeated is an error. Negative control: without replay the
// given ids are overwritten.
TEST(MoeRoute, ReplayKeepsTheGivenExpertsAndRecomputesTheirWeights) {
  const float x_data[] = {1, 0, 0, 1, 1, 1};             // [3, 2]
  const float w_data[] = {1, 0.5f, 2, -1, 0, 0, -1, 3};  // [4, 2]
  const double logits[3][4] = {{1, 2, 0, -1}, {0.5, -1, 0, 3}, {1.5, 1, 0, 2}};
  LinearWeight router;
  router.weight = TensorView(const_cast<float*>(w_data), DType::f32, {4, 2});
  const TensorView x(const_cast<float*>(x_data), DType::f32, {3, 2});
  Cpu cpu;
  Tensor w = Tensor::empty({3, 2}, DType::f32), ids = Tensor::empty({3, 2}, DType::i32);
  Tensor chosen = Tensor::empty({3, 2}, DType::i32);
  const int32_t given[6] = {2, 3, -1, -1, 0, 1};  // token 1 not recorded
  std::memcpy(ids.view().data, given, sizeof(given));
  ops::moe_route(cpu.ctx, x, router, true, w, ids, true, chosen);
  const int32_t own[6] = {1, 0, 3, 0, 3, 0};
  const int32_t used[6] = {2, 3, 3, 0, 0, 1};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(chosen.ptr<int32_t>()[i], own[i]) << i;
    EXPECT_EQ(ids.ptr<int32_t>()[i], used[i]) << i;
  }
  for (int t = 0; t < 3; ++t) {
    const double a = std::exp(logits[t][used[2 * t]]), b = std::exp(logits[t][used[2 * t + 1]]);
    EXPECT_NEAR(w.ptr<float>()[2 * t], a / (a + b), 1e-6) << t;
    EXPECT_NEAR(w.ptr<float>()[2 * t + 1], b / (a + b), 1e-6) << t;
  }
  // Negative control: the same ids without replay are replaced by the top-k.
  std::memcpy(ids.view().data, given, sizeof(given));
  ops::moe_route(cpu.ctx, x, router, true, w, ids);
  EXPECT_EQ(ids.ptr<int32_t>()[0], 1);
  // Bad replayed ids name the token.
  const int32_t out_of_range[6] = {2, 4, 0, 1, 0, 1};
  std::memcpy(ids.view().data, out_of_range, sizeof(out_of_range));
  expect_moe_error([&] { ops::moe_route(cpu.ctx, x, router, true, w, ids, true); },
                   "moe_route: replayed expert 4 of token 0 is outside [0, 4)");
  const int32_t twice[6] = {2, 3, 0, 1, 1, 1};
  std::memcpy(ids.view().data, twice, sizeof(twice));
  expect_moe_error([&] { ops::moe_route(cpu.ctx, x, router, true, w, ids, true); },
                   "moe_route: replayed expert 1 appears twice for token 2");
  // The host check a CUDA forward runs before uploading replayed ids: the same errors, rows
  // starting with -1 left alone.
  expect_moe_error([&] { ops::check_replayed_experts(ids, 4); },
                   "moe_route: replayed expert 1 appears twice for token 2");
  std::memcpy(ids.view().data, given, sizeof(given));
  EXPECT_NO_THROW(ops::check_replayed_experts(ids, 4));
  expect_moe_error([&] { ops::check_replayed_experts(ids, 3); },
                   "moe_route: replayed expert 3 of token 0 is outside [0, 3)");
}

// The expert op against a direct double-precision evaluation of
// out[t] = sum_j w[t,j] * down_e(silu(gate_e x) * up_e x).
TEST(MoeExperts, WeightedSumOfTheChosenExpertsMlps) {
  const int64_t t = 3, h = 4, inter = 3, e = 3, k = 2;
  auto value = [](int64_t i, double scale) { return float(scale * std::sin(0.7 * double(i) + 1)); };
  Tensor x = Tensor::empty({t, h}, DType::f32);
  Tensor gate = Tensor::empty({e, inter, h}, DType::f32),
         up = Tensor::empty({e, inter, h}, DType::f32);
  Tensor down = Tensor::empty({e, h, inter}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.ptr<float>()[i] = value(i, 1.0);
  for (int64_t i = 0; i < gate.numel(); ++i) {
    gate.ptr<float>()[i] = value(i + 100, 0.8);
    up.ptr<float>()[i] = value(i + 200, 0.6);
    down.ptr<float>()[i] = value(i + 300, 0.5);
  }
  MoeWeights w;
  w.gate.weight = gate.view();
  w.up.weight = up.view();
  w.down.weight = down.view();
  const float weights[] = {0.75f, 0.25f, 0.5f, 0.5f, 1.0f, 0.125f};
  const int32_t experts[] = {2, 0, 1, 2, 0, 1};
  Cpu cpu;
  Tensor out = Tensor::empty({t, h}, DType::f32);
  ops::moe_experts(cpu.ctx, x, w, ops::GatedActivation::silu,
                   TensorView(const_cast<float*>(weights), DType::f32, {t, k}),
                   TensorView(const_cast<int32_t*>(experts), DType::i32, {t, k}), out);
  const float *xf = x.ptr<float>(), *g = gate.ptr<float>(), *u = up.ptr<float>(),
              *d = down.ptr<float>();
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t c = 0; c < h; ++c) {
      double ref = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t ex = experts[i * k + j];
        double y = 0;
        for (int64_t m = 0; m < inter; ++m) {
          double gs = 0, us = 0;
          for (int64_t q = 0; q < h; ++q) {
            gs += double(g[(ex * inter + m) * h + q]) * xf[i * h + q];
            us += double(u[(ex * inter + m) * h + q]) * xf[i * h + q];
          }
          y += d[(ex * h + c) * inter + m] * (gs / (1 + std::exp(-gs)) * us);
        }
        ref += weights[i * k + j] * y;
      }
      EXPECT_NEAR(out.ptr<float>()[i * h + c], ref, 1e-6 * (1 + std::fabs(ref))) << i << " " << c;
    }
  }
  // Control: routing token 0 to other experts changes its row.
  const int32_t other[] = {1, 0, 1, 2, 0, 1};
  Tensor out2 = Tensor::empty({t, h}, DType::f32);
  ops::moe_experts(cpu.ctx, x, w, ops::GatedActivation::silu,
                   TensorView(const_cast<float*>(weights), DType::f32, {t, k}),
                   TensorView(const_cast<int32_t*>(other), DType::i32, {t, k}), out2);
  EXPECT_NE(out.ptr<float>()[0], out2.ptr<float>()[0]);
  EXPECT_EQ(out.ptr<float>()[h], out2.ptr<float>()[h]);  // token 1 is routed as before
  // Expert ids outside [0, E) or repeated within a token are errors, not garbage.
  const int32_t bad[] = {3, 0, 1, 2, 0, 1};
  expect_moe_error(
      [&] {
        ops::moe_experts(cpu.ctx, x, w, ops::GatedActivation::silu,
                         TensorView(const_cast<float*>(weights), DType::f32, {t, k}),
                         TensorView(const_cast<int32_t*>(bad), DType::i32, {t, k}), out2);
      },
      "routed to expert 3, outside [0, 3)");
  const int32_t twice[] = {1, 1, 1, 2, 0, 1};
  expect_moe_error(
      [&] {
        ops::moe_experts(cpu.ctx, x, w, ops::GatedActivation::silu,
                         TensorView(const_cast<float*>(weights), DType::f32, {t, k}),
                         TensorView(const_cast<int32_t*>(twice), DType::i32, {t, k}), out2);
      },
      "routed to expert 1 twice");
}

// ---- The tiny checkpoint ------------------------------------------------------------------

TEST(MoeModel, LoadsWithStackedExpertsAndADenseLayer) {
  const Model m = load_model(tiny().hub);
  ASSERT_EQ(m.layers.size(), 2u);
  const LayerWeights& sparse = m.layers[0];
  ASSERT_FALSE(sparse.moe.empty());
  EXPECT_TRUE(sparse.gate.weight.empty());
  EXPECT_EQ(sparse.moe.router.weight.shape, (Shape{4, 192}));
  EXPECT_EQ(sparse.moe.gate.weight.shape, (Shape{4, 96, 192}));
  EXPECT_EQ(sparse.moe.up.weight.shape, (Shape{4, 96, 192}));
  EXPECT_EQ(sparse.moe.down.weight.shape, (Shape{4, 192, 96}));
  // The dense mlp_only layer keeps intermediate_size.
  EXPECT_TRUE(m.layers[1].moe.empty());
  EXPECT_EQ(m.layers[1].gate.weight.shape, (Shape{320, 192}));
  EXPECT_EQ(m.named_linears().size(), 4u + 7u);
}

// Both checkpoint layouts hold the same numbers: identical logits, unquantized and FP8.
TEST(MoeModel, HubAndFusedLayoutsGiveIdenticalLogits) {
  for (std::optional<Fp8Scheme> s : {std::optional<Fp8Scheme>{}, std::optional{Fp8Scheme::row},
                                     std::optional{Fp8Scheme::block}}) {
    SCOPED_TRACE(s ? scheme_name(*s) : "as stored");
    const Tensor a = prefill_logits(load_model(tiny().hub, s), kIds);
    const Tensor b = prefill_logits(load_model(tiny().fused, s), kIds);
    EXPECT_EQ(rel_max_diff(a, b), 0.0);
  }
  // The fused down_proj is used in place; the gate and up halves are copied out of gate_up.
  const Model fused = load_model(tiny().fused);
  const Checkpoint& ck = fused.checkpoint();
  EXPECT_EQ(fused.layers[0].moe.down.weight.data,
            ck.view("model.layers.0.mlp.experts.down_proj").data);
}

// Prefill, decode steps and batches see the same numbers (row and block FP8 are per token).
TEST(MoeModel, DecodeStepsEqualThePrefill) {
  for (std::optional<Fp8Scheme> s : {std::optional<Fp8Scheme>{}, std::optional{Fp8Scheme::row}}) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(bf16);
      const Model m = load_model(tiny().hub, s);
      Arena arena;
      Context ctx{Device::cpu, &arena};
      ctx.bf16_activations = bf16;
      KvCache cache(m.config(), int64_t(kIds.size()));
      const int64_t v = m.config().vocab_size;
      Tensor stepped = Tensor::empty({int64_t(kIds.size()), v}, DType::f32);
      for (size_t done = 0; done < kIds.size();) {
        const size_t n = done == 0 ? 4 : 1;
        std::vector<int32_t> tok(kIds.begin() + long(done), kIds.begin() + long(done + n));
        const std::vector<int32_t> pos = positions_from(n, int32_t(done));
        SequenceInput seq{tok, pos, &cache};
        forward(ctx, m, nullptr, {&seq, 1}, LogitRows::all,
                stepped.view().slice_rows(int64_t(done), int64_t(done + n)));
        done += n;
      }
      EXPECT_EQ(rel_max_diff(stepped, prefill_logits(m, kIds, bf16)), 0.0);
    }
  }
}

// The routing matters: top-1 is another model than top-2, and so is norm_topk_prob false.
TEST(MoeModel, TopKAndRenormalizationChangeTheLogits) {
  const Tensor base = prefill_logits(load_model(tiny().hub), kIds);
  for (const auto& [key, value] :
       {std::pair<std::string, json>{"num_experts_per_tok", 1}, {"norm_topk_prob", false}}) {
    SCOPED_TRACE(key);
    const std::string dir = moe_temp_dir("variant");
    json c = tiny_config();
    c[key] = value;
    write_all(dir, read_all(tiny().hub), c);
    EXPECT_GT(rel_max_diff(prefill_logits(load_model(dir), kIds), base), 100 * kHfFp32Logits);
    fs::remove_all(dir);
  }
}

// YaRN (as Qwen3-30B-A3B's model card extends its context) on an MoE model: the context is
// factor x original_max_position_embeddings, every layer takes the attention factor, and the
// 12 positions past the original 4 change the logits; a decode step still equals the prefill.
TEST(MoeModel, YarnRopeExtendsTheMoeModelsContext) {
  const std::string dir = moe_temp_dir("yarn");
  json c = tiny_config();
  c["max_position_embeddings"] = 16;
  c["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 4}};
  write_all(dir, read_all(tiny().hub), c);
  const Model m = load_model(dir);
  EXPECT_TRUE(m.config().has_moe());
  EXPECT_EQ(m.config().max_context, 16);
  for (const LayerWeights& l : m.layers)
    EXPECT_NEAR(l.rope_attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-12);
  const Tensor yarn = prefill_logits(m, kIds);
  EXPECT_GT(rel_max_diff(yarn, prefill_logits(load_model(tiny().hub), kIds)), 100 * kHfFp32Logits);
  KvCache cache(m.config(), int64_t(kIds.size()));
  Arena arena;
  Context ctx{Device::cpu, &arena};
  const int64_t v = m.config().vocab_size, n = int64_t(kIds.size());
  Tensor stepped = Tensor::empty({n, v}, DType::f32);
  for (int64_t done = 0; done < n; ++done) {
    const std::vector<int32_t> tok = {kIds[size_t(done)]};
    const std::vector<int32_t> pos = positions_from(1, int32_t(done));
    SequenceInput seq{tok, pos, &cache};
    forward(ctx, m, nullptr, {&seq, 1}, LogitRows::all, stepped.view().slice_rows(done, done + 1));
  }
  EXPECT_EQ(rel_max_diff(stepped, yarn), 0.0);
  EXPECT_THROW(check_context(m.config(), 17, "a prompt"), Error);
  fs::remove_all(dir);
}

// Expert order: swapping two experts' weights changes the logits, unless the router's rows
// are swapped with them (the same model, relabelled).
TEST(MoeModel, ExpertOrderMatchesTheRouter) {
  const Tensor base = prefill_logits(load_model(tiny().hub), kIds);
  const std::string p = "model.layers.0.mlp.";
  for (bool router_too : {false, true}) {
    SCOPED_TRACE(router_too);
    std::map<std::string, Tensor> t = read_all(tiny().hub);
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
      std::swap(t[p + "experts.0." + proj + ".weight"], t[p + "experts.1." + proj + ".weight"]);
    if (router_too) {
      Tensor& r = t[p + "gate.weight"];  // [4, 192] bf16
      std::vector<char> row(192 * 2);
      char* d = static_cast<char*>(r.view().data);
      std::memcpy(row.data(), d, row.size());
      std::memcpy(d, d + row.size(), row.size());
      std::memcpy(d + row.size(), row.data(), row.size());
    }
    const std::string dir = moe_temp_dir("swapped");
    write_all(dir, t, tiny_config());
    const double diff = rel_max_diff(prefill_logits(load_model(dir), kIds), base);
    if (router_too) {
      EXPECT_EQ(diff, 0.0);
    } else {
      EXPECT_GT(diff, 100 * kHfFp32Logits);
    }
    fs::remove_all(dir);
  }
}

// --fp8 quantizes every expert like a dense linear (row scales per expert row); the router
// stays unquantized.
TEST(MoeModel, Fp8QuantizesTheExpertsNotTheRouter) {
  const Model m = load_model(tiny().hub, Fp8Scheme::row);
  const MoeWeights& w = m.layers[0].moe;
  EXPECT_EQ(w.gate.weight.dtype, DType::f8e4m3);
  EXPECT_EQ(w.down.weight.dtype, DType::f8e4m3);
  EXPECT_EQ(w.gate.scales.shape, (Shape{4, 96}));
  EXPECT_EQ(w.down.act, ActScaling::token);
  EXPECT_FALSE(w.router.is_fp8());
  EXPECT_EQ(w.router.weight.dtype, DType::bf16);
  const Model b = load_model(tiny().hub, Fp8Scheme::block);
  EXPECT_EQ(b.layers[0].moe.up.scales.shape, (Shape{4, 1, 2}));
  // Expert 2's row scales are its own rows' amax / 448.
  const Model plain = load_model(tiny().hub);
  const LinearWeight e2 = plain.layers[0].moe.gate.expert(2);
  float amax = 0;
  for (int64_t j = 0; j < 192; ++j)
    amax = std::max(amax, std::fabs(bf16_to_f32(e2.weight.ptr<uint16_t>()[5 * 192 + j])));
  EXPECT_FLOAT_EQ(w.gate.expert(2).scales.ptr<float>()[5], amax / 448.0f);
  // The logits move (the experts are quantized), and stay those of the same model (random
  // logits would agree on about 1 in 256 top-1 tokens).
  const Tensor fp32 = prefill_logits(plain, kIds), fp8 = prefill_logits(m, kIds);
  EXPECT_GT(rel_max_diff(fp8, fp32), 100 * kHfFp32Logits);
  EXPECT_GE(top1_agreement(fp8, fp32), 0.5);
}

// The MoE block against the dense MLP the goldens hold to HF: an MoE layer whose experts are
// all copies of a dense layer's MLP, with renormalized routing weights, is that dense layer
// (up to the rounding of w_a y + w_b y against y), whatever the router says. Without the
// renormalization the weights sum to less than 1: far off.
TEST(MoeModel, ExpertsThatAreCopiesOfTheDenseMlpGiveTheDenseModel) {
  json dense_config = preset_config_json("qwen3-tiny");
  dense_config["intermediate_size"] = 96;
  dense_config["initializer_range"] = 0.1;
  const std::string dense = moe_temp_dir("dense"), moe = moe_temp_dir("copies");
  write_random_checkpoint(dense_config, dense, 11);
  std::map<std::string, Tensor> t = read_all(dense);
  const std::string p = "model.layers.0.mlp.";
  for (int64_t e = 0; e < 4; ++e)
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
      t[p + "experts." + std::to_string(e) + "." + proj + ".weight"] = t.at(p + proj + ".weight");
  for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) t.erase(p + proj + ".weight");
  Tensor router = Tensor::empty({4, 192}, DType::bf16);
  for (int64_t i = 0; i < router.numel(); ++i)
    router.ptr<uint16_t>()[i] = f32_to_bf16(0.2f * float(std::sin(double(i))));
  t[p + "gate.weight"] = router;
  json moe_config = dense_config;
  moe_config["architectures"] = {"Qwen3MoeForCausalLM"};
  moe_config["model_type"] = "qwen3_moe";
  const json tiny = tiny_config();
  for (const char* k : {"num_experts", "num_experts_per_tok", "norm_topk_prob", "mlp_only_layers",
                        "decoder_sparse_step"})
    moe_config[k] = tiny.at(k);
  moe_config["moe_intermediate_size"] = 96;
  write_all(moe, t, moe_config);
  const Tensor ref = prefill_logits(load_model(dense), kIds);
  const Model m = load_model(moe);
  ASSERT_TRUE(m.config().layers[0].moe && !m.config().layers[1].moe);
  const double err = rel_max_diff(prefill_logits(m, kIds), ref);
  EXPECT_LE(err, 1e-5);
  std::printf("MoE of dense copies vs dense: rel_max_diff %.3g\n", err);
  EXPECT_EQ(top1_agreement(prefill_logits(m, kIds), ref), 1.0);
  moe_config["norm_topk_prob"] = false;
  write_all(moe, t, moe_config);
  EXPECT_GT(rel_max_diff(prefill_logits(load_model(moe), kIds), ref), 100 * err);
  fs::remove_all(dense);
  fs::remove_all(moe);
}

// ---- What the loader rejects, and what MoE models cannot do yet --------------------------

TEST(MoeModel, WrongShapesAndMissingExpertsNameTheTensor) {
  std::map<std::string, Tensor> t = read_all(tiny().hub);
  const std::string dir = moe_temp_dir("bad");
  t["model.layers.0.mlp.experts.3.up_proj.weight"] = Tensor::zeros({95, 192}, DType::bf16);
  write_all(dir, t, tiny_config());
  expect_moe_error([&] { load_model(dir); },
                   "tensor 'model.layers.0.mlp.experts.3.up_proj.weight' has shape [95, 192], the "
                   "config implies [96, 192]");
  t = read_all(tiny().hub);
  t.erase("model.layers.0.mlp.experts.2.down_proj.weight");
  write_all(dir, t, tiny_config());
  expect_moe_error([&] { load_model(dir); },
                   "missing tensors (1): model.layers.0.mlp.experts.2.down_proj.weight");
  t = read_all(tiny().hub);
  t["model.layers.0.mlp.gate.weight"] = Tensor::zeros({5, 192}, DType::bf16);
  write_all(dir, t, tiny_config());
  expect_moe_error([&] { load_model(dir); }, "tensor 'model.layers.0.mlp.gate.weight' has shape");
  // The fused layout's shapes too.
  fs::remove_all(dir);
  t = read_all(tiny().fused);
  t["model.layers.0.mlp.experts.gate_up_proj"] = Tensor::zeros({4, 96, 192}, DType::bf16);
  write_all(dir, t, tiny_config());
  expect_moe_error([&] { load_model(dir); },
                   "tensor 'model.layers.0.mlp.experts.gate_up_proj' has shape [4, 96, 192], the "
                   "config implies [4, 192, 192]");
  fs::remove_all(dir);
}

// More experts than config.json's num_experts, and the two layouts mixed in one layer: each
// an error naming the tensors (no tensor of a checkpoint is ever silently ignored).
TEST(MoeModel, ExtraExpertsAndMixedLayoutsNameTheTensors) {
  const std::string dir = moe_temp_dir("mixed");
  std::map<std::string, Tensor> t = read_all(tiny().hub);
  t["model.layers.0.mlp.experts.4.up_proj.weight"] = Tensor::zeros({96, 192}, DType::bf16);
  write_all(dir, t, tiny_config());
  expect_moe_error([&] { load_model(dir); },
                   "unexpected tensors (1): model.layers.0.mlp.experts.4.up_proj.weight");
  // The fused layout plus expert 0 of the Hub's.
  fs::remove_all(dir);
  t = read_all(tiny().fused);
  const std::map<std::string, Tensor> hub = read_all(tiny().hub);
  t["model.layers.0.mlp.experts.0.gate_proj.weight"] =
      hub.at("model.layers.0.mlp.experts.0.gate_proj.weight");
  write_all(dir, t, tiny_config());
  expect_moe_error([&] { load_model(dir); },
                   "stores the experts of 'model.layers.0.mlp' in both layouts: "
                   "'model.layers.0.mlp.experts.gate_up_proj' (transformers 5's fused tensors) and "
                   "'model.layers.0.mlp.experts.0.gate_proj.weight'");
  // The Hub's layout with a fused down_proj beside its per-expert ones.
  fs::remove_all(dir);
  t = hub;
  t["model.layers.0.mlp.experts.down_proj"] =
      read_all(tiny().fused).at("model.layers.0.mlp.experts.down_proj");
  write_all(dir, t, tiny_config());
  expect_moe_error([&] { load_model(dir); }, "'model.layers.0.mlp.experts.down_proj'");
  // Negative control: the fused checkpoint alone loads.
  EXPECT_NO_THROW(load_model(tiny().fused));
  fs::remove_all(dir);
}

TEST(MoeModel, UnsupportedUsesAreClearErrors) {
  const Model m = load_model(tiny().hub);
  // LoRA on the experts: all of a layer's or none (tests/train/test_moe_training).
  LoraConfig lc;
  lc.r = 4;
  lc.target_regex = R"(model\.layers\.0\.mlp\.experts\.[01]\.gate_proj)";
  expect_moe_error([&] { LoraAdapter::init(lc, m, 1); },
                   "LoRA targets 2 of the 4 experts' gate_proj in layer 0: fp8rl adapts all of a "
                   "layer's experts or none");
  lc.target_regex.clear();
  lc.target_modules = {"q_proj", "gate_proj"};
  const LoraAdapter on_experts = LoraAdapter::init(lc, m, 1);
  EXPECT_EQ(on_experts.experts(0, 4), 4);
  // Merging adapters into the stacked experts is not written yet: refused, never dropped.
  expect_moe_error(
      [&] { write_merged_checkpoint(m, on_experts, moe_temp_dir("merged"), MergeOptions{}); },
      "merging an adapter on MoE experts (model.layers.0.mlp.gate_proj) is not "
      "supported yet");
  lc.target_modules = {"q_proj", "v_proj"};
  const LoraAdapter attention_only = LoraAdapter::init(lc, m, 1);
  EXPECT_EQ(rel_max_diff(prefill_logits(m, kIds, false, &attention_only), prefill_logits(m, kIds)),
            0.0);  // PEFT's init: B = 0
  // CUDA runs MoE forwards (tests/gpu); their training is refused by the backward ops, before
  // anything runs, in a dry run too.
  Context cuda_ctx{Device::cuda, nullptr};
  cuda_ctx.dry_run = true;
  expect_moe_error(
      [&] {
        Tensor x = Tensor::empty({1, 2}, DType::f32), ids = Tensor::empty({1, 2}, DType::i32);
        ops::moe_route_backward(cuda_ctx, x, m.layers[0].moe.router, true, ids, x, x);
      },
      "training MoE layers (their backward) is not supported on CUDA yet");
  expect_moe_error(
      [&] {
        Tensor x = Tensor::empty({1, 2}, DType::f32), ids = Tensor::empty({1, 2}, DType::i32);
        ops::moe_experts_backward(cuda_ctx, x, m.layers[0].moe, ops::GatedActivation::silu, x, ids,
                                  x, x, x, {}, {});
      },
      "training MoE layers (their backward) is not supported on CUDA yet");
  // FP8 checkpoints of MoE models are neither written nor read yet.
  expect_moe_error(
      [&] {
        write_fp8_checkpoint(load_model(tiny().hub, Fp8Scheme::row), moe_temp_dir("fp8"),
                             Fp8Format::compressed_tensors);
      },
      "FP8 checkpoints of MoE models");
  std::map<std::string, Tensor> t = read_all(tiny().hub);
  t["model.layers.0.mlp.experts.0.gate_proj.weight"] = Tensor::zeros({96, 192}, DType::f8e4m3);
  const std::string dir = moe_temp_dir("fp8in");
  write_all(dir, t, tiny_config());
  expect_moe_error([&] { load_model(dir); }, "FP8 MoE checkpoints are not supported yet");
  fs::remove_all(dir);
}

// fp8rl info's structure check reads no expert weight.
TEST(MoeModel, StructureOnlyLoadStacksNothing) {
  LoadOptions o;
  o.structure_only = true;
  const Model m = Model::load(tiny().hub, o);
  EXPECT_TRUE(m.layers[0].moe.gate.weight.empty());
  EXPECT_FALSE(m.layers[0].moe.router.weight.empty());
}

}  // namespace
