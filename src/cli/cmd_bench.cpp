// fp8rl bench forward (--model DIR | --preset NAME) --tokens N [--adapter DIR]
//                     [--fp8 off|row|block|tensor] [--device cuda|cpu] [--iters 5]
//                     [--logits last|all] [--device-option KEY=VALUE]... [--out FILE.json]
// fp8rl bench --list-device-options
//
// Times the one forward on a prefill of N tokens and prints JSON: tokens/s, the device time of
// each op family (CUDA events around every op in one extra forward), every distinct linear
// shape's achieved TFLOP/s next to the bare cuBLASLt GEMM of the same shape and scheme timed
// in the same run, and peak device memory. A --preset or a --model directory without weights
// (or with --random) gets random weights made on the device (Model::random). --adapter runs
// the forward with a PEFT adapter (its LoRA terms timed with the linears).
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include "cli/bench_model.h"
#include "cli/bench_profile.h"
#include "cli/common.h"
#include "cli/device_options.h"
#include "core/check.h"
#include "core/wall_clock.h"
#include "model/forward.h"
#include "ops/device.h"
#include "ops/ops.h"

namespace fp8rl::cli {

void add_bench_command(CLI::App& app);
void add_bench_generate_command(CLI::App& bench);  // cmd_bench_generate.cpp
void add_bench_train_command(CLI::App& bench);     // cmd_bench_train.cpp
void add_bench_grpo_command(CLI::App& bench);      // cmd_bench_grpo.cpp
void add_bench_ppo_command(CLI::App& bench);       // cmd_bench_ppo.cpp

namespace {

using json = nlohmann::json;
struct BenchOptions : BenchModelOptions {
  BenchOptions() {
    fp8 = "off";
    lora_r = 0;
  }
  std::string logits = "last";
  int64_t tokens = 8192;
  int iters = 5, warmup = 2, gemm_iters = 20;
};

// FLOPs of causal attention over a prefill of t tokens (q.k and p.v, 2 FLOPs per multiply-add).
double attention_flops(const ModelConfig& c, int64_t t) {
  double f = 0;
  for (const LayerConfig& l : c.layers) {
    const int64_t w = l.sliding && c.sliding_window > 0 ? c.sliding_window : t;
    double keys = 0;
    for (int64_t i = 0; i < t; ++i) keys += double(std::min<int64_t>(i + 1, w));
    f += 4.0 * double(c.head_dim) * double(c.num_heads) * keys;
  }
  return f;
}

struct Shape3 {
  int64_t n, k;
  std::string scheme;
  bool operator<(const Shape3& o) const {
    return std::tie(n, k, scheme) < std::tie(o.n, o.k, o.scheme);
  }
};

void run_bench_forward(const BenchOptions& o) {
  CHECK(o.tokens > 0 && o.iters > 0, "bench forward: --tokens and --iters must be positive");
  CHECK(o.logits == "last" || o.logits == "all", "--logits: last or all, not '{}'", o.logits);
  auto t_load = Clock::now();
  BenchModel bench(o, "bench forward", {ControlScope::cuda, ControlScope::model},
                   BenchLoraInit::peft);
  Context& ctx = bench.ctx();
  const Device device = ctx.device;
  CudaDevice* dev = bench.session().cuda();
  const Model& model = bench.model();
  const ModelConfig& config = model.config();
  const double load_seconds = seconds_since(t_load);

  const int64_t t = o.tokens, v = config.vocab_size;
  const LogitRows rows = o.logits == "all" ? LogitRows::all : LogitRows::last;
  const int64_t out_rows = rows == LogitRows::all ? t : 1;
  std::vector<int32_t> ids(static_cast<size_t>(t));
  const std::vector<int32_t> pos = iota(size_t(t));
  for (int64_t i = 0; i < t; ++i) ids[size_t(i)] = int32_t((i * 2654435761LL + 12345) % v);
  KvCache cache(config, t, ctx);
  Tensor logits = Tensor::empty({out_rows, v}, DType::f32);
  SequenceInput seq{ids, pos, &cache};
  auto run_once = [&] {
    cache.truncate(0);
    forward(ctx, model, bench.adapter(), {&seq, 1}, rows, logits);
    ops::synchronize(ctx);
  };

  for (int i = 0; i < o.warmup; ++i) run_once();
  std::vector<double> times;
  for (int i = 0; i < o.iters; ++i) {
    const auto t0 = Clock::now();
    run_once();
    times.push_back(seconds_since(t0));
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  bool finite = true;
  for (int64_t i = 0; i < logits.numel(); ++i)
    finite = finite && std::isfinite(logits.ptr<float>()[i]);

  // FLOPs of the linears per forward, by distinct shape.
  std::map<Shape3, std::pair<int64_t, const LinearWeight*>> shapes;  // -> (count, a weight)
  double linear_flops = 0;
  for (const auto& [name, w] : model.named_linears()) {
    auto& e = shapes[{w->out_features(), w->in_features(), std::string(scheme_name(w->scheme))}];
    e.first += 1;
    e.second = w;
    linear_flops += 2.0 * double(t) * double(w->out_features()) * double(w->in_features());
  }
  const double lm_flops = 2.0 * double(out_rows) * double(v) * double(config.hidden_size);
  const double attn_flops = attention_flops(config, t);

  json result;
  result["command"] = "bench forward";
  result["model"] = o.preset.empty() ? o.model : o.preset;
  result["weights"] = bench.weights();
  result["stacked_qkv"] = !model.layers.empty() && !model.layers[0].qkv.weight.empty();
  report_device_options(bench.controls(), device, result);
  if (!o.adapter.empty()) result["adapter"] = o.adapter;
  result["fp8"] = std::string(scheme_name(model.scheme()));
  result["device"] = bench.device_name();
  result["tokens"] = t;
  result["logits"] = o.logits;
  result["load_seconds"] = load_seconds;
  result["forward_seconds_median"] = median;
  result["forward_seconds_all"] = times;
  result["tokens_per_second"] = double(t) / median;
  result["logits_finite"] = finite;
  result["flops"] = {
      {"linears", linear_flops},
      {"lm_head", lm_flops},
      {"attention", attn_flops},
      {"total_tflop_per_s", (linear_flops + lm_flops + attn_flops) / median * 1e-12}};

  if (device == Device::cuda) {
    result["gemm_path"] = dev->gemm_path(model.scheme());
    // One more forward with CUDA events around every op.
    dev->reset_profile();
    dev->set_profiling(true);
    run_once();
    const std::vector<OpTime> prof = dev->profile();
    dev->set_profiling(false);
    double profiled = 0;
    const json split = op_split(prof, &profiled);
    result["op_ms"] = split;
    result["op_ms_total"] = profiled;

    // Each linear shape: in the model (quantization of unfused inputs included) vs the bare
    // cuBLASLt GEMM on the same shape, measured now.
    auto lookup = [&](const std::string& name) {
      for (const OpTime& p : prof)
        if (p.name == name) return std::make_pair(p.ms, p.calls);
      return std::make_pair(0.0, int64_t(0));
    };
    json lin = json::array();
    auto add_shape = [&](const LinearWeight& w, int64_t m, int64_t count, const std::string& role) {
      const std::string name =
          fmt::format("linear {}x{} {}", w.out_features(), w.in_features(), scheme_name(w.scheme));
      const auto [ms, calls] = lookup(name);
      const double flop = 2.0 * double(m) * double(w.out_features()) * double(w.in_features());
      const double model_ms = calls > 0 ? ms / double(calls) : 0;
      const double gemm_ms = dev->time_gemm(w, m, o.gemm_iters);
      lin.push_back({{"shape", name},
                     {"role", role},
                     {"m", m},
                     {"per_forward", count},
                     {"model_ms", model_ms},
                     {"model_tflop_per_s", model_ms > 0 ? flop / model_ms * 1e-9 : 0},
                     {"cublaslt_ms", gemm_ms},
                     {"cublaslt_tflop_per_s", flop / gemm_ms * 1e-9},
                     {"model_vs_cublaslt", model_ms > 0 ? gemm_ms / model_ms : 0}});
    };
    for (const auto& [s, e] : shapes) add_shape(*e.second, t, e.first, "decoder");
    add_shape(model.lm_head, out_rows, 1, "lm_head");
    result["linears"] = lin;
    result["memory"] = {{"peak_allocated_bytes", dev->peak_allocated()},
                        {"weights_bytes", model.device_bytes()},
                        {"adapter_bytes", bench.adapter() ? bench.adapter()->nbytes() : 0},
                        {"kv_cache_bytes", cache.pool().nbytes()},
                        {"arena_peak_bytes", dev->arena_high_water()},
                        {"device_used_bytes", dev->memory_used()}};
  } else {
    result["memory"] = {{"arena_peak_bytes", ctx.scratch->high_water()},
                        {"kv_cache_bytes", cache.pool().nbytes()}};
  }
  print_bench_json(result, o.out);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (JSON on stdout)");
  bench->require_subcommand(1);
  // Runs while the arguments are processed, before the subcommand requirement is checked, and
  // ends the command as --help does.
  bench->add_flag_callback(
      "--list-device-options",
      [] {
        fmt::print("{}", device_options_table());
        throw CLI::Success();
      },
      "Print the developer controls of --device-option KEY=VALUE (key, type, default, "
      "description) and exit");
  auto o = std::make_shared<BenchOptions>();
  CLI::App* c = bench->add_subcommand("forward",
                                      "Time a prefill forward: tokens/s, per-op split, "
                                      "linear TFLOP/s vs cuBLASLt, peak memory");
  add_bench_model_options(*c, *o);
  c->add_option("--adapter", o->adapter, kAdapterHelp);
  c->add_flag("--random", o->random, "Random weights even if --model has a checkpoint");
  c->add_option("--tokens", o->tokens, "Prefill length")->capture_default_str();
  c->add_option("--iters", o->iters, "Timed forwards (median reported)")->capture_default_str();
  c->add_option("--warmup", o->warmup, "Untimed forwards first")->capture_default_str();
  c->add_option("--gemm-iters", o->gemm_iters, "Calls per standalone GEMM timing")
      ->capture_default_str();
  c->add_option("--logits", o->logits, "last (one row, as a prefill for generation) or all")
      ->capture_default_str();
  c->callback([o] { run_bench_forward(*o); });
  add_bench_generate_command(*bench);
  add_bench_train_command(*bench);
  add_bench_grpo_command(*bench);
  add_bench_ppo_command(*bench);
}

}  // namespace fp8rl::cli
