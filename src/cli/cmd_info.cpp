// fp8rl info MODEL: what a model directory holds, without loading the weights.
#include <map>
#include <memory>

#include "cli/commands.h"
#include "core/check.h"
#include "core/spelling.h"
#include "formats/model_config.h"
#include "formats/quant_config.h"
#include "formats/safetensors.h"
#include "model/model.h"
#include "ops/device.h"

namespace fp8rl::cli {

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.2f} {}", b, units[u]);
}

std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.3f}B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.3f}M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f}K", n / 1e3);
  return fmt::format("{:.0f}", n);
}

// Which part of the model a tensor belongs to, by its HF name.
std::string category(const std::string& name) {
  if (name.ends_with("weight_scale") || name.ends_with("weight_scale_inv") ||
      name.ends_with("input_scale"))
    return "fp8 scales";
  if (name.find("embed_tokens") != std::string::npos) return "embedding";
  if (name.starts_with("lm_head")) return "lm_head";
  if (name.find(".mlp.experts.") != std::string::npos) return "moe experts";
  if (name.ends_with(".mlp.gate.weight")) return "moe routers";
  if (name.ends_with("_proj.weight")) return "decoder linears";
  if (name.ends_with(".bias")) return "biases";
  if (name.find("norm") != std::string::npos) return "norms";
  return "other";
}

void run_info(const std::string& dir, const std::string& device) {
  CHECK(device == "cpu" || device == "cuda", "--device: '{}' is not a device (cpu, cuda)", device);
  if (device == "cuda") {
    CHECK(CudaDevice::built(), "--device cuda: this fp8rl was built without the CUDA backend");
    CHECK(CudaDevice::count() > 0, "--device cuda: no CUDA device is visible");
  }
  const ModelConfig c = ModelConfig::load(dir);
  const Checkpoint ckpt = Checkpoint::open(dir);
  // The loader's checks without reading the weights: every tensor of the architecture present
  // with its shape and dtype, none unexpected (the NaN/Inf scan is left to the commands that run
  // the model).
  LoadOptions structure_only;
  structure_only.structure_only = true;
  Model::load(dir, structure_only);
  fmt::print("model            {}\n", dir);
  fmt::print("architecture     {}\n", c.architecture);
  fmt::print("layers           {}\n", c.num_layers);
  fmt::print("hidden           {} (intermediate {}, {})\n", c.hidden_size, c.intermediate_size,
             c.activation == MlpActivation::silu ? "SwiGLU" : "GELU-tanh gated");
  if (c.has_moe()) {
    int64_t sparse = 0;
    for (const LayerConfig& l : c.layers) sparse += l.moe;
    fmt::print("moe              top-{} of {}{}, expert intermediate {}, on {} of {}\n",
               c.moe.top_k, counted(c.moe.num_experts, "expert"),
               c.moe.norm_topk_prob ? " (weights renormalized)" : "", c.moe.intermediate_size,
               sparse, counted(c.num_layers, "layer"));
  }
  fmt::print("attention        {}, {}, head_dim {}{}\n", counted(c.num_heads, "query head"),
             counted(c.num_kv_heads, "kv head"), c.head_dim, c.qk_norm ? ", q/k RMSNorm" : "");
  int64_t sliding = 0;
  for (const LayerConfig& l : c.layers) sliding += l.sliding;
  if (sliding > 0)
    fmt::print("sliding window   {} on {} of {}\n", counted(c.sliding_window, "token"), sliding,
               counted(c.num_layers, "layer"));
  // A full-attention layer's rope (Gemma 3's sliding layers keep the plain local one).
  const LayerConfig* full = &c.layers.back();
  for (const LayerConfig& l : c.layers)
    if (!l.sliding) {
      full = &l;
      break;
    }
  const RopeConfig& rope = full->rope;
  fmt::print("rope             {} theta {}", rope_type_name(rope.type), rope.theta);
  if (rope.type == RopeConfig::Type::linear) fmt::print(" factor {}", rope.factor);
  if (rope.type == RopeConfig::Type::llama3 || rope.type == RopeConfig::Type::yarn)
    fmt::print(" factor {} over {}", rope.factor,
               counted(rope.original_max_position_embeddings, "position"));
  if (rope.type == RopeConfig::Type::yarn)
    fmt::print(" (attention factor {:.6g})", rope.attention_factor);
  fmt::print("\n");
  fmt::print("context          {}{}\n", counted(c.max_context, "position"),
             c.max_context != c.max_position_embeddings
                 ? fmt::format(" (max_position_embeddings {})", c.max_position_embeddings)
                 : "");
  fmt::print("vocab            {}{}\n", c.vocab_size,
             c.tie_word_embeddings ? " (lm_head tied to the embedding)" : "");

  std::map<std::string, double> params;
  std::map<std::string, double> bytes_by_dtype;
  double total = 0;
  for (const std::string& name : ckpt.names()) {
    const SafetensorsTensorInfo& info = ckpt.info(name);
    const std::string cat = category(name);
    if (cat != "fp8 scales") {
      params[cat] += double(info.shape.numel());
      total += double(info.shape.numel());
    }
    bytes_by_dtype[info.dtype_str] += double(info.nbytes());
  }
  fmt::print("parameters       {}\n", human_count(total));
  for (const auto& [cat, n] : params) fmt::print("  {:<17}{}\n", cat, human_count(n));
  fmt::print("bytes by dtype\n");
  for (const auto& [dt, b] : bytes_by_dtype) fmt::print("  {:<17}{}\n", dt, human_bytes(b));
  const CheckpointQuant q = parse_quantization_config(c.quantization);
  if (q.weight == Fp8Scheme::off) {
    fmt::print("fp8              none (unquantized; --fp8 row|block|tensor quantizes on load)\n");
  } else {
    fmt::print("fp8              {}: weights {} scaling ({}), activations {}\n", q.method,
               scheme_name(q.weight), q.weight_scale_name, act_scaling_name(q.act));
  }
  if (device == "cuda") fmt::print("device\n{}\n", CudaDevice::describe(0));
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto device = std::make_shared<std::string>("cpu");
  CLI::App* c = app.add_subcommand("info", "Summarize a model: architecture, sizes, dtypes, FP8");
  c->add_option("model", *dir, "Hugging Face model directory")->required();
  c->add_option("--device", *device,
                "cpu, or cuda to also show the GPU and the GEMM path of each FP8 scheme")
      ->capture_default_str();
  c->callback([dir, device] { run_info(*dir, *device); });
}

}  // namespace fp8rl::cli
