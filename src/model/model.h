// A loaded model: its config and every weight, as views into the mmap'd checkpoint or into
// tensors the model owns (weights quantized to FP8 on the fly, converted scales).
//
// Linears inside the decoder layers are FP8 when the checkpoint stores them so (loaded as
// they are) or when an on-the-fly scheme is asked for; embeddings, norms, lm_head and MoE
// routers stay in the checkpoint's precision. MoE experts are stacked per projection and
// quantized expert by expert with the dense linears' scheme.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "model/lora.h"
#include "ops/context.h"
#include "ops/linear.h"
#include "ops/memory.h"

namespace fp8rl {

struct LoadOptions {
  // nullopt: run the checkpoint as stored. A scheme: quantize unquantized linears on the fly
  // (off keeps them unquantized); an FP8 checkpoint only accepts its own scheme.
  std::optional<Fp8Scheme> fp8;
  // NaN or Inf in a weight is an error at load unless this is set (one pass over the weights).
  bool allow_nonfinite = false;
  // Check the tensors' names, shapes and dtypes only, reading no weight (implies
  // allow_nonfinite): the MoE experts are then not stacked nor quantized and the model must
  // not run. For fp8rl info.
  bool structure_only = false;
};

struct LayerWeights {
  TensorView input_norm;              // [H]
  TensorView post_attention_norm;     // [H] (pre-MLP norm, or Gemma's post-attention norm)
  TensorView pre_feedforward_norm;    // [H] Gemma only
  TensorView post_feedforward_norm;   // [H] Gemma only
  TensorView q_norm, k_norm;          // [D] Qwen3 / Gemma only
  Linear q, k, v, o, gate, up, down;  // the seven projections (kProjectionNames order)
  // An MoE layer's router and experts (config.layers[i].moe); gate, up and down are then
  // empty. Empty for a dense layer.
  MoeWeights moe;
  // q, k and v as one [Nq + 2 Nkv, H] linear, when the three sit in one buffer (models on a
  // device whose three projections share dtype, scheme and scaling; see packable_qkv): the
  // inference forward runs one GEMM for them, since at a decode step's few hundred tokens each
  // of the three GEMMs takes the same time as their union. Views of q, k and v's memory, no
  // adapter (theirs apply to the split outputs). Empty otherwise.
  LinearWeight qkv;
  Linear* projection(int i);  // i indexes kProjectionNames
  const Linear* projection(int i) const;
  std::vector<float> inv_freq;         // [D/2] on the host
  double rope_attention_factor = 1.0;  // the layer's RopeConfig::attention_factor (YaRN)
  TensorView rope_freq;  // [D/2] f32 on the model's device (to_device); empty on the CPU
  bool sliding = false;
};

class Model {
 public:
  static Model load(const std::string& dir, const LoadOptions& options = {});
  // A model of `config` with random weights made directly on ctx's device (no files, no host
  // copy): uniform with standard deviation 0.02 as HF initializes, norms at their neutral
  // value, linears quantized on the device with `fp8` (nullopt or off: bf16). The values are
  // a hash of (seed, tensor, index), identical on the CPU and CUDA, so the same call on both
  // devices gives the same model. For benchmarks and device tests.
  // pack_qkv = false leaves LayerWeights::qkv empty (tests compare both forms).
  // `unquantized`: the dtype of the embeddings and unquantized linears, bf16 or f32 (a CPU
  // plan's model in its checkpoint's precision, as Model::load keeps it there).
  // On a dry-run context nothing is allocated or filled: the model is its shapes, planned
  // buffers (DeviceBuffer) for a run that only measures its memory.
  static Model random(const ModelConfig& config, std::optional<Fp8Scheme> fp8, Context& ctx,
                      uint64_t seed, bool pack_qkv = true, DType unquantized = DType::bf16);

  // Copies every weight to ctx's device once and points the views at the copies: bf16
  // embeddings and unquantized linears, FP8 codes as stored, f32 scales, norm weights, biases
  // and RoPE frequencies, plus what the backend's GEMM needs (ops::prepare_linear). The
  // forward then runs with that context. No-op when the model is already on ctx's device (a
  // CPU context, or Model::random on it); a loaded model moves once. The
  // device memory is released with the model, which must go before the CudaDevice.
  void to_device(Context& ctx);
  Device device() const { return device_; }
  size_t device_bytes() const;  // bytes of weights held on the device

  const ModelConfig& config() const { return config_; }
  const std::string& dir() const { return dir_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  Fp8Scheme scheme() const { return scheme_; }
  ActScaling act_scaling() const { return act_; }
  bool prequantized() const { return prequantized_; }

  TensorView embed;       // [V,H]
  TensorView final_norm;  // [H]
  // [V,H], the embedding when tied; a sequence classifier's score head [num_labels, H]
  // (ModelConfig::output_size() rows either way).
  LinearWeight lm_head;
  std::vector<LayerWeights> layers;

  // The decoder linears with their checkpoint names ("model.layers.0.self_attn.q_proj"); the
  // MoE layers' routers and experts are not among them.
  std::vector<std::pair<std::string, const LinearWeight*>> named_linears() const;
  size_t expert_bytes() const;  // bytes of every MoE layer's experts and router

 private:
  ModelConfig config_;
  std::string dir_;
  Checkpoint checkpoint_;
  std::vector<Tensor> owned_;
  std::vector<DeviceBuffer> device_storage_;
  Device device_ = Device::cpu;
  Fp8Scheme scheme_ = Fp8Scheme::off;
  ActScaling act_ = ActScaling::none;
  bool prequantized_ = false;

  friend class ModelLoader;
  friend class ModelUploader;
};

}  // namespace fp8rl
