#include "model/presets.h"

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/output_file.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "formats/safetensors.h"

namespace fp8rl {

using json = nlohmann::json;

namespace {

struct Dims {
  int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, max_pos;
};

json base_config(const char* arch_class, const char* model_type, const Dims& d, bool tied,
                 double theta) {
  return {{"architectures", {arch_class}},
          {"model_type", model_type},
          {"vocab_size", d.vocab},
          {"hidden_size", d.hidden},
          {"intermediate_size", d.intermediate},
          {"num_hidden_layers", d.layers},
          {"num_attention_heads", d.heads},
          {"num_key_value_heads", d.kv_heads},
          {"head_dim", d.head_dim},
          {"max_position_embeddings", d.max_pos},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", theta},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", tied},
          {"torch_dtype", "bfloat16"},
          {"initializer_range", 0.02},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"use_cache", true}};
}

json qwen3(const Dims& d, bool tied) {
  json c = base_config("Qwen3ForCausalLM", "qwen3", d, tied, 1000000.0);
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["max_window_layers"] = d.layers;
  return c;
}

json qwen3_moe(const Dims& d, int64_t experts, int64_t top_k, int64_t moe_intermediate,
               json mlp_only_layers) {
  json c = base_config("Qwen3MoeForCausalLM", "qwen3_moe", d, false, 1000000.0);
  c["use_sliding_window"] = false;
  c["sliding_window"] = nullptr;
  c["num_experts"] = experts;
  c["num_experts_per_tok"] = top_k;
  c["moe_intermediate_size"] = moe_intermediate;
  c["norm_topk_prob"] = true;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = std::move(mlp_only_layers);
  c["router_aux_loss_coef"] = 0.001;
  c["output_router_logits"] = false;
  return c;
}

json llama(const Dims& d, bool tied, double theta, double factor) {
  json c = base_config("LlamaForCausalLM", "llama", d, tied, theta);
  c["rms_norm_eps"] = 1e-5;
  c["mlp_bias"] = false;
  if (factor > 0) {
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", factor},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  }
  return c;
}

json mistral(const Dims& d, json window) {
  json c = base_config("MistralForCausalLM", "mistral", d, false, 1000000.0);
  c["rms_norm_eps"] = 1e-5;
  c["sliding_window"] = window;
  c.erase("attention_bias");
  return c;
}

json gemma3(const Dims& d, int64_t window, int64_t qpas) {
  json c = base_config("Gemma3ForCausalLM", "gemma3_text", d, true, 1000000.0);
  c.erase("hidden_act");
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["query_pre_attn_scalar"] = qpas;
  c["sliding_window"] = window;
  c["rope_local_base_freq"] = 10000.0;
  c["final_logit_softcapping"] = nullptr;
  c["attn_logit_softcapping"] = nullptr;
  json types = json::array();
  for (int64_t i = 0; i < d.layers; ++i)
    types.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  c["layer_types"] = types;
  c["bos_token_id"] = 2;
  c["eos_token_id"] = 1;
  c["pad_token_id"] = 0;
  return c;
}

constexpr Dims kTiny{256, 192, 320, 2, 6, 2, 32, 2048};
// ~100M parameters: the CPU baseline size of docs/PERFORMANCE.md.
constexpr Dims kSmall{32000, 768, 2048, 12, 12, 4, 64, 4096};

json make(const std::string& name) {
  if (name == "qwen3-tiny") return qwen3(kTiny, true);
  if (name == "qwen3-small") return qwen3(kSmall, true);
  if (name == "qwen3-0.6b") return qwen3({151936, 1024, 3072, 28, 16, 8, 128, 40960}, true);
  if (name == "qwen3-1.7b") return qwen3({151936, 2048, 6144, 28, 16, 8, 128, 40960}, true);
  if (name == "qwen3-8b") return qwen3({151936, 4096, 12288, 36, 32, 8, 128, 40960}, false);
  // Two layers: an MoE one (4 experts, top-2) and a dense one (mlp_only_layers).
  if (name == "qwen3-moe-tiny") return qwen3_moe(kTiny, 4, 2, 96, json::array({1}));
  if (name == "llama-tiny") return llama(kTiny, false, 500000.0, 32.0);
  if (name == "llama-small") return llama(kSmall, false, 500000.0, 0.0);
  if (name == "llama-3.2-1b")
    return llama({128256, 2048, 8192, 16, 32, 8, 64, 131072}, true, 500000.0, 32.0);
  if (name == "llama-3.1-8b")
    return llama({128256, 4096, 14336, 32, 32, 8, 128, 131072}, false, 500000.0, 8.0);
  if (name == "mistral-tiny") return mistral(kTiny, 8);
  if (name == "mistral-small") return mistral(kSmall, nullptr);
  if (name == "mistral-7b") return mistral({32768, 4096, 14336, 32, 32, 8, 128, 32768}, nullptr);
  if (name == "gemma3-tiny") return gemma3(kTiny, 8, 32);
  if (name == "gemma3-small") return gemma3(kSmall, 512, 64);
  if (name == "gemma3-1b") return gemma3({262144, 1152, 6912, 26, 4, 1, 256, 32768}, 512, 256);
  return nullptr;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"qwen3-tiny",   "qwen3-small",    "qwen3-0.6b",   "qwen3-1.7b",
          "qwen3-8b",     "qwen3-moe-tiny", "llama-tiny",   "llama-small",
          "llama-3.2-1b", "llama-3.1-8b",   "mistral-tiny", "mistral-small",
          "mistral-7b",   "gemma3-tiny",    "gemma3-small", "gemma3-1b"};
}

json preset_config_json(const std::string& name) {
  json c = make(name);
  CHECK(!c.is_null(), "unknown preset '{}' (valid: {})", name, fmt::join(preset_names(), ", "));
  return c;
}

void write_random_checkpoint(const json& config, const std::string& out_dir, uint64_t seed) {
  const ModelConfig c = ModelConfig::from_json(config);
  const int64_t h = c.hidden_size, d = c.head_dim;
  std::vector<std::pair<std::string, Shape>> shapes;
  auto add = [&](std::string n, Shape s) { shapes.emplace_back(std::move(n), s); };
  add("model.embed_tokens.weight", {c.vocab_size, h});
  add("model.norm.weight", {h});
  if (c.sequence_classification)
    add("score.weight", {c.num_labels, h});
  else if (!c.tie_word_embeddings)
    add("lm_head.weight", {c.vocab_size, h});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    if (c.sandwich_norms) {
      add(p + "pre_feedforward_layernorm.weight", {h});
      add(p + "post_feedforward_layernorm.weight", {h});
    }
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {d});
      add(p + "self_attn.k_norm.weight", {d});
    }
    add(p + "self_attn.q_proj.weight", {c.q_dim(), h});
    add(p + "self_attn.k_proj.weight", {c.kv_dim(), h});
    add(p + "self_attn.v_proj.weight", {c.kv_dim(), h});
    add(p + "self_attn.o_proj.weight", {h, c.q_dim()});
    if (c.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {c.q_dim()});
      add(p + "self_attn.k_proj.bias", {c.kv_dim()});
      add(p + "self_attn.v_proj.bias", {c.kv_dim()});
    }
    if (c.layers[size_t(i)].moe) {  // the Hub's layout: a tensor per expert and projection
      const int64_t inter = c.moe.intermediate_size;
      add(p + "mlp.gate.weight", {c.moe.num_experts, h});
      for (int64_t e = 0; e < c.moe.num_experts; ++e) {
        const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        add(q + "gate_proj.weight", {inter, h});
        add(q + "up_proj.weight", {inter, h});
        add(q + "down_proj.weight", {h, inter});
      }
      continue;
    }
    add(p + "mlp.gate_proj.weight", {c.intermediate_size, h});
    add(p + "mlp.up_proj.weight", {c.intermediate_size, h});
    add(p + "mlp.down_proj.weight", {h, c.intermediate_size});
  }
  const float stddev = float(config.value("initializer_range", 0.02));
  std::vector<Tensor> tensors;
  std::vector<std::pair<std::string, TensorView>> views;
  for (size_t ti = 0; ti < shapes.size(); ++ti) {
    const auto& [name, shape] = shapes[ti];
    Tensor t = Tensor::empty(shape, DType::bf16);
    uint16_t* p = t.ptr<uint16_t>();
    const bool is_norm = name.find("norm") != std::string::npos;
    const bool is_bias = name.ends_with(".bias");
    const float neutral = c.norm_plus_one ? 0.0f : 1.0f;
    const uint64_t stream = splitmix64(seed * 1000003 + ti);
    parallel_for(0, shape.numel() / shape[-1], [&](int64_t r) {
      const int64_t cols = shape[-1];
      for (int64_t j = r * cols; j < (r + 1) * cols; ++j) {
        const float v = is_norm ? neutral : is_bias ? 0.0f : stddev * normal01(stream, uint64_t(j));
        p[j] = f32_to_bf16(v);
      }
    });
    views.emplace_back(name, t.view());
    tensors.push_back(std::move(t));
  }
  std::filesystem::create_directories(out_dir);
  write_checkpoint(out_dir, views);
  write_file_replacing(out_dir + "/config.json", config.dump(2) + "\n");
  json gen = {{"bos_token_id", config.value("bos_token_id", 1)},
              {"eos_token_id", config.value("eos_token_id", 2)},
              {"do_sample", true},
              {"temperature", 1.0}};
  write_file_replacing(out_dir + "/generation_config.json", gen.dump(2) + "\n");
}

}  // namespace fp8rl
