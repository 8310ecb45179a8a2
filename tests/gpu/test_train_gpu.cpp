// test_train_gpu
//
// The trainer on CUDA against the fp32 CPU trainer (itself equal to HF + PEFT,
// tests/train/test_train_goldens.cpp): on each golden architecture's training batch with its
// PEFT adapter, the loss and every LoRA gradient of a CUDA pass (bf16 activations, the CUDA
// backward kernels) within kCudaTrainLoss / kCudaTrainGrad of the CPU's, with and without
// activation checkpointing; negative control: the CUDA gradients of the batch without its
// label mask are farther from the CPU's than twice the bound. With an FP8-row base the
// gradients are held to kCudaFp8TrainGrad only (tests/tolerances.h says why). Prints one line
// per case; exit 1 on a failure, 77 without a CUDA device.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/adapter.h"
#include "ops/backward.h"
#include "ops/device.h"
#include "test_util.h"
#include "tolerances.h"
#include "train/logprob_pass.h"

using namespace fp8rl;
using namespace fp8rl::test;

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

struct Batch {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0};
  int64_t counted = 0;
};

Batch batch_of(const nlohmann::json& b, bool use_label_mask) {
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

Result run(Context& ctx, const Model& m, const LoraAdapter& adapter, const Batch& b,
           bool checkpointing) {
  LogprobPass pass(ctx, m, &adapter);
  PassOptions o;
  o.checkpointing = checkpointing;
  pass.forward({b.ids, b.targets, b.cu}, o);
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

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    err = std::max(err, std::fabs(double(a[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return err / scale;
}

void grads_case(CudaDevice& dev, const std::string& arch, std::optional<Fp8Scheme> scheme,
                const char* batch_key) {
  const std::string dir = FP8RL_TEST_DATA "/goldens/" + arch;
  std::ifstream f(dir + "/train/train.json");
  nlohmann::json g = nlohmann::json::parse(f);
  if (std::string(batch_key) != "") g = g[batch_key];
  LoadOptions lo;
  lo.fp8 = scheme;
  Model cpu_model = Model::load(dir, lo);
  Model gpu_model = Model::load(dir, lo);
  Context gpu = dev.context();
  gpu_model.to_device(gpu);
  LoraAdapter cpu_adapter = LoraAdapter::load_peft(dir + "/adapter", cpu_model);
  LoraAdapter gpu_adapter = LoraAdapter::load_peft(dir + "/adapter", gpu_model);
  cpu_adapter.attach(cpu_model);
  gpu_adapter.sync_to_device(gpu);
  gpu_adapter.attach(gpu_model);
  Arena arena;
  Context cpu{Device::cpu, &arena};
  const Batch b = batch_of(g, true);
  const Result ref = run(cpu, cpu_model, cpu_adapter, b, false);
  const bool fp8 = scheme == Fp8Scheme::row;
  const std::string name = arch + (fp8 ? " fp8-row" : "");
  const double grad_bound = fp8 ? kCudaFp8TrainGrad : kCudaTrainGrad;
  for (bool ckpt : {false, true}) {
    const Result r = run(gpu, gpu_model, gpu_adapter, b, ckpt);
    const double loss_err = std::fabs(r.loss - ref.loss) / ref.loss;
    const double err = rel_err(r.grads, ref.grads);
    char line[256];
    std::snprintf(line, sizeof line, "%s%s: loss %.6f vs cpu %.6f (rel %.2e), grads rel %.3e",
                  name.c_str(), ckpt ? " checkpointing" : "", r.loss, ref.loss, loss_err, err);
    check(loss_err <= kCudaTrainLoss && err <= grad_bound, line);
  }
  if (!fp8) {  // the FP8 bound is too loose for this control to mean much
    const Result unmasked = run(gpu, gpu_model, gpu_adapter, batch_of(g, false), false);
    const double control = rel_err(unmasked.grads, ref.grads);
    check(control > 2 * kCudaTrainGrad,
          name + ": control (no label mask) grads rel " + std::to_string(control));
  }
  LoraAdapter::detach(gpu_model);
  LoraAdapter::detach(cpu_model);
}

}  // namespace

int main() {
  if (CudaDevice::count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  CudaDevice dev;
  for (const char* arch : {"llama", "qwen2", "qwen3", "mistral", "gemma3"}) {
    try {
      grads_case(dev, arch, Fp8Scheme::off, "");
      grads_case(dev, arch, Fp8Scheme::row, "fp8_row");
    } catch (const std::exception& e) {
      check(false, std::string(arch) + ": " + e.what());
    }
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "OK", g_failures);
  return g_failures ? 1 : 0;
}
