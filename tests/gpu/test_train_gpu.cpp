// test_train_gpu
//
// The trainer on CUDA against the fp32 CPU trainer (itself equal to HF + PEFT,
// tests/train/test_train_goldens.cpp): on each golden architecture's training batch with its
// PEFT adapter, the loss and every LoRA gradient of a CUDA pass (bf16 activations, the CUDA
// backward kernels) within kCudaTrainLoss / kCudaTrainGrad of the CPU's, with and without
// activation checkpointing; negative control: the CUDA gradients of the batch without its
// label mask are farther from the CPU's than twice the bound. With an FP8-row base the
// gradients are held to kCudaFp8TrainGrad only (tests/tolerances.h says why).
//
// The optimizer on the device (ops/optimizer.h): one guarded AdamW step and one SGD step with
// momentum (each twice, clipping active) on CUDA equal the same steps on the CPU from the same
// masters and gradients bit for bit: masters, moments, the reported gradient norm, and the bf16
// compute copies = bf16(CPU masters). Control: the steps moved the masters. And the shared
// model: an optimizer step on CUDA reaches the engine's next rollout with no copy and no sync
// call (its logprobs of the same samples change), while a rollout without the step, or after a
// step that did not write the compute copies, gives the logprobs of before.
//
// On-policy exactness (GRPO's on_policy_exact): with the device's batch-invariant kernels,
// the engine's processed logprob of every sampled token equals the trainer pass's bit for bit,
// on every golden architecture, bf16 and FP8-row bases; control: with the mode off they differ.
//
// One device region: every buffer of a training pass lies in it and the pass's numbers are
// those of a device without it (device_region_case).
//
// Prints one line per case; exit 1 on a failure, 77 without a CUDA device.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "model/adapter.h"
#include "ops/backward.h"
#include "ops/device.h"
#include "ops/exactness.h"
#include "ops/memory.h"
#include "test_util.h"
#include "tolerances.h"
#include "train/optimizer.h"
#include "train/train_step.h"
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
  gpu_adapter.to_device(gpu);
  Arena arena;
  Context cpu{Device::cpu, &arena};
  const TrainBatch b = train_batch_of(g, true);
  const LossAndGrads ref = loss_and_grads(cpu, cpu_model, cpu_adapter, b, false);
  const bool fp8 = scheme == Fp8Scheme::row;
  const std::string name = arch + (fp8 ? " fp8-row" : "");
  const double grad_bound = fp8 ? kCudaFp8TrainGrad : kCudaTrainGrad;
  const double loss_bound = fp8 ? kCudaFp8TrainLoss : kCudaTrainLoss;
  for (bool ckpt : {false, true}) {
    const LossAndGrads r = loss_and_grads(gpu, gpu_model, gpu_adapter, b, ckpt);
    const double loss_err = std::fabs(r.loss - ref.loss) / ref.loss;
    const double err = rel_err(r.grads, ref.grads);
    char line[256];
    std::snprintf(line, sizeof line, "%s%s: loss %.6f vs cpu %.6f (rel %.2e), grads rel %.3e",
                  name.c_str(), ckpt ? " checkpointing" : "", r.loss, ref.loss, loss_err, err);
    check(loss_err <= loss_bound && err <= grad_bound, line);
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
}

// Elements of two host vectors whose bits differ (f32 or bf16 alike, by element size).
int64_t bits_differing(const TensorView& a, const TensorView& b) {
  const size_t es = dtype_size(a.dtype);
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    n += std::memcmp(static_cast<const char*>(a.data) + size_t(i) * es,
                     static_cast<const char*>(b.data) + size_t(i) * es, es) != 0;
  return n;
}

Tensor download(Context& ctx, const TensorView& t) {
  Tensor host = Tensor::empty(t.shape, t.dtype);
  ops::copy(ctx, t, host.view());
  return host;
}

std::unique_ptr<Optimizer> make(bool adamw, int64_t n, const Context& ctx) {
  if (adamw) {
    AdamWConfig c;
    c.weight_decay = 0.01;
    return std::make_unique<AdamW>(n, c, ctx);
  }
  SgdConfig c;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 0.01;
  return std::make_unique<Sgd>(n, c, ctx);
}

void optimizer_step_case(CudaDevice& dev, const std::string& arch) {
  const std::string dir = FP8RL_TEST_DATA "/goldens/" + arch;
  std::ifstream f(dir + "/train/train.json");
  const nlohmann::json g = nlohmann::json::parse(f);
  Model cpu_model = Model::load(dir), gpu_model = Model::load(dir);
  Context gpu = dev.context();
  gpu_model.to_device(gpu);
  LoraAdapter cpu_adapter = LoraAdapter::load_peft(dir + "/adapter", cpu_model);
  LoraAdapter gpu_adapter = LoraAdapter::load_peft(dir + "/adapter", gpu_model);
  gpu_adapter.to_device(gpu);
  const Tensor start = cpu_adapter.host_masters();
  const int64_t n = start.numel();
  // The same gradients for both steps: the CUDA pass's, on the device and on the host.
  const LossAndGrads lg = loss_and_grads(gpu, gpu_model, gpu_adapter, train_batch_of(g, true));
  const DeviceBuffer grad_storage(gpu, size_t(n) * sizeof(float));
  const TensorView grads = grad_storage.view({n}, DType::f32);
  ops::copy(gpu, TensorView(const_cast<float*>(lg.grads.data()), DType::f32, {n}), grads);
  Context cpu;
  for (bool adamw : {true, false}) {
    const std::string name = arch + (adamw ? " adamw" : " sgd nesterov") + " step";
    cpu_adapter.set_masters(start);
    gpu_adapter.set_masters(start);
    TrainStepConfig tc;
    tc.schedule.type = LrSchedulerType::constant;
    tc.learning_rate = 1e-2;
    tc.max_grad_norm = 1e-3;  // below the norm: the clipping factor is in play
    TrainStep cpu_step(make(adamw, n, cpu), tc), gpu_step(make(adamw, n, gpu), tc);
    bool norms_equal = true, clipped = true;
    for (int s = 0; s < 2; ++s) {  // the second step reads moments the first one wrote
      std::vector<float> host_grads = lg.grads;
      const TensorView m = cpu_adapter.master_params();
      const StepResult rc = cpu_step.step({m.ptr<float>(), size_t(n)}, host_grads, lg.loss);
      const StepResult rg = gpu_step.step(gpu, gpu_adapter.master_params(), grads, lg.loss,
                                          gpu_adapter.compute_params());
      norms_equal = norms_equal && rc.grad_norm == rg.grad_norm && !rc.skipped && !rg.skipped;
      clipped = clipped && rc.grad_norm > tc.max_grad_norm;
    }
    check(norms_equal && clipped, name + ": gradient norms equal (bit-exact), clipping active");
    const Tensor want = cpu_adapter.host_masters(), got = gpu_adapter.host_masters();
    const int64_t masters = bits_differing(want, got);
    int64_t state = 0;
    const auto cs = cpu_step.optimizer().state(), gs = gpu_step.optimizer().state();
    for (size_t i = 0; i < cs.size(); ++i)
      state += bits_differing(cs[i].second, download(gpu, gs[i].second));
    Tensor want_copy = Tensor::empty({n}, DType::bf16);
    convert(want.ptr<float>(), DType::f32, want_copy.ptr<uint16_t>(), DType::bf16, size_t(n));
    const int64_t copies = bits_differing(want_copy, download(gpu, gpu_adapter.compute_params()));
    char line[256];
    std::snprintf(line, sizeof line,
                  "%s: elements differing from the CPU step: masters %lld, state (%zu tensors) "
                  "%lld, compute copies %lld (bit-exact: 0)",
                  name.c_str(), (long long)masters, gs.size(), (long long)state, (long long)copies);
    check(masters == 0 && state == 0 && copies == 0 && cs.size() == gs.size() && !gs.empty(), line);
    const int64_t moved = bits_differing(start, got);
    check(moved > n / 2, name + ": control: the step moved " + std::to_string(moved) + " of " +
                             std::to_string(n) + " masters");
  }
}

// A small engine's options: 64 MiB of KV, up to 8 sequences, 64 tokens a step.
EngineOptions small_engine_options() {
  EngineOptions o;
  o.kv_memory_bytes = size_t(64) << 20;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 64;
  return o;
}

// Seeded requests for n = 3 samples of `tokens` tokens each (ignore_eos, processed logprobs)
// from prompts of `length` ids of `ids` starting at each of `firsts`.
std::vector<GenerationRequest> seeded_requests(const std::vector<int32_t>& ids,
                                               std::initializer_list<size_t> firsts, size_t length,
                                               int tokens, uint64_t seed, float temperature) {
  std::vector<GenerationRequest> requests;
  for (size_t first : firsts) {
    GenerationRequest q;
    q.prompt_ids.assign(ids.begin() + ptrdiff_t(first), ids.begin() + ptrdiff_t(first + length));
    q.params.n = 3;
    q.params.max_tokens = tokens;
    q.params.temperature = temperature;
    q.params.seed = seed;
    q.params.ignore_eos = true;
    q.params.processed_logprobs = true;
    requests.push_back(q);
  }
  return requests;
}

// The engine's processed logprobs of a fixed set of seeded samples, flattened.
std::vector<float> rollout_logprobs(Context& ctx, const Model& m, const LoraAdapter& adapter,
                                    const std::vector<int32_t>& ids) {
  Engine engine(ctx, m, &adapter, nullptr, {}, small_engine_options());
  engine.set_adapter_version(adapter.version());
  const std::vector<GenerationRequest> requests = seeded_requests(ids, {0, 7}, 6, 4, 7, 1.0f);
  std::vector<float> out;
  for (const RequestOutput& r : engine.generate(requests))
    for (const CompletionOutput& c : r.completions)
      out.insert(out.end(), c.processed_logprobs.begin(), c.processed_logprobs.end());
  return out;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

void adapter_update_reaches_engine_case(CudaDevice& dev) {
  const std::string dir = FP8RL_TEST_DATA "/goldens/qwen3";
  std::ifstream f(dir + "/train/train.json");
  const nlohmann::json g = nlohmann::json::parse(f);
  Context gpu = dev.context();
  Model m = Model::load(dir);
  m.to_device(gpu);
  LoraAdapter adapter = LoraAdapter::load_peft(dir + "/adapter", m);
  adapter.to_device(gpu);
  const TrainBatch batch = train_batch_of(g, true);
  const std::vector<int32_t> prompt_ids = batch.ids;
  const Tensor start = adapter.host_masters();
  const int64_t n = start.numel();
  const DeviceBuffer grad_storage(gpu, size_t(n) * sizeof(float));
  const TensorView grads = grad_storage.view({n}, DType::f32);
  // d loss / d adapter on the device, as the trainers take it.
  auto gradients = [&] {
    LogprobPass pass(gpu, m, &adapter);
    pass.forward(batch.packed(), {});
    std::vector<float> dlogprob(batch.ids.size(), 0.0f);
    for (size_t t = 0; t < batch.ids.size(); ++t)
      if (batch.targets[t] != ops::kIgnoreIndex) dlogprob[t] = -1.0f / float(batch.counted);
    ops::fill_zero(gpu, grads);
    pass.backward(dlogprob, grads);
  };
  TrainStepConfig tc;
  tc.schedule.type = LrSchedulerType::constant;
  tc.learning_rate = 5e-2;
  const std::vector<float> before = rollout_logprobs(gpu, m, adapter, prompt_ids);
  const std::vector<float> again = rollout_logprobs(gpu, m, adapter, prompt_ids);
  // Control: a step that does not write the compute copies (the masters change, the forward's
  // copies do not) leaves the engine where it was: the copies are what it reads.
  gradients();
  TrainStep unwritten(make(true, n, gpu), tc);
  unwritten.step(gpu, adapter.master_params(), grads, 1.0);
  adapter.mark_updated();
  const std::vector<float> stale = rollout_logprobs(gpu, m, adapter, prompt_ids);
  adapter.set_masters(start);
  // The trainers' step: masters and compute copies in one pass, then only the version bump.
  gradients();
  TrainStep step(make(true, n, gpu), tc);
  const StepResult r =
      step.step(gpu, adapter.master_params(), grads, 1.0, adapter.compute_params());
  adapter.mark_updated();
  const std::vector<float> after = rollout_logprobs(gpu, m, adapter, prompt_ids);
  const double moved = max_diff(before, after), no_step = max_diff(before, again),
               no_copy = max_diff(before, stale);
  char line[256];
  std::snprintf(line, sizeof line,
                "optimizer step -> engine logprobs: max |diff| %.3g after the step (> 1e-3); "
                "controls: %.3g without a step, %.3g without the compute copies (< moved / 100)",
                moved, no_step, no_copy);
  check(!r.skipped && !before.empty() && moved > 1e-3 && no_step < moved / 100 &&
            no_copy < moved / 100,
        line);
}

// On-policy exactness (ops/exactness.h): the engine's processed logprob of
// every sampled token equals, bit for bit, the logprob the trainer's pass computes for the
// same token (prompt + completion packed as a sequence, the same temperature) when the device
// runs its batch-invariant kernels; the engine decodes 3 samples of 2 prompts with CUDA
// graphs, shared prompt blocks and decode steps of up to 6 rows, the pass runs the 6 sequences
// as one packed prefill. Negative control: with the mode off (the decode attention kernel,
// per-shape GEMM algorithms, the fused inference layers) the two differ.
double engine_vs_pass(Context& gpu, const Model& m, const LoraAdapter& adapter,
                      const std::vector<int32_t>& ids, bool invariant) {
  std::optional<ops::BatchInvariantScope> scope;
  if (invariant) scope.emplace(gpu);
  constexpr float kTemperature = 0.8f;
  const std::vector<GenerationRequest> requests =
      seeded_requests(ids, {0, 5}, 7, 12, 11, kTemperature);
  std::vector<RequestOutput> outs;
  {
    Engine engine(gpu, m, &adapter, nullptr, {}, small_engine_options());
    engine.set_adapter_version(adapter.version());
    outs = engine.generate(requests);
  }
  TrainBatch b;
  std::vector<float> engine_logp;
  std::vector<size_t> at;  // position in the pack of each sampled token's logprob
  for (size_t i = 0; i < outs.size(); ++i)
    for (const CompletionOutput& c : outs[i].completions) {
      const std::vector<int32_t>& p = requests[i].prompt_ids;
      const size_t base = b.ids.size();
      b.ids.insert(b.ids.end(), p.begin(), p.end());
      b.ids.insert(b.ids.end(), c.ids.begin(), c.ids.end());
      b.targets.resize(b.ids.size(), ops::kIgnoreIndex);
      for (size_t k = 0; k < c.ids.size(); ++k) {
        b.targets[base + p.size() - 1 + k] = c.ids[k];
        at.push_back(base + p.size() - 1 + k);
      }
      b.cu.push_back(int64_t(b.ids.size()));
      engine_logp.insert(engine_logp.end(), c.processed_logprobs.begin(),
                         c.processed_logprobs.end());
    }
  LogprobPass pass(gpu, m, &adapter);
  PassOptions po;
  po.temperature = kTemperature;
  pass.forward(b.packed(), po);
  double worst = engine_logp.size() == at.size() && !at.empty() ? 0.0 : INFINITY;
  for (size_t k = 0; k < at.size() && k < engine_logp.size(); ++k)
    worst = std::max(worst, std::fabs(double(pass.logprobs()[at[k]]) - engine_logp[k]));
  return worst;
}

void on_policy_exact_case(CudaDevice& dev, const std::string& arch, Fp8Scheme scheme) {
  const std::string dir = FP8RL_TEST_DATA "/goldens/" + arch;
  std::ifstream f(dir + "/train/train.json");
  const nlohmann::json g = nlohmann::json::parse(f);
  LoadOptions lo;
  lo.fp8 = scheme;
  Context gpu = dev.context();
  Model m = Model::load(dir, lo);
  m.to_device(gpu);
  LoraAdapter adapter = LoraAdapter::load_peft(dir + "/adapter", m);
  adapter.to_device(gpu);
  const std::vector<int32_t> ids = train_batch_of(g, true).ids;
  const double exact = engine_vs_pass(gpu, m, adapter, ids, true);
  const double control = engine_vs_pass(gpu, m, adapter, ids, false);
  char line[256];
  std::snprintf(line, sizeof line,
                "%s %s on_policy_exact: engine vs pass logprob max |diff| %.3g (exactly 0); "
                "control, mode off: %.3g (> 0)",
                arch.c_str(), std::string(scheme_name(scheme)).c_str(), exact, control);
  check(exact == 0.0 && control > 0.0, line);
}

// All device memory from one region (CudaDeviceOptions::device_region): after a training pass
// with checkpointing and an AdamW step's state, every device buffer (weights and their scales,
// norms, the adapter's masters and compute copies, the optimizer's moments, the scratch arena)
// lies in the device's region, and the region's live blocks account for every byte the backend
// has allocated. The pass's loss and gradients equal, bit for bit, the same pass on a device
// that makes one cudaMalloc per buffer, where (the control) none of these buffers lies in a
// region.
void device_region_case(CudaDevice& dev, const std::string& arch) {
  const std::string dir = FP8RL_TEST_DATA "/goldens/" + arch;
  std::ifstream f(dir + "/train/train.json");
  const nlohmann::json g = nlohmann::json::parse(f);
  const TrainBatch batch = train_batch_of(g, true);
  struct Run {
    LossAndGrads lg;
    int in_region = 0, buffers = 0;
    size_t allocated = 0;
    ops::DeviceRegionInfo info;
  };
  auto run = [&](CudaDevice& d) {
    LoadOptions lo;
    lo.fp8 = Fp8Scheme::row;
    Model m = Model::load(dir, lo);
    Context gpu = d.context();
    m.to_device(gpu);
    LoraAdapter a = LoraAdapter::load_peft(dir + "/adapter", m);
    a.to_device(gpu);
    Run r;
    r.lg = loss_and_grads(gpu, m, a, batch, true);
    const auto opt = make(true, a.master_params().numel(), gpu);
    std::vector<const void*> buffers = {m.embed.data, m.final_norm.data, a.master_params().data,
                                        a.compute_params().data, ops::scratch_base(gpu)};
    for (const LayerWeights& l : m.layers) {
      buffers.push_back(l.input_norm.data);
      for (int p = 0; p < 7; ++p)
        for (const TensorView* t : {&l.projection(p)->weight, &l.projection(p)->scales})
          buffers.push_back(t->data);
    }
    for (const auto& st : opt->state()) buffers.push_back(st.second.data);
    for (const void* p : buffers) r.in_region += ops::in_device_region(gpu, p);
    r.buffers = int(buffers.size());
    r.info = ops::device_region_info(gpu);
    r.allocated = ops::device_allocated_bytes(gpu);
    return r;
  };
  const Run on = run(dev);
  CudaDeviceOptions o;
  o.device_region = false;
  CudaDevice plain(o);
  const Run off = run(plain);
  // Each live block rounds its bytes up to 256: used exceeds what was asked by < 256 a block.
  const bool accounted = on.info.used >= on.allocated &&
                         on.info.used - on.allocated < on.info.blocks * 256 &&
                         on.info.committed >= on.info.used && on.info.reserved >= on.info.committed;
  char line[320];
  std::snprintf(line, sizeof line,
                "%s device region: %d of %d buffers in it, %zu live blocks, %.1f MiB used for "
                "%.1f MiB allocated, %.1f MiB mapped of %.1f GiB reserved",
                arch.c_str(), on.in_region, on.buffers, on.info.blocks,
                double(on.info.used) / (1 << 20), double(on.allocated) / (1 << 20),
                double(on.info.committed) / (1 << 20), double(on.info.reserved) / (1 << 30));
  check(on.info.on && on.in_region == on.buffers && accounted, line);
  check(on.lg.loss == off.lg.loss && on.lg.grads == off.lg.grads,
        arch + " device region: loss and gradients equal those without it, bit for bit");
  check(!off.info.on && off.in_region == 0,
        arch + " device region: control: without it " + std::to_string(off.in_region) + " of " +
            std::to_string(off.buffers) + " buffers in a region");
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
  for (const char* arch : {"llama", "qwen3"}) {
    try {
      optimizer_step_case(dev, arch);
    } catch (const std::exception& e) {
      check(false, std::string(arch) + " optimizer step: " + e.what());
    }
  }
  try {
    device_region_case(dev, "qwen3");
  } catch (const std::exception& e) {
    check(false, std::string("device region: ") + e.what());
  }
  try {
    adapter_update_reaches_engine_case(dev);
  } catch (const std::exception& e) {
    check(false, std::string("optimizer step -> engine: ") + e.what());
  }
  for (const char* arch : {"llama", "qwen2", "qwen3", "mistral", "gemma3"})
    for (Fp8Scheme scheme : {Fp8Scheme::off, Fp8Scheme::row}) {
      try {
        on_policy_exact_case(dev, arch, scheme);
      } catch (const std::exception& e) {
        check(false, std::string(arch) + " on_policy_exact: " + e.what());
      }
    }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "OK", g_failures);
  return g_failures ? 1 : 0;
}
