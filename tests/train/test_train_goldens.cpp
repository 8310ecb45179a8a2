// The trainer against HF transformers + PEFT (issue 10 item 7): on the CPU in fp32, the loss,
// every LoRA gradient and one SGD / AdamW step equal the goldens of
// tools/goldens/make_train_goldens.py for all five architectures; with an FP8-row base the
// LoRA gradients equal its PyTorch emulation of the recipe.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/adapter.h"
#include "model/model_test_util.h"
#include "ops/backward.h"
#include "tolerances.h"
#include "train/logprob_pass.h"
#include "train/optimizer.h"

namespace fp8rl {
namespace {

using namespace test;

nlohmann::json train_json(const std::string& arch) {
  std::ifstream f(golden_dir(arch) + "/train/train.json");
  return nlohmann::json::parse(f);
}

// HF's batch (input_ids [S, L], labels [S, L], shifted inside the model) as packed sequences:
// position t of a sequence targets labels[t + 1].
struct Batch {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0};
  int64_t counted = 0;
  PackedSequences packed() const { return {ids, targets, cu}; }
};

Batch batch_of(const nlohmann::json& b, bool use_label_mask = true) {
  Batch out;
  for (size_t s = 0; s < b["input_ids"].size(); ++s) {
    const auto ids = b["input_ids"][s].get<std::vector<int32_t>>();
    const auto labels = b["labels"][s].get<std::vector<int32_t>>();
    for (size_t t = 0; t < ids.size(); ++t) {
      out.ids.push_back(ids[t]);
      int32_t target = t + 1 < ids.size() ? labels[t + 1] : ops::kIgnoreIndex;
      if (!use_label_mask && t + 1 < ids.size()) target = ids[t + 1];
      out.targets.push_back(target);
      out.counted += target != ops::kIgnoreIndex;
    }
    out.cu.push_back(int64_t(out.ids.size()));
  }
  return out;
}

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

// HF's loss (mean cross-entropy over the counted tokens) and its LoRA gradients.
Result loss_and_grads(const Model& m, const LoraAdapter& adapter, const Batch& b,
                      bool checkpointing = false) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  LogprobPass pass(ctx, m, &adapter);
  PassOptions o;
  o.checkpointing = checkpointing;
  pass.forward(b.packed(), o);
  Result r;
  std::vector<float> dlogprob(b.ids.size(), 0.0f);
  for (size_t t = 0; t < b.ids.size(); ++t)
    if (b.targets[t] != ops::kIgnoreIndex) {
      r.loss -= pass.logprobs()[t];
      dlogprob[t] = -1.0f / float(b.counted);
    }
  r.loss /= double(b.counted);
  r.grads.assign(size_t(adapter.master_params().numel()), 0.0f);
  pass.backward(dlogprob, TensorView(r.grads.data(), DType::f32, {int64_t(r.grads.size())}));
  return r;
}

// max |ours - ref| / max |ref| over every tensor of the golden file `name`, read through
// `values` (the adapter layout) with the golden's tensor names plus `suffix`.
double rel_err(const LoraAdapter& adapter, const Model& m, std::span<const float> values,
               const std::string& file, const std::string& suffix) {
  const auto golden = SafetensorsFile::open(file);
  double err = 0, scale = 0;
  int64_t tensors = 0;
  const TensorView flat(const_cast<float*>(values.data()), DType::f32, {int64_t(values.size())});
  for (int64_t l = 0; l < m.config().num_layers; ++l)
    for (int p = 0; p < 7; ++p) {
      if (!adapter.targeted(l, p)) continue;
      for (bool b : {false, true}) {
        const TensorView ref = golden->view(peft_tensor_name(l, p, b) + suffix);
        const TensorView ours = adapter.slice(flat, l, p, b);
        EXPECT_EQ(ref.shape, ours.shape) << peft_tensor_name(l, p, b);
        for (int64_t i = 0; i < ref.numel(); ++i) {
          err = std::max(err, std::fabs(double(ours.ptr<float>()[i]) - ref.ptr<float>()[i]));
          scale = std::max(scale, std::fabs(double(ref.ptr<float>()[i])));
        }
        ++tensors;
      }
    }
  EXPECT_EQ(tensors, int64_t(golden->tensors().size())) << file << ": tensors not compared";
  return err / scale;
}

class TrainGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainGolden, LossAndGradientsMatchPeft) {
  const std::string arch = GetParam();
  const nlohmann::json g = train_json(arch);
  Model m = test::load_model(golden_dir(arch), Fp8Scheme::off);
  const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir(arch) + "/adapter", m);
  adapter.attach(m);
  const Batch b = batch_of(g);
  ASSERT_EQ(b.counted, g["loss_tokens"].get<int64_t>());
  const Result r = loss_and_grads(m, adapter, b);
  const double ref_loss = g["loss"].get<double>();
  EXPECT_LE(std::fabs(r.loss - ref_loss) / ref_loss, kHfTrainLoss) << arch;
  const std::string grads_file = golden_dir(arch) + "/train/grads.safetensors";
  const double err = rel_err(adapter, m, r.grads, grads_file, ".grad");
  EXPECT_LE(err, kHfTrainGrad) << arch;
  // Negative control: the same pass without HF's label mask (3 more tokens counted).
  const Result unmasked = loss_and_grads(m, adapter, batch_of(g, false));
  const double control = rel_err(adapter, m, unmasked.grads, grads_file, ".grad");
  EXPECT_GT(control, 100 * kHfTrainGrad) << arch << ": the comparison cannot fail";
  std::printf("%s loss %.9g (HF %.9g) grads vs PEFT %.3g (without the label mask %.3g)\n",
              arch.c_str(), r.loss, ref_loss, err, control);
  LoraAdapter::detach(m);
}

// Activation checkpointing recomputes each layer in the backward: the same gradients, bit for
// bit (the recompute runs the same ops on the same inputs).
TEST_P(TrainGolden, CheckpointingGivesTheSameGradients) {
  const std::string arch = GetParam();
  Model m = test::load_model(golden_dir(arch), Fp8Scheme::off);
  const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir(arch) + "/adapter", m);
  adapter.attach(m);
  const Batch b = batch_of(train_json(arch));
  const Result plain = loss_and_grads(m, adapter, b, false);
  const Result ckpt = loss_and_grads(m, adapter, b, true);
  EXPECT_EQ(plain.loss, ckpt.loss);
  EXPECT_EQ(plain.grads, ckpt.grads) << arch;
  LoraAdapter::detach(m);
}

// One torch.optim.SGD and one AdamW step from PEFT's gradients' state equal PyTorch's.
TEST_P(TrainGolden, OptimizerStepsMatchTorch) {
  const std::string arch = GetParam();
  const nlohmann::json g = train_json(arch);
  Model m = test::load_model(golden_dir(arch), Fp8Scheme::off);
  const std::string dir = golden_dir(arch);
  const Batch b = batch_of(g);
  for (const std::string opt : {"sgd", "adamw"}) {
    LoraAdapter adapter = LoraAdapter::load_peft(dir + "/adapter", m);
    adapter.attach(m);
    const Result r = loss_and_grads(m, adapter, b);
    const TensorView p = adapter.master_params();
    const std::span<float> params(p.ptr<float>(), size_t(p.numel()));
    const nlohmann::json& h = g[opt];
    if (opt == "sgd") {
      Sgd(p.numel(), {}).step(params, r.grads, h["lr"].get<double>());
    } else {
      AdamWConfig c;
      c.beta1 = h["betas"][0].get<double>();
      c.beta2 = h["betas"][1].get<double>();
      c.eps = h["eps"].get<double>();
      c.weight_decay = h["weight_decay"].get<double>();
      AdamW(p.numel(), c).step(params, r.grads, h["lr"].get<double>());
    }
    const double err =
        rel_err(adapter, m, params, dir + "/train/" + opt + "_adapter.safetensors", "");
    EXPECT_LE(err, kHfTrainStep) << arch << " " << opt;
    std::printf("%s %s step vs torch %.3g\n", arch.c_str(), opt.c_str(), err);
    LoraAdapter::detach(m);
  }
}

// FP8-row base (row weight scales, per-token activation scales, straight-through backward):
// the LoRA gradients equal the PyTorch emulation's; the BF16-base gradients of the same batch
// are farther away than the bound (the FP8 recipe is what is compared).
TEST_P(TrainGolden, Fp8RowGradientsMatchEmulation) {
  const std::string arch = GetParam();
  const nlohmann::json g = train_json(arch)["fp8_row"];
  const std::string dir = golden_dir(arch);
  const Batch b = batch_of(g);
  const auto grads_of = [&](std::optional<Fp8Scheme> scheme) {
    Model m = test::load_model(dir, scheme);
    const LoraAdapter adapter = LoraAdapter::load_peft(dir + "/adapter", m);
    adapter.attach(m);
    Result r = loss_and_grads(m, adapter, b);
    const double err =
        rel_err(adapter, m, r.grads, dir + "/train/fp8_row_grads.safetensors", ".grad");
    LoraAdapter::detach(m);
    return std::make_pair(r.loss, err);
  };
  const auto [loss, err] = grads_of(Fp8Scheme::row);
  const auto [loss_off, err_off] = grads_of(Fp8Scheme::off);
  const double ref_loss = g["loss"].get<double>();
  EXPECT_LE(std::fabs(loss - ref_loss) / ref_loss, kHfTrainLoss) << arch;
  EXPECT_LE(err, kHfTrainGrad) << arch;
  EXPECT_GT(err_off, 10 * kHfTrainGrad) << arch << ": FP8 and unquantized grads agree";
  std::printf("%s fp8-row loss %.9g (emulation %.9g) grads %.3g (unquantized base %.3g)\n",
              arch.c_str(), loss, ref_loss, err, err_off);
}

INSTANTIATE_TEST_SUITE_P(Archs, TrainGolden,
                         ::testing::Values("llama", "qwen2", "qwen3", "mistral", "gemma3"));

}  // namespace
}  // namespace fp8rl
