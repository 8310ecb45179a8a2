#include "cli/bench_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli/common.h"
#include "cli/output_path.h"
#include "core/check.h"
#include "core/rng.h"
#include "model/presets.h"

namespace fp8rl::cli {

namespace {

// Whether `dir` holds a checkpoint's weights (else it is a config to make random weights of).
bool has_weights(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors" ||
        e.path().filename() == "model.safetensors.index.json")
      return true;
  return false;
}

// Every B of a fresh adapter drawn as A is (kaiming uniform: uniform in +-1/sqrt(fan-in), the
// fan-in of B being r), one stream per matrix. On the host, before to_device.
void randomize_b(LoraAdapter& a, uint64_t seed) {
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int p = 0; p < int(std::size(kProjectionNames)); ++p) {
      if (!a.targeted(l, p)) continue;
      const TensorView b = a.master_b(l, p);
      const uint64_t stream = splitmix64(seed ^ splitmix64(uint64_t(l * 7 + p) + 1));
      const float bound = 1.0f / std::sqrt(float(a.config().r));
      float* v = b.ptr<float>();
      for (int64_t j = 0; j < b.numel(); ++j)
        v[j] = bound * (2.0f * uniform01(stream, uint64_t(j)) - 1.0f);
    }
}

}  // namespace

void add_bench_model_options(CLI::App& c, BenchModelOptions& o) {
  c.add_option("--model", o.model,
               "Model directory (config.json; weights if present, random weights if not)");
  c.add_option("--preset", o.preset, "Preset config with random weights, e.g. qwen3-8b");
  c.add_option("--fp8", o.fp8, kFp8Help)->capture_default_str();
  c.add_option("--device", o.device, "cuda or cpu")->capture_default_str();
  add_gpu_memory_option(c, o.gpu_memory);
  c.add_option("--seed", o.seed, "Seed of weights and tokens")->capture_default_str();
  c.add_option("--out", o.out, "Also write the JSON here");
  add_device_option_flag(c, o.device_options);
}

void add_bench_rollout_options(CLI::App& c, BenchRolloutOptions& o) {
  c.add_option("--prompts", o.prompts, "Distinct prompts per step")->capture_default_str();
  c.add_option("--generations", o.generations, "Samples (responses) of each prompt per step")
      ->capture_default_str();
  c.add_option("--prompt-tokens", o.prompt_tokens, "Tokens per prompt")->capture_default_str();
  c.add_option("--completion-tokens", o.completion_tokens, "Tokens per sample")
      ->capture_default_str();
  c.add_option("--steps", o.steps, "Steps (GRPO steps, PPO updates)")->capture_default_str();
  c.add_option("--gradient-accumulation-steps", o.gradient_accumulation_steps,
               "Micro-batches a step's samples are trained in (one rollout of all)")
      ->capture_default_str();
  c.add_option("--kv-memory", o.kv_memory, "KV cache GiB (0: the engine's default)");
  c.add_option("--kv-dtype", o.kv_dtype, "KV cache dtype of the rollout: bf16 or fp8")
      ->capture_default_str();
  c.add_flag("--checkpointing,!--no-checkpointing", o.checkpointing,
             "Per-layer activation checkpointing (default on)");
}

void add_bench_lora_options(CLI::App& c, BenchModelOptions& o) {
  c.add_option("--lora-r", o.lora_r, "LoRA rank (all seven projections)")->capture_default_str();
  c.add_option("--lora-alpha", o.lora_alpha, "LoRA alpha (default: 2 x rank)");
}

BenchModel::BenchModel(const BenchModelOptions& o, const std::string& command,
                       const std::vector<ControlScope>& scopes, BenchLoraInit init)
    : controls_(parse_device_options(o.device_options, command, scopes)), command_(command) {
  CHECK(o.model.empty() != o.preset.empty(), "{}: give exactly one of --model, --preset", command);
  CHECK(o.lora_r >= 0 && o.lora_alpha >= 0, "{}: --lora-r and --lora-alpha must be >= 0", command);
  CHECK(o.adapter.empty() || o.lora_r == 0, "{}: give --adapter or --lora-r, not both", command);
  if (!o.out.empty()) check_output_file(o.out, {o.model});
  random_weights_ = o.model.empty() || o.random || !has_weights(o.model);
  SessionOptions so;
  so.model = o.model;
  so.adapter = o.adapter;
  so.fp8 = o.fp8;
  so.device = o.device;
  so.cuda = controls_.cuda;
  so.gpu_memory = o.gpu_memory;
  if (!random_weights_) {
    session_ = std::make_unique<ModelSession>(so);
  } else {
    const ModelConfig config =
        o.preset.empty() ? ModelConfig::load(o.model) : preset_config(o.preset);
    const std::optional<Fp8Scheme> fp8 = parse_fp8_option(o.fp8);
    session_ = std::make_unique<ModelSession>(so, [&](Context& ctx) {
      return Model::random(config, fp8, ctx, o.seed, controls_.stacked_qkv);
    });
  }
  if (o.lora_r == 0) return;
  LoraConfig lc;
  lc.r = o.lora_r;
  lc.lora_alpha = o.lora_alpha > 0 ? o.lora_alpha : double(2 * o.lora_r);
  lc.target_modules = {"all-linear"};
  adapter_ = std::make_unique<LoraAdapter>(LoraAdapter::init(lc, model(), o.seed + 1));
  if (init == BenchLoraInit::random) randomize_b(*adapter_, o.seed + 2);
  adapter_->to_device(ctx());
}

BenchModel::~BenchModel() = default;

const LoraAdapter* BenchModel::adapter() const {
  return adapter_ ? adapter_.get() : session_->adapter();
}

LoraAdapter& BenchModel::fresh_adapter() {
  CHECK(adapter_ != nullptr, "{}: --lora-r must be positive", command_);
  return *adapter_;
}

std::string BenchModel::device_name() {
  return session_->cuda() != nullptr ? session_->cuda()->name() : "cpu";
}

const char* BenchModel::weights() const {
  return random_weights_ ? "random (Model::random on the device)" : "checkpoint";
}

std::vector<PromptExample> random_prompts(const BenchRolloutOptions& o, int64_t vocab,
                                          uint64_t seed, int64_t copies) {
  std::vector<PromptExample> prompts;
  const std::vector<int32_t> ids =
      random_token_ids(o.prompts * o.steps * o.prompt_tokens, vocab, seed);
  for (int64_t p = 0; p < o.prompts * o.steps; ++p)
    for (int64_t c = 0; c < copies; ++c) {
      PromptExample e;
      e.ids.assign(ids.begin() + p * o.prompt_tokens, ids.begin() + (p + 1) * o.prompt_tokens);
      e.columns = nlohmann::json::object();
      prompts.push_back(std::move(e));
    }
  return prompts;
}

nlohmann::json take_last_metrics(const std::string& dir) {
  std::ifstream f(dir + "/metrics.jsonl");
  nlohmann::json last;
  for (std::string line; std::getline(f, line);) last = nlohmann::json::parse(line);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return last;
}

nlohmann::json rollout_report(const std::string& command, BenchModel& bench,
                              const BenchModelOptions& m, const BenchRolloutOptions& o,
                              double lora_alpha) {
  nlohmann::json r;
  r["command"] = command;
  r["model"] = m.preset.empty() ? m.model : m.preset;
  r["weights"] = bench.weights();
  r["fp8"] = std::string(scheme_name(bench.model().scheme()));
  r["device"] = bench.device_name();
  report_cuda_controls(bench.controls(), bench.ctx().device, r);
  r["prompts"] = o.prompts;
  r["generations"] = o.generations;
  r["prompt_tokens"] = o.prompt_tokens;
  r["completion_tokens"] = o.completion_tokens;
  r["kv_dtype"] = o.kv_dtype;
  r["lora_r"] = m.lora_r;
  r["lora_alpha"] = lora_alpha;
  r["checkpointing"] = o.checkpointing;
  r["gradient_accumulation_steps"] = o.gradient_accumulation_steps;
  r["steps"] = o.steps;
  return r;
}

std::vector<int32_t> random_token_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[size_t(i)] = int32_t(uniform01(seed, uint64_t(i)) * float(vocab)) % int32_t(vocab);
  return ids;
}

}  // namespace fp8rl::cli
