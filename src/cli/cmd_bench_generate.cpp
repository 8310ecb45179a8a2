// fp8rl bench generate (--model DIR | --preset NAME) --prompts P --n N --prompt-tokens L
//                      --max-tokens G [--fp8 ...] [--lora-r R [--lora-alpha A]]
//                      [--kv-memory GIB] [--device cuda|cpu] [--max-num-seqs S]
//                      [--max-num-batched-tokens T] [--device-option KEY=VALUE]...
//                      [--out FILE.json]
//
// Times the generation engine on P random prompts of L tokens, n samples each, G new tokens
// (eos ignored, temperature 1: the GRPO rollout shape) and prints JSON: output tokens/s, the
// time split (device step, host), an op profile of a short extra run (attention, linears,
// sampling, ...), bytes a decode step must move against the copy bandwidth measured in the
// same run (the roofline), KV blocks used and shared, peak memory. --lora-r R generates with a
// random LoRA adapter of rank R on all seven projections (A and B nonzero), unmerged as a
// user's adapter runs: what a GRPO rollout pays for its adapter.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include "cli/bench_model.h"
#include "cli/bench_profile.h"
#include "cli/common.h"
#include "core/check.h"
#include "core/wall_clock.h"
#include "engine/engine.h"
#include "ops/device.h"
#include "ops/ops.h"

namespace fp8rl::cli {

namespace {

using json = nlohmann::json;
struct BenchGenerateOptions : BenchModelOptions {
  BenchGenerateOptions() {
    fp8 = "off";
    lora_r = 0;
  }
  std::string kv_dtype = "bf16";
  int64_t prompts = 32, n = 8, prompt_tokens = 128, max_tokens = 512;
  int64_t max_num_seqs = 256, max_num_batched_tokens = 8192;
  double kv_memory_gib = 0;
};

// Device-to-device copy bandwidth (read + write bytes per second) of a 1 GiB buffer.
double copy_bandwidth(Context& ctx) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer a(ctx, bytes), b(ctx, bytes);
  const TensorView va = a.view({int64_t(bytes)}, DType::f8e4m3);
  const TensorView vb = b.view({int64_t(bytes)}, DType::f8e4m3);
  ops::fill_zero(ctx, va);
  ops::copy(ctx, va, vb);
  ops::synchronize(ctx);
  const int iters = 10;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) ops::copy(ctx, va, vb);
  ops::synchronize(ctx);
  return 2.0 * double(bytes) * iters / seconds_since(t0);
}

std::vector<GenerationRequest> make_requests(const BenchGenerateOptions& o, int64_t vocab,
                                             int64_t max_tokens) {
  std::vector<GenerationRequest> reqs;
  for (int64_t p = 0; p < o.prompts; ++p) {
    GenerationRequest r;
    for (int64_t i = 0; i < o.prompt_tokens; ++i)
      r.prompt_ids.push_back(
          int32_t((uint64_t(p * 7919 + i) * 2654435761ULL + 12345) % uint64_t(vocab)));
    r.params.n = int(o.n);
    r.params.max_tokens = int(max_tokens);
    r.params.temperature = 1.0;
    r.params.ignore_eos = true;
    r.params.seed = o.seed + uint64_t(p);
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void run_bench_generate(const BenchGenerateOptions& o) {
  CHECK(o.prompts > 0 && o.n > 0 && o.prompt_tokens > 0 && o.max_tokens > 0,
        "bench generate: --prompts, --n, --prompt-tokens and --max-tokens must be positive");
  const KvDType kv_dtype = parse_kv_dtype(o.kv_dtype);
  BenchModel bench(o, "bench generate",
                   {ControlScope::cuda, ControlScope::model, ControlScope::engine},
                   BenchLoraInit::random);
  const DeviceControls& dc = bench.controls();
  Context& ctx = bench.ctx();
  CudaDevice* dev = bench.session().cuda();
  const Device device = ctx.device;
  Model& model = bench.model();
  const ModelConfig& config = model.config();
  const double bandwidth = device == Device::cuda ? copy_bandwidth(ctx) : 0.0;

  EngineOptions eo;
  eo.kv_memory_bytes = size_t(o.kv_memory_gib * double(size_t(1) << 30));
  eo.kv_dtype = kv_dtype;
  eo.max_num_seqs = o.max_num_seqs;
  eo.max_num_batched_tokens = o.max_num_batched_tokens;
  eo.seed = o.seed;
  eo.shared_prefix_attention = dc.shared_prefix;
  eo.shared_prefix_min_tokens = dc.shared_prefix_min_tokens;
  eo.async_scheduling = dc.async_scheduling;
  // The adapter's version keys the prefix cache, as for a user's adapter (ModelSession).
  const auto make_engine = [&](const EngineOptions& options) {
    auto e = std::make_unique<Engine>(ctx, model, bench.adapter(), nullptr, std::vector<int32_t>{},
                                      options);
    if (bench.adapter() != nullptr) e->set_adapter_version(bench.adapter()->version());
    return e;
  };
  std::unique_ptr<Engine> engine_ptr = make_engine(eo);
  Engine& engine = *engine_ptr;

  // Warm-up: the GEMM plans of every batch size the run meets are made here, not timed.
  {
    BenchGenerateOptions w = o;
    w.prompts = std::min<int64_t>(o.prompts, 4);
    engine.generate(make_requests(w, config.vocab_size, std::min<int64_t>(o.max_tokens, 16)));
  }
  const EngineStats before = engine.stats();
  const std::vector<GenerationRequest> reqs = make_requests(o, config.vocab_size, o.max_tokens);
  const auto t0 = Clock::now();
  const std::vector<RequestOutput> out = engine.generate(reqs);
  const double wall = seconds_since(t0);
  const EngineStats s = engine.stats();
  int64_t produced = 0;
  double logprob_sum = 0;
  for (const RequestOutput& r : out)
    for (const CompletionOutput& c : r.completions) {
      produced += int64_t(c.ids.size());
      for (const float lp : c.logprobs) logprob_sum += lp;
    }
  const int64_t expected = o.prompts * o.n * o.max_tokens;
  CHECK(produced == expected, "bench generate: {} tokens generated, expected {}", produced,
        expected);

  // What one decode step of all P*n sequences must read: every weight once, and the KV of
  // every sequence at the mean context (prompt + G/2).
  const int64_t seqs = o.prompts * o.n;
  const double kv_token = double(KvPool::block_bytes(config, ctx, kv_dtype)) / double(kKvBlockSize);
  const double mean_context = double(o.prompt_tokens) + double(o.max_tokens) / 2.0;
  const double step_bytes = double(model.device_bytes()) + double(seqs) * mean_context * kv_token;

  json result;
  result["command"] = "bench generate";
  result["model"] = o.preset.empty() ? o.model : o.preset;
  result["weights"] = bench.weights();
  result["fp8"] = std::string(scheme_name(model.scheme()));
  result["kv_dtype"] = o.kv_dtype;
  result["lora_r"] = bench.adapter() != nullptr ? bench.adapter()->config().r : 0;
  if (bench.adapter() != nullptr) result["lora_alpha"] = bench.adapter()->config().lora_alpha;
  result["shared_prefix_attention"] = dc.shared_prefix;
  result["stacked_qkv"] = !model.layers.empty() && !model.layers[0].qkv.weight.empty();
  report_cuda_controls(dc, device, result);
  result["device"] = bench.device_name();
  result["prompts"] = o.prompts;
  result["n"] = o.n;
  result["prompt_tokens"] = o.prompt_tokens;
  result["max_tokens"] = o.max_tokens;
  result["output_tokens"] = produced;
  result["wall_seconds"] = wall;
  result["output_tokens_per_second"] = double(produced) / wall;
  // What was generated, to tell runs apart (an adapter's effect, a control's): the mean
  // logprob of the sampled tokens and the first completion's first ids.
  result["mean_logprob"] = logprob_sum / double(produced);
  const std::vector<int32_t>& first = out.at(0).completions.at(0).ids;
  result["first_completion_ids"] =
      std::vector<int32_t>(first.begin(), first.begin() + std::min<size_t>(first.size(), 16));
  result["steps"] = s.steps - before.steps;
  const double device_s = s.seconds_device - before.seconds_device;
  const double host_s = s.seconds_host - before.seconds_host;
  const bool async = dc.async_scheduling.value_or(device == Device::cuda);
  result["async_scheduling"] = async;
  result["time_split"] = {
      {"device_step_seconds", device_s},
      {"device_idle_fraction", std::max(0.0, 1.0 - device_s / wall)},
      {"host_seconds", host_s},
      {"host_fraction", host_s / wall},
      {"steps_planned_ahead", s.steps_planned_ahead - before.steps_planned_ahead},
      {"rows_dropped", s.rows_dropped - before.rows_dropped},
      {"note", device == Device::cpu
                   ? "device_step_seconds: the forward's time (the CPU's ops finish before they "
                     "return, so the host's work adds to it)"
               : async ? "device_step_seconds: CUDA events around each step's device work; the "
                         "host plans step k+1 while step k runs, so its host_seconds overlap the "
                         "device's and the device idles for device_idle_fraction of the run"
                       : "device_step_seconds: CUDA events around each step's device work; the "
                         "engine prepares step k+1 after step k (async_scheduling=false): the "
                         "device idles while the host works"}};
  result["decode_step"] = {{"bytes", step_bytes},
                           {"weights_bytes", model.device_bytes()},
                           {"kv_bytes_at_mean_context", double(seqs) * mean_context * kv_token},
                           {"copy_bandwidth_bytes_per_s", bandwidth},
                           {"floor_seconds", bandwidth > 0 ? step_bytes / bandwidth : 0.0},
                           {"roofline_output_tokens_per_s",
                            bandwidth > 0 ? double(seqs) / (step_bytes / bandwidth) : 0.0}};
  result["kv"] = {{"blocks", s.kv_blocks},
                  {"bytes", s.kv_bytes},
                  {"peak_blocks_used", s.kv_blocks_peak_used},
                  {"peak_blocks_shared", s.kv_blocks_peak_shared},
                  {"prefix_hit_tokens", s.prefix_hit_tokens - before.prefix_hit_tokens},
                  {"preemptions", s.preemptions - before.preemptions}};
  result["shared_prefix"] = {
      {"min_tokens", eo.shared_prefix_min_tokens},
      {"steps", s.shared_prefix_steps - before.shared_prefix_steps},
      {"grouped_sequence_steps", s.shared_prefix_seq_steps - before.shared_prefix_seq_steps}};
  result["scratch_plan_bytes"] = s.scratch_bytes;
  result["cuda_graphs"] = {{"graph_steps", s.graph_steps - before.graph_steps},
                           {"captured", s.graphs_captured}};
  if (device == Device::cuda) {
    const size_t peak = dev->peak_allocated(), arena_peak = dev->arena_high_water();
    const size_t used = dev->memory_used();
    engine_ptr.reset();
    // The op split of a short run (the same batch, 32 new tokens) with CUDA events around
    // every op: eager steps (events cannot be timed inside a replayed graph), so the
    // per-launch overhead the graphs remove shows in it. The detail names each op's shape,
    // which separates the prefill's token count from the decode steps' batch.
    BenchGenerateOptions p = o;
    EngineOptions peo = eo;
    peo.cuda_graphs = false;
    // Under a budget (--gpu-memory) the pool takes what it leaves, as the measured run's did.
    peo.kv_memory_bytes = o.gpu_memory ? eo.kv_memory_bytes : size_t(8) << 30;
    std::unique_ptr<Engine> profiled = make_engine(peo);
    dev->reset_profile();
    dev->set_profiling(true);
    profiled->generate(make_requests(p, config.vocab_size, std::min<int64_t>(o.max_tokens, 32)));
    const std::vector<OpTime> prof = dev->profile();
    dev->set_profiling(false);
    result["op_profile_short_run"] = op_split(prof);
    result["op_profile_detail"] = op_detail(prof, 40);
    result["memory"] = {{"peak_allocated_bytes", peak},
                        {"weights_bytes", model.device_bytes()},
                        {"kv_bytes", s.kv_bytes},
                        {"arena_peak_bytes", arena_peak},
                        {"device_used_bytes", used}};
  } else {
    result["memory"] = {{"arena_peak_bytes", ctx.scratch->high_water()}, {"kv_bytes", s.kv_bytes}};
  }
  print_bench_json(result, o.out);
}

}  // namespace

void add_bench_generate_command(CLI::App& bench) {
  auto o = std::make_shared<BenchGenerateOptions>();
  CLI::App* c = bench.add_subcommand(
      "generate", "Time the generation engine: output tokens/s, time split, roofline, KV use");
  add_bench_model_options(*c, *o);
  add_bench_lora_options(*c, *o);
  c->add_option("--prompts", o->prompts, "Prompts")->capture_default_str();
  c->add_option("--n", o->n, "Samples per prompt")->capture_default_str();
  c->add_option("--prompt-tokens", o->prompt_tokens, "Tokens per prompt")->capture_default_str();
  c->add_option("--max-tokens", o->max_tokens, "New tokens per sample (eos ignored)")
      ->capture_default_str();
  c->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype: bf16 or fp8")->capture_default_str();
  c->add_option("--kv-memory", o->kv_memory_gib, "KV cache GiB (default: 90% of free memory)");
  c->add_option("--max-num-seqs", o->max_num_seqs, "Sequences per step")->capture_default_str();
  c->add_option("--max-num-batched-tokens", o->max_num_batched_tokens, "Tokens per step")
      ->capture_default_str();
  c->callback([o] { run_bench_generate(*o); });
}

}  // namespace fp8rl::cli
