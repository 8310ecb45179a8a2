// The decoder architectures fp8rl runs, read from a Hugging Face config.json.
//
// All supported families are one pre-norm decoder with switches: Llama, Qwen2 (q/k/v bias),
// Qwen3 (q/k RMSNorm), Qwen3-MoE (Qwen3 with mixture-of-experts MLPs), Mistral (sliding
// window) and Gemma 3 text (embedding scale, (1+w) norms, sandwich norms, GELU-tanh,
// local/global layers with their own RoPE). Both the transformers 4 field names (rope_theta,
// rope_scaling, rope_local_base_freq, sliding_window_pattern, num_experts) and the
// transformers 5 ones (rope_parameters, layer_types, num_local_experts) are read.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/dtype.h"

namespace fp8rl {

enum class Arch { llama, qwen2, qwen3, qwen3_moe, mistral, gemma3 };
enum class MlpActivation { silu, gelu_tanh };

struct RopeConfig {
  enum class Type { default_, linear, llama3 };
  Type type = Type::default_;
  double theta = 10000.0;
  double factor = 1.0;                              // linear, llama3
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

struct LayerConfig {
  bool sliding = false;  // attends to the last `sliding_window` positions only
  bool moe = false;      // the MLP is a mixture of experts (MoeConfig), else dense
  RopeConfig rope;
};

// The sparse MLP of the MoE layers (Qwen3-MoE): a router picks each token's top-k experts by
// softmax probability; the token's output is the probability-weighted sum of those experts'
// gated MLPs of width `intermediate_size`. All zero for dense models.
struct MoeConfig {
  int64_t num_experts = 0;        // E: num_experts (transformers 5: num_local_experts)
  int64_t top_k = 0;              // num_experts_per_tok
  int64_t intermediate_size = 0;  // moe_intermediate_size
  bool norm_topk_prob = false;    // renormalize the k probabilities to sum to 1
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  Arch arch = Arch::llama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;         // Qwen3, Gemma 3: RMSNorm over head_dim on q and k
  bool norm_plus_one = false;   // Gemma: y = norm(x) * (1 + w)
  bool sandwich_norms = false;  // Gemma: post-attention and pre/post-feedforward norms
  MlpActivation activation = MlpActivation::silu;
  double embedding_scale = 1.0;          // Gemma: sqrt(hidden_size)
  double attention_scale = 0.0;          // softmax scale; 1/sqrt(head_dim) unless the arch says
  int64_t sliding_window = 0;            // 0: no layer slides
  double final_logit_softcapping = 0.0;  // 0: off
  double attn_logit_softcapping = 0.0;   // 0: off
  DType dtype = DType::bf16;             // the checkpoint's compute dtype ("torch_dtype")
  MoeConfig moe;
  std::vector<LayerConfig> layers;
  nlohmann::json quantization;  // config.json "quantization_config", or null
  nlohmann::json raw;           // the whole config.json, for writing it back

  static ModelConfig from_json(const nlohmann::json& j);
  static ModelConfig load(const std::string& model_dir);  // MODEL_DIR/config.json

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  bool has_moe() const;  // some layer's MLP is a mixture of experts
};

std::string_view arch_name(Arch a);
// The architecture class name, e.g. "Qwen3MoeForCausalLM".
std::vector<std::string> supported_architectures();

}  // namespace fp8rl
