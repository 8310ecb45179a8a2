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
#include "train_batch.h"

using namespace fp8rl;
using namespace fp8rl::test;

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
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
  const TrainBatch b = train_batch_of(g, true);
  const LossAndGrads ref = loss_and_grads(cpu, cpu_model, cpu_adapter, b, false);
  const bool fp8 = scheme == Fp8Scheme::row;
  const std::string name = arch + (fp8 ? " fp8-row" : "");
  const double grad_bound = fp8 ? kCudaFp8TrainGrad : kCudaTrainGrad;
  for (bool ckpt : {false, true}) {
    const LossAndGrads r = loss_and_grads(gpu, gpu_model, gpu_adapter, b, ckpt);
    const double loss_err = std::fabs(r.loss - ref.loss) / ref.loss;
    const double err = rel_err(r.grads, ref.grads);
    char line[256];
    std::snprintf(line, sizeof line, "%s%s: loss %.6f vs cpu %.6f (rel %.2e), grads rel %.3e",
                  name.c_str(), ckpt ? " checkpointing" : "", r.loss, ref.loss, loss_err, err);
    check(loss_err <= kCudaTrainLoss && err <= grad_bound, line);
    if (ckpt) {  // offloading moves the checkpointed inputs through pinned host memory only
      const LossAndGrads off = loss_and_grads(gpu, gpu_model, gpu_adapter, b, true, true);
      check(off.grads == r.grads && off.loss == r.loss,
            name + " offloading: the gradients of checkpointing, bit for bit");
    }
  }
  if (!fp8) {  // the FP8 bound is too loose for this control to mean much
    const LossAndGrads unmasked =
        loss_and_grads(gpu, gpu_model, gpu_adapter, train_batch_of(g, false), false);
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
