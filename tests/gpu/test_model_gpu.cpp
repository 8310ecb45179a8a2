// test_model_gpu [--data DIR] [--arch NAME|all | --random] [--json FILE]
// (--arch qwen3_moe: a random Qwen3-MoE checkpoint, and its goldens where they exist)
//
// The one forward on CUDA against the same forward on the CPU: the golden models
// (every architecture, --fp8 off/tensor/row/block) and two random models at realistic widths
// (head_dim 128 and 256, K not a multiple of 128, 300 tokens past a sliding window), made with
// Model::random on both devices (identical weights). Each model is compared with two CPU
// references: the exact fp32 forward (bounds kCudaBf16Logits, and cuda_fp8_logits_bound() for
// FP8), and the CPU forward emulating CUDA's bf16 activations (Context::bf16_activations, rows
// "vs cpu-bf16"), held to the same bounds; the unquantized model meets kCudaBf16Logits against
// it with a wide margin, FP8 schemes do not (tests/tolerances.h says why).
// Also records top-1 agreement with the CPU and the distance to the HF goldens, and checks
// decode steps and batches on CUDA. Exit 77 without a CUDA device.
#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/npy.h"
#include "model/forward.h"
#include "model/presets.h"
#include "ops/device.h"
#include "test_util.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;

namespace {

std::string g_data = FP8RL_TEST_DATA;

std::vector<int32_t> ids_of(const std::string& arch, const std::string& scheme) {
  std::ifstream f(g_data + "/goldens/" + arch +
                  (scheme == "off" ? "/ids.json" : "/ids_fp8_" + scheme + ".json"));
  return nlohmann::json::parse(f).get<std::vector<int32_t>>();
}

std::vector<int32_t> iota(size_t n, int32_t start = 0) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = start + int32_t(i);
  return p;
}

// Logits of every token of `ids` as one prefill on ctx's device (a CPU context: f32 forward,
// with bf16 roundings if ctx.bf16_activations).
Tensor prefill(Context& ctx, const Model& m, const std::vector<int32_t>& ids) {
  KvCache cache(m.config(), int64_t(ids.size()), ctx);
  const std::vector<int32_t> pos = iota(ids.size());
  Tensor logits = Tensor::empty({int64_t(ids.size()), m.config().vocab_size}, DType::f32);
  SequenceInput seq{ids, pos, &cache};
  forward(ctx, m, nullptr, {&seq, 1}, LogitRows::all, logits);
  return logits;
}

struct Row {
  std::string name;
  std::string ref = "cpu";  // the CPU reference: "cpu" (fp32) or "cpu-bf16" (emulated bf16)
  double err = 0, bound = 0, top1 = -1, hf = -1, d_fp8 = 0;  // -1: not measured
  bool negative = false;  // a negative control: passes when err exceeds the bound
  bool ok = false;
};

// CUDA logits `got` against the CPU forward with emulated bf16 activations of the same model;
// bound: the fp32 row's (kCudaBf16Logits, or cuda_fp8_logits_bound for FP8; see
// tests/tolerances.h for why FP8 cannot be held to the bf16 bound).
Row vs_cpu_bf16(const std::string& name, const Model& cpu_model, const std::vector<int32_t>& ids,
                const Tensor& got, double bound) {
  Arena arena;
  Context cpu{Device::cpu, &arena};
  cpu.bf16_activations = true;
  const Tensor ref = prefill(cpu, cpu_model, ids);
  Row r;
  r.name = name + " vs cpu-bf16";
  r.ref = "cpu-bf16";
  r.err = rel_max_diff(got, ref);
  r.top1 = top1_agreement(got, ref);
  r.bound = bound;
  return r;
}

std::vector<Row> g_rows;

// ||(got - got_off) - (ref - ref_off)||_F / ||ref - ref_off||_F: how far CUDA's FP8 effect on
// the logits (its FP8 forward minus its unquantized forward of the same ids) is from the CPU's.
// A CUDA forward that skipped FP8 has effect 0 and scores exactly 1.
double fp8_effect_residual(const Tensor& got, const Tensor& got_off, const Tensor& ref,
                           const Tensor& ref_off) {
  double num = 0, den = 0;
  const float *g = got.ptr<float>(), *go = got_off.ptr<float>(), *r = ref.ptr<float>(),
              *ro = ref_off.ptr<float>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double e_ref = double(r[i]) - double(ro[i]);
    const double diff = (double(g[i]) - double(go[i])) - e_ref;
    num += diff * diff;
    den += e_ref * e_ref;
  }
  return den > 0 ? std::sqrt(num / den) : INFINITY;
}

void report(Row r);

// The FP8 rows' bound cuda_fp8_logits_bound(d_fp8) would also pass a CUDA forward that skipped
// FP8 (its distance to the CPU's FP8 logits is about d_fp8). This row discriminates: CUDA's
// FP8 effect must match the CPU's to kCudaFp8EffectResidual (< 1), and the same check on the
// CUDA forward without FP8 (the negative control) must fail, scoring 1.
void fp8_effect_rows(const std::string& name, const Tensor& got, const Tensor& got_off,
                     const Tensor& ref, const Tensor& ref_off) {
  Row r;
  r.name = name + " FP8 effect";
  r.ref = "cpu-fp8-effect";
  r.err = fp8_effect_residual(got, got_off, ref, ref_off);
  r.bound = kCudaFp8EffectResidual;
  report(r);
  Row c;
  c.name = name + " FP8 effect, control: FP8 skipped";
  c.ref = "cpu-fp8-effect";
  c.err = fp8_effect_residual(got_off, got_off, ref, ref_off);
  c.bound = kCudaFp8EffectResidual;
  c.negative = true;
  report(c);
}

void report(Row r) {
  r.ok = r.negative ? !(r.err <= r.bound) : std::isfinite(r.err) && r.err <= r.bound;
  std::printf("%-4s %-34s cuda-vs-%s %.3g (bound %.3g)%s%s\n", r.ok ? "PASS" : "FAIL",
              r.name.c_str(), r.ref.c_str(), r.err, r.bound,
              r.top1 >= 0 ? fmt::format("  top1 {:.3f}", r.top1).c_str() : "",
              r.hf >= 0 ? fmt::format("  cuda-vs-HF {:.3g}", r.hf).c_str() : "");
  std::fflush(stdout);
  g_rows.push_back(r);
}

// The checkpoint in `dir` (named `arch` in the rows) on both devices over `ids`; `hf`: HF's
// logits of those ids (empty: none).
void checkpoint_model(CudaDevice& dev, const std::string& arch, const std::string& dir,
                      const std::string& scheme, const std::vector<int32_t>& ids,
                      const std::string& hf_path);

void golden(CudaDevice& dev, const std::string& arch, const std::string& scheme) {
  const std::string dir = g_data + "/goldens/" + arch;
  checkpoint_model(dev, arch, dir, scheme, ids_of(arch, scheme),
                   dir + (scheme == "off" ? "/logits_fp32.npy" : "/logits_fp8_" + scheme + ".npy"));
}

void checkpoint_model(CudaDevice& dev, const std::string& arch, const std::string& dir,
                      const std::string& scheme, const std::vector<int32_t>& ids,
                      const std::string& hf_path) {
  Arena arena;
  Context cpu{Device::cpu, &arena};
  Context gpu = dev.context();
  LoadOptions o;
  o.fp8 = parse_scheme(scheme);
  const Model cpu_model = Model::load(dir, o);
  const Tensor ref = prefill(cpu, cpu_model, ids);
  Model gpu_model = Model::load(dir, o);
  gpu_model.to_device(gpu);
  const Tensor got = prefill(gpu, gpu_model, ids);
  Row r;
  r.name = arch + " " + scheme;
  r.err = rel_max_diff(got, ref);
  r.top1 = top1_agreement(got, ref);
  if (!hf_path.empty()) r.hf = rel_max_diff(got, read_npy(hf_path));
  if (scheme == "off" && cpu_model.config().has_moe()) {
    // A router's near-tie can pick other experts under bf16 activations than in fp32, a jump
    // no rounding bound covers: CUDA is held to kCudaBf16Logits against the CPU's bf16 forward
    // (the row after this one), and to the fp32 forward through the triangle inequality, that
    // bound plus how far bf16 activations move the CPU's own logits.
    Arena bf16_arena;
    Context cpu_bf16{Device::cpu, &bf16_arena};
    cpu_bf16.bf16_activations = true;
    r.bound = kCudaBf16Logits + rel_max_diff(prefill(cpu_bf16, cpu_model, ids), ref);
  } else if (scheme == "off") {
    r.bound = kCudaBf16Logits;
  } else {
    const Tensor ref_off = prefill(cpu, Model::load(dir), ids);
    r.d_fp8 = rel_max_diff(ref, ref_off);
    r.bound = cuda_fp8_logits_bound(r.d_fp8);
    Model gpu_off = Model::load(dir);
    gpu_off.to_device(gpu);
    fp8_effect_rows(r.name, got, prefill(gpu, gpu_off, ids), ref, ref_off);
  }
  report(r);
  report(vs_cpu_bf16(r.name, cpu_model, ids, got, scheme == "off" ? kCudaBf16Logits : r.bound));

  // Decode steps after a 5-token prefill, and a batch of two sequences (LogitRows::last),
  // against the CUDA prefill: cuBLASLt may pick other algorithms for other M, so the bound is
  // the bf16 one, not bit-identity as on the CPU.
  if (scheme == "off" || scheme == "row") {
    KvCache cache(gpu_model.config(), int64_t(ids.size()), gpu);
    Tensor stepped = Tensor::empty(got.shape(), DType::f32);
    size_t done = 0;
    while (done < ids.size()) {
      const size_t n = done == 0 ? 5 : 1;
      std::vector<int32_t> tok(ids.begin() + long(done), ids.begin() + long(done + n));
      const std::vector<int32_t> pos = iota(n, int32_t(done));
      SequenceInput seq{tok, pos, &cache};
      forward(gpu, gpu_model, nullptr, {&seq, 1}, LogitRows::all,
              stepped.view().slice_rows(int64_t(done), int64_t(done + n)));
      done += n;
    }
    Row d;
    d.name = arch + " " + scheme + " decode==prefill";
    d.err = rel_max_diff(stepped, got);
    d.top1 = top1_agreement(stepped, got);
    d.bound = scheme == "off" ? kCudaBf16Logits : cuda_fp8_logits_bound(r.d_fp8);
    report(d);

    const std::vector<int32_t> b(ids.begin() + 3, ids.begin() + 11);
    KvPool pool(gpu_model.config(), 8, gpu);
    KvCache ca(pool, 64), cb(pool, 64);
    const std::vector<int32_t> pa = iota(ids.size()), pb = iota(b.size());
    SequenceInput batch[2] = {{ids, pa, &ca}, {b, pb, &cb}};
    Tensor last = Tensor::empty({2, gpu_model.config().vocab_size}, DType::f32);
    forward(gpu, gpu_model, nullptr, batch, LogitRows::last, last);
    const Tensor alone = prefill(gpu, gpu_model, b);
    Row bt;
    bt.name = arch + " " + scheme + " batch last rows";
    bt.err =
        std::max(rel_max_diff(last.view().slice_rows(0, 1),
                              got.view().slice_rows(int64_t(ids.size()) - 1, int64_t(ids.size()))),
                 rel_max_diff(last.view().slice_rows(1, 2),
                              alone.view().slice_rows(int64_t(b.size()) - 1, int64_t(b.size()))));
    bt.top1 = std::min(
        top1_agreement(last.view().slice_rows(0, 1),
                       got.view().slice_rows(int64_t(ids.size()) - 1, int64_t(ids.size()))),
        top1_agreement(last.view().slice_rows(1, 2),
                       alone.view().slice_rows(int64_t(b.size()) - 1, int64_t(b.size()))));
    bt.bound = d.bound;
    report(bt);
  }
}

// A random model of a realistic width, the same on both devices (Model::random is a hash of
// the seed), against the CPU forward.
void random_model(CudaDevice& dev, const std::string& name, const ModelConfig& config,
                  const std::string& scheme, int64_t tokens) {
  Arena arena;
  Context cpu{Device::cpu, &arena};
  Context gpu = dev.context();
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i)
    ids[size_t(i)] = int32_t((i * 7919 + 13) % config.vocab_size);
  const std::optional<Fp8Scheme> fp8 = parse_scheme(scheme);
  const Model cpu_model = Model::random(config, fp8, cpu, 1234);
  const Tensor ref = prefill(cpu, cpu_model, ids);
  const Model gpu_model = Model::random(config, fp8, gpu, 1234);
  const Tensor got = prefill(gpu, gpu_model, ids);
  Row r;
  r.name = name + " " + scheme + " T=" + std::to_string(tokens);
  r.err = rel_max_diff(got, ref);
  r.top1 = top1_agreement(got, ref);
  if (scheme == "off") {
    r.bound = kCudaBf16Logits;
  } else {
    const Tensor ref_off = prefill(cpu, Model::random(config, Fp8Scheme::off, cpu, 1234), ids);
    r.d_fp8 = rel_max_diff(ref, ref_off);
    r.bound = cuda_fp8_logits_bound(r.d_fp8);
    fp8_effect_rows(r.name, got,
                    prefill(gpu, Model::random(config, Fp8Scheme::off, gpu, 1234), ids), ref,
                    ref_off);
  }
  report(r);
  report(vs_cpu_bf16(r.name, cpu_model, ids, got, r.bound));
}

// Qwen3-MoE (4 experts, top-2, one MoE and one dense layer): a random checkpoint of the tiny
// preset with weights of deviation 0.1 (routing decided by clear margins, as the CPU tests
// make it), and the HF goldens when tests/data/goldens/qwen3_moe has them.
void qwen3_moe_models(CudaDevice& dev) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("fp8rl_gpu_moe_" + std::to_string(::getpid())))
          .string();
  nlohmann::json c = preset_config_json("qwen3-moe-tiny");
  c["initializer_range"] = 0.1;
  write_random_checkpoint(c, dir, 7);
  std::vector<int32_t> ids(64);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 5) % 256);
  for (const char* scheme : {"off", "tensor", "row", "block"})
    checkpoint_model(dev, "random qwen3_moe", dir, scheme, ids, "");
  std::filesystem::remove_all(dir);
  if (!std::filesystem::exists(g_data + "/goldens/qwen3_moe/ids.json")) {
    std::printf(
        "SKIP qwen3_moe goldens: %s/goldens/qwen3_moe has none yet "
        "(tools/goldens/run_moe_goldens.sh makes them)\n",
        g_data.c_str());
    return;
  }
  golden(dev, "qwen3_moe", "off");  // fp32 logits only: the goldens have no FP8 emulation
}

ModelConfig random_config(const std::string& preset, nlohmann::json changes) {
  nlohmann::json j = preset_config_json(preset);
  for (auto& [k, v] : changes.items()) j[k] = v;
  return ModelConfig::from_json(j);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, only_arch;
  bool only_random = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--data" && i + 1 < argc)
      g_data = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (a == "--arch" && i + 1 < argc)
      only_arch = argv[++i];
    else if (a == "--random")
      only_random = true;
  }
  if (CudaDevice::count() == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 77;
  }
  try {
    CudaDevice dev;
    std::printf("%s\n", CudaDevice::describe(0).c_str());
    for (const char* arch : {"llama", "qwen2", "qwen3", "mistral", "gemma3"})
      if (!only_random && (only_arch.empty() || only_arch == "all" || only_arch == arch))
        for (const char* scheme : {"off", "tensor", "row", "block"}) golden(dev, arch, scheme);
    if (!only_random && (only_arch.empty() || only_arch == "all" || only_arch == "gemma3"))
      golden(dev, "gemma3_softcap", "off");  // attention and final-logit softcapping
    if (!only_random && (only_arch.empty() || only_arch == "all" || only_arch == "qwen3_moe"))
      qwen3_moe_models(dev);
    const ModelConfig qwen = random_config("qwen3-tiny", {{"vocab_size", 4096},
                                                          {"hidden_size", 1024},
                                                          {"intermediate_size", 2880},
                                                          {"num_attention_heads", 8},
                                                          {"num_key_value_heads", 2},
                                                          {"head_dim", 128}});
    const ModelConfig gemma =
        random_config("gemma3-tiny", {{"vocab_size", 4096},
                                      {"hidden_size", 1152},
                                      {"intermediate_size", 2880},
                                      {"num_attention_heads", 4},
                                      {"num_key_value_heads", 1},
                                      {"head_dim", 256},
                                      {"query_pre_attn_scalar", 256},
                                      {"sliding_window", 64},
                                      {"layer_types", {"sliding_attention", "full_attention"}}});
    // One layer: no later layer for a flipped e4m3 rounding to cascade into (tolerances.h).
    ModelConfig qwen1 = qwen;
    qwen1.num_layers = 1;
    qwen1.layers.resize(1);
    // Qwen3-8B's widths (o_proj and down_proj with K = 4,096) in a 200-token step: the GEMM
    // shapes of a real model's decode step, which no narrower model reaches.
    const ModelConfig wide = random_config("qwen3-tiny", {{"vocab_size", 4096},
                                                          {"hidden_size", 4096},
                                                          {"intermediate_size", 4096},
                                                          {"num_attention_heads", 32},
                                                          {"num_key_value_heads", 8},
                                                          {"head_dim", 128},
                                                          {"num_hidden_layers", 2}});
    if (only_arch.empty()) {
      for (const char* scheme : {"off", "tensor", "row", "block"}) {
        random_model(dev, "random qwen3 D=128 1 layer", qwen1, scheme, 300);
        random_model(dev, "random qwen3 D=128", qwen, scheme, 300);
        random_model(dev, "random gemma3 D=256 window=64", gemma, scheme, 300);
      }
      random_model(dev, "random qwen3 H=4096", wide, "row", 200);
    }
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    return 1;
  }
  int failed = 0;
  std::ofstream json;
  if (!json_path.empty()) json.open(json_path);
  for (const Row& r : g_rows) {
    failed += !r.ok;
    if (json.is_open())
      json << nlohmann::json{{"case", r.name}, {"ref", r.ref},     {"ok", r.ok},
                             {"err", r.err},   {"bound", r.bound}, {"top1", r.top1},
                             {"hf", r.hf},     {"d_fp8", r.d_fp8}, {"negative", r.negative}}
                  .dump()
           << "\n";
  }
  std::printf("model on CUDA: %zu cases, %d failed\n", g_rows.size(), failed);
  return failed == 0 ? 0 : 1;
}
