#include "cli/bench_training.h"

#include "cli/common.h"
#include "cli/output_path.h"
#include "core/check.h"
#include "core/rng.h"
#include "model/presets.h"

namespace fp8rl::cli {

void add_bench_model_options(CLI::App& c, BenchModelOptions& o) {
  c.add_option("--model", o.model, "Model directory (config.json; weights if present)");
  c.add_option("--preset", o.preset, "Preset config with random weights, e.g. qwen3-8b");
  c.add_option("--fp8", o.fp8, kFp8Help)->capture_default_str();
  c.add_option("--lora-r", o.lora_r, "LoRA rank (all seven projections)")->capture_default_str();
  c.add_option("--device", o.device, "cuda or cpu")->capture_default_str();
  c.add_option("--seed", o.seed, "Seed of weights and tokens")->capture_default_str();
  c.add_option("--out", o.out, "Also write the JSON here");
  add_cuda_control_flags(c, o.cuda);
}

BenchTrainingModel::BenchTrainingModel(const BenchModelOptions& o, const std::string& command) {
  CHECK(o.model.empty() != o.preset.empty(), "{}: give exactly one of --model, --preset", command);
  CHECK(o.lora_r > 0, "{}: --lora-r must be positive, got {}", command, o.lora_r);
  if (!o.out.empty()) check_output_file(o.out, {o.model});
  SessionOptions so;
  so.model = o.model;
  so.fp8 = o.fp8;
  so.device = o.device;
  so.cuda = o.cuda;
  if (o.preset.empty()) {
    session_ = std::make_unique<ModelSession>(so);
  } else {
    const ModelConfig config = preset_config(o.preset);
    const std::optional<Fp8Scheme> fp8 = parse_fp8_option(o.fp8);
    session_ = std::make_unique<ModelSession>(
        so, [&](Context& ctx) { return Model::random(config, fp8, ctx, o.seed); });
  }
  LoraConfig lc;
  lc.r = o.lora_r;
  lc.lora_alpha = double(2 * o.lora_r);
  lc.target_modules = {"all-linear"};
  adapter_ = std::make_unique<LoraAdapter>(LoraAdapter::init(lc, model(), o.seed + 1));
  adapter_->to_device(ctx());
  adapter_->attach(model());
}

BenchTrainingModel::~BenchTrainingModel() {
  LoraAdapter::detach(model());
}

std::vector<int32_t> random_token_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ids[size_t(i)] = int32_t(uniform01(seed, uint64_t(i)) * float(vocab)) % int32_t(vocab);
  return ids;
}

}  // namespace fp8rl::cli
