// test_generate_gpu [--data DIR] [--arch NAME]  (NAME: a golden's architecture, or qwen3_moe:
// the random Qwen3-MoE model's greedy generation alone)
//
// The generation engine on CUDA against the same engine on the CPU (and HF's goldens): greedy
// tokens identical up to the first step whose top-2 logit gap is within twice the derived
// logit bound (where a correct bf16 forward may pick the other token), logprobs within that
// bound before it; an n-sample rollout with top-p that forks, copies on write and replays
// decode steps from CUDA graphs. Prints one line per case; exit 1 on a failure, 77 without a
// CUDA device.
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"
#include "model/forward.h"
#include "model/presets.h"
#include "ops/device.h"
#include "test_util.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;

namespace {

std::string g_data = FP8RL_TEST_DATA;
int g_failures = 0;

struct Run {
  std::vector<RequestOutput> out;
  EngineStats stats;
};

Run generate(Context& ctx, const Model& m, const std::vector<GenerationRequest>& reqs,
             bool graphs = true, bool shared_prefix = true) {
  EngineOptions o;
  o.shared_prefix_attention = shared_prefix;
  o.shared_prefix_min_tokens = 0;  // the path itself, at these short prompts
  o.max_num_seqs = 64;
  o.max_num_batched_tokens = 512;
  o.kv_memory_bytes = size_t(64) << 20;
  o.cuda_graphs = graphs;
  Engine e(ctx, m, nullptr, nullptr, {}, o);
  Run r;
  r.out = e.generate(reqs);
  r.stats = e.stats();
  return r;
}

// Logits of a prefill of ids on the CPU.
Tensor cpu_logits(const Model& cpu_model, const std::vector<int32_t>& ids) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  KvCache cache(cpu_model.config(), int64_t(ids.size()));
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
  Tensor logits = Tensor::empty({int64_t(ids.size()), cpu_model.config().vocab_size}, DType::f32);
  SequenceInput seq{ids, pos, &cache};
  forward(ctx, cpu_model, nullptr, {&seq, 1}, LogitRows::all, logits);
  return logits;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::abs(t.ptr<float>()[i])));
  return m;
}

// The goldens' prompts of `arch` as greedy requests of 12 tokens (eos ignored) with the top-2
// logprobs, whose gap tells a near-tie.
std::vector<GenerationRequest> golden_greedy_requests(const std::string& arch) {
  std::ifstream f(g_data + "/goldens/" + arch + "/generate.json");
  const nlohmann::json g = nlohmann::json::parse(f);
  std::vector<GenerationRequest> reqs;
  for (const auto& p : g["prompts"]) {
    GenerationRequest r;
    r.prompt_ids = p["prompt_ids"].get<std::vector<int32_t>>();
    r.params.temperature = 0;
    r.params.max_tokens = 12;
    r.params.ignore_eos = true;
    r.params.logprobs = 2;  // the reference's top-2 gap
    reqs.push_back(r);
  }
  return reqs;
}

// The bound of tests/tolerances.h for CUDA logits of this scheme: kCudaBf16Logits, and for
// FP8 cuda_fp8_logits_bound of the measured FP8 effect on the same prompts (CPU fp8 vs fp32).
// The checkpoint in `dir` (named `arch` in the output) generating `reqs`.
void greedy_model_case(CudaDevice& dev, const std::string& arch, const std::string& dir,
                       const std::vector<GenerationRequest>& reqs,
                       std::optional<Fp8Scheme> scheme) {
  LoadOptions lo;
  lo.fp8 = scheme;
  const Model cpu_model = Model::load(dir, lo);
  Model gpu_model = Model::load(dir, lo);
  Context gpu = dev.context();
  gpu_model.to_device(gpu);
  Arena arena;
  Context cpu{Device::cpu, &arena};
  const Run ref = generate(cpu, cpu_model, reqs);
  const Run got = generate(gpu, gpu_model, reqs);
  std::vector<int32_t> all_ids;
  for (const auto& r : reqs)
    all_ids.insert(all_ids.end(), r.prompt_ids.begin(), r.prompt_ids.end());
  const Tensor ref_logits = cpu_logits(cpu_model, all_ids);
  double rel_bound = kCudaBf16Logits;
  if (scheme && *scheme != Fp8Scheme::off)
    rel_bound =
        cuda_fp8_logits_bound(rel_max_diff(ref_logits, cpu_logits(Model::load(dir), all_ids)));
  const double bound = rel_bound * max_abs(ref_logits);
  int compared = 0, diverged = 0;
  double max_lp = 0;
  bool ok = true;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const CompletionOutput& a = ref.out[i].completions[0];
    const CompletionOutput& b = got.out[i].completions[0];
    for (size_t t = 0; t < a.ids.size(); ++t) {
      const double gap = a.top_logprobs[t][0].second - a.top_logprobs[t][1].second;
      if (b.ids[t] != a.ids[t]) {
        ++diverged;
        if (gap > 2 * bound) {
          ok = false;
          std::printf("  %s prompt %zu step %zu: token %d vs %d with a gap %.4f > %.4f\n",
                      arch.c_str(), i, t, b.ids[t], a.ids[t], gap, 2 * bound);
        }
        break;  // the contexts differ from here on
      }
      ++compared;
      max_lp = std::max(max_lp, double(std::abs(a.logprobs[t] - b.logprobs[t])));
    }
  }
  ok = ok && max_lp <= 2 * bound;
  std::printf(
      "%-4s generate %s %s: %d tokens equal, %d prompts diverged at a near-tie, "
      "max |dlogprob| %.4g (bound %.4g), graph steps %lld\n",
      ok ? "PASS" : "FAIL", arch.c_str(),
      scheme ? std::string(scheme_name(*scheme)).c_str() : "as-stored", compared, diverged, max_lp,
      2 * bound, (long long)got.stats.graph_steps);
  if (!ok) ++g_failures;
}

void greedy_case(CudaDevice& dev, const std::string& arch, std::optional<Fp8Scheme> scheme) {
  greedy_model_case(dev, arch, g_data + "/goldens/" + arch, golden_greedy_requests(arch), scheme);
}

// A tiny random Qwen3-MoE checkpoint (4 experts, top-2; weights of deviation 0.1, so routing
// is decided by clear margins) generating greedily on CUDA, decode steps from CUDA graphs,
// against the CPU engine: every expert scheme.
void moe_greedy_case(CudaDevice& dev) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("fp8rl_gpu_generate_moe_" + std::to_string(::getpid())))
                              .string();
  nlohmann::json c = preset_config_json("qwen3-moe-tiny");
  c["initializer_range"] = 0.1;
  write_random_checkpoint(c, dir, 7);
  std::vector<GenerationRequest> reqs;
  for (int p = 0; p < 4; ++p) {
    GenerationRequest r;
    for (int i = 0; i < 6 + 5 * p; ++i)
      r.prompt_ids.push_back(int32_t((i * 37 + 11 * p + 5) % 256));
    r.params.temperature = 0;
    r.params.max_tokens = 12;
    r.params.ignore_eos = true;
    r.params.logprobs = 2;
    reqs.push_back(r);
  }
  for (std::optional<Fp8Scheme> s :
       {std::optional<Fp8Scheme>(), std::optional(Fp8Scheme::row), std::optional(Fp8Scheme::block),
        std::optional(Fp8Scheme::tensor)})
    greedy_model_case(dev, "qwen3_moe (random)", dir, reqs, s);
  std::filesystem::remove_all(dir);
}

// Asynchronous scheduling on CUDA (the default there) with completions that stop at different
// steps: each prompt stops at a token the CPU engine (synchronous) drew for it, so sequences
// stop while their next step is already queued and those rows are dropped. Against the CPU:
// ids and finish reasons equal, up to a near-tie as greedy_case allows (the as-stored bf16
// bound). The CUDA run must have planned steps ahead and dropped rows.
void async_stop_case(CudaDevice& dev) {
  const std::string arch = "qwen3";
  std::vector<GenerationRequest> reqs = golden_greedy_requests(arch);
  const Model cpu_model = Model::load(g_data + "/goldens/" + arch);
  Model gpu_model = Model::load(g_data + "/goldens/" + arch);
  Context gpu = dev.context();
  gpu_model.to_device(gpu);
  Arena arena;
  Context cpu{Device::cpu, &arena};
  const Run free_run = generate(cpu, cpu_model, reqs);
  for (size_t i = 0; i < reqs.size(); ++i)
    reqs[i].params.stop_token_ids = {free_run.out[i].completions[0].ids[2 + i % 4]};
  const Run ref = generate(cpu, cpu_model, reqs);
  const Run got = generate(gpu, gpu_model, reqs);
  std::vector<int32_t> all_ids;
  for (const auto& r : reqs)
    all_ids.insert(all_ids.end(), r.prompt_ids.begin(), r.prompt_ids.end());
  const double bound = kCudaBf16Logits * max_abs(cpu_logits(cpu_model, all_ids));
  bool ok = got.stats.steps_planned_ahead > 0 && got.stats.rows_dropped > 0 &&
            ref.stats.steps_planned_ahead == 0;
  int equal = 0, near_tie = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const CompletionOutput& a = ref.out[i].completions[0];
    const CompletionOutput& b = got.out[i].completions[0];
    size_t t = 0;
    while (t < a.ids.size() && t < b.ids.size() && a.ids[t] == b.ids[t]) ++t;
    if (t == a.ids.size() && t == b.ids.size() && a.finish == b.finish) {
      ++equal;
      continue;
    }
    const bool tie = t < a.ids.size() && t < b.ids.size() &&
                     a.top_logprobs[t][0].second - a.top_logprobs[t][1].second <= 2 * bound;
    near_tie += tie;
    if (!tie) {
      ok = false;
      std::printf(
          "  prompt %zu: %zu tokens (%s) on CUDA vs %zu (%s) on the CPU, first "
          "difference at %zu\n",
          i, b.ids.size(), finish_reason_name(b.finish), a.ids.size(), finish_reason_name(a.finish),
          t);
    }
  }
  std::printf(
      "%-4s generate async stops %s: %d prompts equal, %d diverged at a near-tie, "
      "steps planned ahead %lld, rows dropped %lld\n",
      ok ? "PASS" : "FAIL", arch.c_str(), equal, near_tie, (long long)got.stats.steps_planned_ahead,
      (long long)got.stats.rows_dropped);
  if (!ok) ++g_failures;
}

// Greedy samples of a prompt decoding over its shared prompt blocks: n = 4 of prompts of 36
// to 150 tokens (2 to 9 full blocks), on CUDA with the shared-prefix path and without, each
// against the CPU engine (the reference; it ignores the description) as greedy_case compares:
// tokens equal up to a near-tie, logprobs within twice the logit bound before it. The shared
// run must have grouped sequences, the other none. gemma3's windowed layers (window 8) run per
// sequence inside a shared step.
void shared_prefix_case(CudaDevice& dev, const std::string& arch) {
  const Model cpu_model = Model::load(g_data + "/goldens/" + arch);
  Model gpu_model = Model::load(g_data + "/goldens/" + arch);
  Context gpu = dev.context();
  gpu_model.to_device(gpu);
  std::vector<GenerationRequest> reqs;
  double logit_max = 0;
  for (int p = 0; p < 4; ++p) {
    GenerationRequest r;
    for (int i = 0; i < 36 + 38 * p; ++i) r.prompt_ids.push_back(3 + (p * 29 + i * 13) % 250);
    r.params.n = 4;
    r.params.temperature = 0;
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    r.params.logprobs = 2;
    logit_max = std::max(logit_max, max_abs(cpu_logits(cpu_model, r.prompt_ids)));
    reqs.push_back(r);
  }
  Arena arena;
  Context cpu{Device::cpu, &arena};
  const Run ref = generate(cpu, cpu_model, reqs);
  const double bound = kCudaBf16Logits * logit_max;
  for (bool shared : {true, false}) {
    const Run got = generate(gpu, gpu_model, reqs, true, shared);
    int compared = 0, diverged = 0;
    double max_lp = 0;
    bool ok = shared ? got.stats.shared_prefix_steps > 0 : got.stats.shared_prefix_steps == 0;
    for (size_t i = 0; i < reqs.size(); ++i)
      for (size_t k = 0; k < 4; ++k) {
        const CompletionOutput& a = ref.out[i].completions[k];
        const CompletionOutput& b = got.out[i].completions[k];
        for (size_t t = 0; t < a.ids.size(); ++t) {
          const double gap = a.top_logprobs[t][0].second - a.top_logprobs[t][1].second;
          if (b.ids[t] != a.ids[t]) {
            ++diverged;
            if (gap > 2 * bound) {
              ok = false;
              std::printf("  %s prompt %zu sample %zu step %zu: token %d vs %d, gap %.4f > %.4f\n",
                          arch.c_str(), i, k, t, b.ids[t], a.ids[t], gap, 2 * bound);
            }
            break;
          }
          ++compared;
          max_lp = std::max(max_lp, double(std::abs(a.logprobs[t] - b.logprobs[t])));
        }
      }
    ok = ok && max_lp <= 2 * bound;
    std::printf(
        "%-4s generate %s n=4 shared_prefix=%s: %d tokens equal, %d samples diverged at a "
        "near-tie, max |dlogprob| %.4g (bound %.4g), shared-prefix steps %lld (grouped "
        "sequence-steps %lld), graph steps %lld\n",
        ok ? "PASS" : "FAIL", arch.c_str(), shared ? "on" : "off", compared, diverged, max_lp,
        2 * bound, (long long)got.stats.shared_prefix_steps,
        (long long)got.stats.shared_prefix_seq_steps, (long long)got.stats.graph_steps);
    if (!ok) ++g_failures;
  }
}

// A rollout: 6 prompts x 8 samples with top-p, through forks, copies on write and graphs.
void rollout_case(CudaDevice& dev) {
  Model m = Model::load(g_data + "/goldens/qwen3", LoadOptions{Fp8Scheme::row});
  Context gpu = dev.context();
  m.to_device(gpu);
  std::vector<GenerationRequest> reqs;
  for (int p = 0; p < 6; ++p) {
    GenerationRequest r;
    for (int i = 0; i < 5 + 7 * p; ++i) r.prompt_ids.push_back(3 + (p * 31 + i * 7) % 250);
    r.params.n = 8;
    r.params.max_tokens = 40;
    r.params.top_p = 0.9;
    r.params.ignore_eos = true;
    r.params.processed_logprobs = true;
    r.params.seed = uint64_t(p);
    reqs.push_back(r);
  }
  const Run run = generate(gpu, m, reqs);
  bool ok = run.stats.graph_steps > 0 && run.stats.kv_blocks_peak_shared > 0;
  int64_t tokens = 0;
  for (const RequestOutput& r : run.out) {
    ok = ok && r.completions.size() == 8;
    for (const CompletionOutput& c : r.completions) {
      tokens += int64_t(c.ids.size());
      ok = ok && c.ids.size() == 40;
      for (size_t t = 0; t < c.ids.size(); ++t)
        ok = ok && std::isfinite(c.logprobs[t]) && c.logprobs[t] <= 0 &&
             std::isfinite(c.processed_logprobs[t]) && c.ids[t] >= 0 && c.ids[t] < 256;
    }
  }
  // The same seeds without graphs: the same kernels on other batch shapes; cuBLASLt may pick
  // another algorithm per M, so only agreement of most first tokens is expected.
  const Run eager = generate(gpu, m, reqs, false);
  int same_first = 0;
  for (size_t i = 0; i < reqs.size(); ++i)
    for (size_t s = 0; s < 8; ++s)
      same_first += eager.out[i].completions[s].ids[0] == run.out[i].completions[s].ids[0];
  ok = ok && same_first >= 40;  // of 48 (the first tokens come from identical prefills)
  std::printf(
      "%-4s rollout 6x8 top_p 0.9 fp8-row: %lld tokens, graph steps %lld (captured %lld), "
      "peak shared blocks %lld, first tokens equal eager %d/48\n",
      ok ? "PASS" : "FAIL", (long long)tokens, (long long)run.stats.graph_steps,
      (long long)run.stats.graphs_captured, (long long)run.stats.kv_blocks_peak_shared, same_first);
  if (!ok) ++g_failures;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only_arch;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--data") g_data = argv[i + 1];
    if (std::string(argv[i]) == "--arch") only_arch = argv[i + 1];
  }
  if (CudaDevice::count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  CudaDevice dev;
  try {
    for (const char* arch : {"llama", "qwen2", "qwen3", "mistral", "gemma3"}) {
      if (!only_arch.empty() && only_arch != arch) continue;
      greedy_case(dev, arch, Fp8Scheme::off);
      greedy_case(dev, arch, Fp8Scheme::row);
    }
    if (only_arch.empty() || only_arch == "qwen3_moe") moe_greedy_case(dev);
    if (only_arch.empty()) {
      rollout_case(dev);
      async_stop_case(dev);
      for (const char* arch : {"qwen3", "gemma3"}) shared_prefix_case(dev, arch);
    }
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  std::printf("%d failures\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}
