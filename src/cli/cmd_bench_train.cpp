// fp8rl bench train (--model DIR | --preset NAME) --batch B --seq T --lora-r R [--fp8 ...]
//                   [--checkpointing [--offload]] [--steps N] [--warmup W]
//                   [--device cuda|cpu] [--device-option KEY=VALUE]... [--out F]
//
// Times LoRA training steps: B random sequences of T tokens, an adapter of rank R (alpha A,
// default 2R) on all seven projections, AdamW; per step the training forward with the chunked
// cross-entropy, the backward, and the guarded optimizer step (gradient norm, clipping to 1.0,
// the update of the masters and of the compute copies, all on the model's device). Prints JSON:
// tokens/s, the step split, peak memory. The HF transformers + PEFT anchor of the same shapes
// is tools/bench/hf_train.py (run in the same GPU call).
#include <memory>
#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include "cli/bench_model.h"
#include "cli/bench_profile.h"
#include "core/check.h"
#include "core/wall_clock.h"
#include "model/adapter.h"
#include "ops/backward.h"
#include "ops/device.h"
#include "ops/memory.h"
#include "train/logprob_pass.h"
#include "train/optimizer.h"
#include "train/train_step.h"

namespace fp8rl::cli {

void add_bench_train_command(CLI::App& bench);

namespace {

struct BenchTrainOptions : BenchModelOptions {
  int64_t batch = 8, seq = 1024, steps = 5, warmup = 2;
  bool checkpointing = false;
  bool offload = false;
};

void run_bench_train(const BenchTrainOptions& o) {
  CHECK(o.batch > 0 && o.seq > 1 && o.steps > 0 && o.warmup >= 0,
        "bench train: --batch and --steps must be positive, --seq > 1, --warmup >= 0");
  CHECK(o.lora_r > 0, "bench train: --lora-r must be positive, got {}", o.lora_r);
  BenchModel bench(o, "bench train", {ControlScope::cuda, ControlScope::model},
                   BenchLoraInit::peft);
  Context& ctx = bench.ctx();
  Model& model = bench.model();
  LoraAdapter& adapter = bench.fresh_adapter();
  const ModelConfig& c = model.config();

  // B sequences of T random ids; every position but each sequence's last is a target.
  const std::vector<int32_t> ids = random_token_ids(o.batch * o.seq, c.vocab_size, o.seed + 7);
  std::vector<int32_t> targets;
  std::vector<int64_t> cu{0};
  for (int64_t s = 0; s < o.batch; ++s) {
    for (int64_t t = 0; t < o.seq; ++t)
      targets.push_back(t + 1 < o.seq ? ids[size_t(s * o.seq + t + 1)] : ops::kIgnoreIndex);
    cu.push_back((s + 1) * o.seq);
  }
  const int64_t counted = o.batch * (o.seq - 1);
  std::vector<float> dlogprob(ids.size(), 0.0f);
  for (size_t t = 0; t < ids.size(); ++t)
    if (targets[t] != ops::kIgnoreIndex) dlogprob[t] = -1.0f / float(counted);

  const int64_t p = adapter.master_params().numel();
  TrainStepConfig tc;
  tc.schedule.type = LrSchedulerType::constant;
  tc.learning_rate = 1e-4;
  TrainStep train_step(std::make_unique<AdamW>(p, AdamWConfig{}, ctx), tc);
  const DeviceBuffer grad_storage(ctx, size_t(p) * sizeof(float));
  const TensorView grads = grad_storage.view({p}, DType::f32);  // [P] f32 on the device
  LogprobPass pass(ctx, model, &adapter);
  PassOptions po;
  po.checkpointing = o.checkpointing;
  po.offload = o.offload;
  const PassPlan plan = pass.plan({ids, targets, cu}, po);
  double fwd = 0, bwd = 0, opt = 0, loss = 0;
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    ops::synchronize(ctx);
    const auto t0 = Clock::now();
    pass.forward({ids, targets, cu}, po);  // ends with the logprobs on the host (synchronized)
    const double f = seconds_since(t0);
    loss = 0;
    for (size_t t = 0; t < ids.size(); ++t) loss -= pass.logprobs()[t];
    loss /= double(counted);
    const auto t1 = Clock::now();
    ops::fill_zero(ctx, grads);
    pass.backward(dlogprob, grads);
    ops::synchronize(ctx);
    const double b = seconds_since(t1);
    const auto t2 = Clock::now();
    if (!train_step.step(ctx, adapter.master_params(), grads, loss, adapter.compute_params())
             .skipped)
      adapter.mark_updated();
    ops::synchronize(ctx);
    const double u = seconds_since(t2);
    if (step >= o.warmup) fwd += f, bwd += b, opt += u;
  }
  const double n = double(o.steps), total = (fwd + bwd + opt) / n;
  // One more step with CUDA events around every op: where the time goes (per op family).
  nlohmann::json profile, detail;
  if (CudaDevice* dev = bench.session().cuda()) {
    dev->reset_profile();
    dev->set_profiling(true);
    pass.forward({ids, targets, cu}, po);
    ops::fill_zero(ctx, grads);
    pass.backward(dlogprob, grads);
    ops::synchronize(ctx);
    profile = op_split(dev->profile());
    detail = op_detail(dev->profile(), 40);
    dev->set_profiling(false);
  }
  nlohmann::json r;
  r["command"] = "bench train";
  r["model"] = o.preset.empty() ? o.model : o.preset;
  r["weights"] = bench.weights();
  r["fp8"] = std::string(scheme_name(model.scheme()));
  r["device"] = bench.device_name();
  report_cuda_controls(bench.controls(), ctx.device, r);
  r["batch"] = o.batch;
  r["seq"] = o.seq;
  r["lora_r"] = o.lora_r;
  r["lora_alpha"] = adapter.config().lora_alpha;
  r["lora_params"] = p;
  r["checkpointing"] = o.checkpointing;
  r["offload"] = o.offload;
  r["steps"] = o.steps;
  r["loss_last_step"] = loss;
  r["tokens_per_second"] = double(o.batch * o.seq) / total;
  r["step_seconds"] = total;
  r["split_seconds"] = {{"forward", fwd / n}, {"backward", bwd / n}, {"optimizer", opt / n}};
  r["plan"] = {{"saved_bytes", plan.saved_bytes},
               {"scratch_bytes", plan.scratch_bytes},
               {"kv_bytes", plan.kv_bytes},
               {"host_bytes", plan.host_bytes}};
  if (!profile.is_null()) r["op_profile_one_step"] = profile;
  if (!detail.is_null()) r["op_profile_detail"] = detail;
  if (CudaDevice* dev = bench.session().cuda())
    r["memory"] = {{"peak_allocated_bytes", dev->peak_allocated()},
                   {"weights_bytes", model.device_bytes()},
                   {"adapter_bytes", adapter.nbytes()}};
  if (const ops::DeviceRegionInfo dr = ops::device_region_info(ctx); dr.on)
    r["memory"]["device_region_bytes"] = dr.committed;
  print_bench_json(r, o.out);
}

}  // namespace

void add_bench_train_command(CLI::App& bench) {
  auto o = std::make_shared<BenchTrainOptions>();
  CLI::App* c = bench.add_subcommand(
      "train", "Time LoRA training steps: tokens/s, forward/backward/optimizer split, memory");
  add_bench_model_options(*c, *o);
  add_bench_lora_options(*c, *o);
  c->add_option("--batch", o->batch, "Sequences per step")->capture_default_str();
  c->add_option("--seq", o->seq, "Tokens per sequence")->capture_default_str();
  c->add_flag("--checkpointing", o->checkpointing, "Per-layer activation checkpointing");
  c->add_flag("--offload", o->offload,
              "With --checkpointing: the checkpointed layer inputs in pinned host memory");
  c->add_option("--steps", o->steps, "Timed steps")->capture_default_str();
  c->add_option("--warmup", o->warmup, "Untimed steps first")->capture_default_str();
  c->callback([o] { run_bench_train(*o); });
}

}  // namespace fp8rl::cli
