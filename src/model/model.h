// A loaded model: its config and every weight, as views into the mmap'd checkpoint or into
// tensors the model owns (weights quantized to FP8 on the fly, converted scales).
//
// Linears inside the decoder layers are FP8 when the checkpoint stores them so (loaded as
// they are) or when an on-the-fly scheme is asked for; embeddings, norms and lm_head stay in
// the checkpoint's precision.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "ops/linear.h"

namespace fp8rl {

struct LoadOptions {
  // nullopt: run the checkpoint as stored. A scheme: quantize unquantized linears on the fly
  // (off keeps them unquantized); an FP8 checkpoint only accepts its own scheme.
  std::optional<Fp8Scheme> fp8;
};

struct LayerWeights {
  TensorView input_norm;             // [H]
  TensorView post_attention_norm;    // [H] (pre-MLP norm, or Gemma's post-attention norm)
  TensorView pre_feedforward_norm;   // [H] Gemma only
  TensorView post_feedforward_norm;  // [H] Gemma only
  TensorView q_norm, k_norm;         // [D] Qwen3 / Gemma only
  LinearWeight q, k, v, o, gate, up, down;
  std::vector<float> inv_freq;  // [D/2]
  bool sliding = false;
};

class Model {
 public:
  static Model load(const std::string& dir, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  Fp8Scheme scheme() const { return scheme_; }
  ActScaling act_scaling() const { return act_; }
  bool prequantized() const { return prequantized_; }

  TensorView embed;       // [V,H]
  TensorView final_norm;  // [H]
  LinearWeight lm_head;   // [V,H], the embedding when tied
  std::vector<LayerWeights> layers;

  // The decoder linears with their checkpoint names ("model.layers.0.self_attn.q_proj").
  std::vector<std::pair<std::string, const LinearWeight*>> named_linears() const;

 private:
  ModelConfig config_;
  std::string dir_;
  Checkpoint checkpoint_;
  std::vector<Tensor> owned_;
  Fp8Scheme scheme_ = Fp8Scheme::off;
  ActScaling act_ = ActScaling::none;
  bool prequantized_ = false;

  friend class ModelLoader;
};

}  // namespace fp8rl
