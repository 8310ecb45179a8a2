// The trainer against HF transformers + PEFT: on the CPU in fp32, the loss,
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
#include "train_batch.h"

namespace fp8rl {
namespace {

using namespace test;

nlohmann::json train_json(const std::string& arch) {
  std::ifstream f(golden_dir(arch) + "/train/train.json");
  return nlohmann::json::parse(f);
}

// On a fresh CPU context.
LossAndGrads cpu_loss_and_grads(const Model& m, const LoraAdapter& adapter, const TrainBatch& b,
                                bool checkpointing = false) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  return loss_and_grads(ctx, m, adapter, b, checkpointing);
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
  const TrainBatch b = train_batch_of(g);
  ASSERT_EQ(b.counted, g["loss_tokens"].get<int64_t>());
  const LossAndGrads r = cpu_loss_and_grads(m, adapter, b);
  const double ref_loss = g["loss"].get<double>();
  EXPECT_LE(std::fabs(r.loss - ref_loss) / ref_loss, kHfTrainLoss) << arch;
  const std::string grads_file = golden_dir(arch) + "/train/grads.safetensors";
  const double err = rel_err(adapter, m, r.grads, grads_file, ".grad");
  EXPECT_LE(err, kHfTrainGrad) << arch;
  // Negative control: the same pass without HF's label mask (3 more tokens counted).
  const LossAndGrads unmasked = cpu_loss_and_grads(m, adapter, train_batch_of(g, false));
  const double control = rel_err(adapter, m, unmasked.grads, grads_file, ".grad");
  EXPECT_GT(control, 100 * kHfTrainGrad) << arch << ": the comparison cannot fail";
  std::printf("%s loss %.9g (HF %.9g) grads vs PEFT %.3g (without the label mask %.3g)\n",
              arch.c_str(), r.loss, ref_loss, err, control);
}

// Activation checkpointing recomputes each layer in the backward: the same gradients, bit for
// bit (the recompute runs the same ops on the same inputs).
TEST_P(TrainGolden, CheckpointingGivesTheSameGradients) {
  const std::string arch = GetParam();
  Model m = test::load_model(golden_dir(arch), Fp8Scheme::off);
  const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir(arch) + "/adapter", m);
  const TrainBatch b = train_batch_of(train_json(arch));
  const LossAndGrads plain = cpu_loss_and_grads(m, adapter, b, false);
  const LossAndGrads ckpt = cpu_loss_and_grads(m, adapter, b, true);
  EXPECT_EQ(plain.loss, ckpt.loss);
  EXPECT_EQ(plain.grads, ckpt.grads) << arch;
}

// One torch.optim.SGD and one AdamW step from PEFT's gradients' state equal PyTorch's.
TEST_P(TrainGolden, OptimizerStepsMatchTorch) {
  const std::string arch = GetParam();
  const nlohmann::json g = train_json(arch);
  Model m = test::load_model(golden_dir(arch), Fp8Scheme::off);
  const std::string dir = golden_dir(arch);
  const TrainBatch b = train_batch_of(g);
  for (const std::string opt : {"sgd", "adamw"}) {
    LoraAdapter adapter = LoraAdapter::load_peft(dir + "/adapter", m);
    const LossAndGrads r = cpu_loss_and_grads(m, adapter, b);
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
  }
}

// FP8-row base (row weight scales, per-token activation scales, straight-through backward):
// the LoRA gradients equal the PyTorch emulation's; the BF16-base gradients of the same batch
// are farther away than the bound (the FP8 recipe is what is compared).
TEST_P(TrainGolden, Fp8RowGradientsMatchEmulation) {
  const std::string arch = GetParam();
  const nlohmann::json g = train_json(arch)["fp8_row"];
  const std::string dir = golden_dir(arch);
  const TrainBatch b = train_batch_of(g);
  const auto grads_of = [&](std::optional<Fp8Scheme> scheme) {
    Model m = test::load_model(dir, scheme);
    const LoraAdapter adapter = LoraAdapter::load_peft(dir + "/adapter", m);
    LossAndGrads r = cpu_loss_and_grads(m, adapter, b);
    const double err =
        rel_err(adapter, m, r.grads, dir + "/train/fp8_row_grads.safetensors", ".grad");
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
