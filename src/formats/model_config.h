// The decoder architectures fp8rl runs, read from a Hugging Face config.json.
//
// All supported families are one pre-norm decoder with switches: Llama, Qwen2 (q/k/v bias),
// Qwen3 (q/k RMSNorm), Qwen3-MoE (Qwen3 with mixture-of-experts MLPs), Mistral (sliding
// window) and Gemma 3 text (embedding scale, (1+w) norms, sandwich norms, GELU-tanh,
// local/global layers with their own RoPE). Both the transformers 4 field names (rope_theta,
// rope_scaling, rope_local_base_freq, sliding_window_pattern, num_experts) and the
// transformers 5 ones (rope_parameters, layer_types, num_local_experts) are read.
// RoPE types: default, linear, llama3 and yarn; others (dynamic, longrope, ...) are an error.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fp8rl {

enum class Arch { llama, qwen2, qwen3, qwen3_moe, mistral, gemma3 };
enum class MlpActivation { silu, gelu_tanh };

struct RopeConfig {
  enum class Type { default_, linear, llama3, yarn };
  Type type = Type::default_;
  double theta = 10000.0;
  double factor = 1.0;                              // linear, llama3, yarn
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, yarn
  double beta_fast = 32.0;                          // yarn: rotations where extrapolation ends
  double beta_slow = 1.0;                           // yarn: rotations where interpolation starts
  bool truncate = true;  // yarn: the correction range rounded out to whole dimensions
  // yarn: what transformers multiplies cos and sin by (resolved from attention_factor, or
  // mscale / mscale_all_dim, or the factor); 1 for the other types.
  double attention_factor = 1.0;
};

// "default", "linear", "llama3", "yarn": config.json's rope_type of each type.
std::string_view rope_type_name(RopeConfig::Type t);

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
  // The positions a sequence may use: max_position_embeddings, or with a YaRN rope the larger of
  // that and factor x original_max_position_embeddings (the context YaRN extends the model to;
  // Qwen's recipe adds rope_scaling and leaves max_position_embeddings at the pretrained length).
  int64_t max_context = 0;
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
  // *ForSequenceClassification: a `score` head [num_labels, H] instead of the lm_head, read at
  // each sequence's last token that is not pad_token_id (transformers' pooling).
  bool sequence_classification = false;
  int64_t num_labels = 2;               // id2label's size, or num_labels (transformers' default 2)
  std::optional<int64_t> pad_token_id;  // config.json's, when set
  nlohmann::json quantization;          // config.json "quantization_config", or null
  nlohmann::json raw;                   // the whole config.json, for writing it back

  static ModelConfig from_json(const nlohmann::json& j);
  static ModelConfig load(const std::string& model_dir);  // MODEL_DIR/config.json

  int64_t q_dim() const { return num_heads * head_dim; }
  // The rows of the output head: vocab_size, or num_labels for a sequence classifier.
  int64_t output_size() const { return sequence_classification ? num_labels : vocab_size; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  bool has_moe() const;  // some layer's MLP is a mixture of experts
};

// The model's context as a phrase for errors: "40960 positions (max_position_embeddings)", or
// for YaRN "131072 positions (yarn factor 4 x original_max_position_embeddings 32768)".
std::string context_description(const ModelConfig& c);
// The one check of a sequence length against the model's context (max_context), for every
// command (and the engine's requests), before the weights load where the length is known by
// then: `length` tokens, made of `what` (e.g. "a prompt of 300 tokens plus
// max_completion_length 4096"), must fit. The error names both numbers, the context as
// context_description says it, and `advice` (what to change; empty: none) after them.
void check_context(const ModelConfig& c, int64_t length, const std::string& what,
                   const std::string& advice = "");

std::string_view arch_name(Arch a);
// The architecture class name, e.g. "Qwen3MoeForCausalLM".
std::vector<std::string> supported_architectures();

}  // namespace fp8rl
