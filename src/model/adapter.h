// A LoRA adapter over a model's decoder projections, read and written exactly as PEFT does
// (adapter_config.json + adapter_model.safetensors), so that an adapter trained here loads
// with `PeftModel.from_pretrained` and one trained with PEFT runs here.
//
// The trainable values are fp32 masters, one contiguous buffer for the whole adapter (the
// optimizer steps it as one vector), on the device of the model the adapter serves: an
// adapter is made on the host (init, load_peft) and to_device() moves it. On CUDA the host
// copy is gone after that; it exists only for a moment in save_peft (a download) and
// set_masters (an upload). The forward reads compute copies through the `Linear::lora` views
// (model/lora.h): on the CPU the compute copy is the master itself; on CUDA it is a bf16 copy
// of the masters in one device buffer, written by the optimizer's own pass together with the
// masters (ops/optimizer.h), so an optimizer step is visible to the next forward with no copy
// and no sync step.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/lora.h"
#include "ops/context.h"
#include "ops/memory.h"

namespace fp8rl {

class Model;

// PEFT's LoraConfig, the fields fp8rl supports, with PEFT's defaults and meaning.
struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  bool use_rslora = false;
  double lora_dropout = 0.0;  // in [0, 1); stored for PEFT, applied by the trainer
  // Which projections carry the adapter, as PEFT selects them (check_target_module_exists):
  // - target_regex non-empty: modules whose path ("model.layers.3.self_attn.q_proj") matches it
  //   as a whole (re.fullmatch; target_modules must then be empty);
  // - target_modules == {"all-linear"}: all seven projections of every layer (lm_head never);
  // - otherwise module names: a path equal to an entry or ending in "." + entry ("q_proj",
  //   "mlp.down_proj").
  // Every entry (or the regex) must select at least one projection.
  std::vector<std::string> target_modules;
  std::string target_regex;
  // Restricts a target_modules list to these layer indices (PEFT's layers_to_transform);
  // empty: every layer. Not combinable with target_regex, as in PEFT.
  std::vector<int64_t> layers_to_transform;
  std::string init_lora_weights = "default";  // "default" (PEFT's true) | "gaussian"
  // PEFT's task_type SEQ_CLS: the model's sequence-classification head `score` [num_labels, H]
  // is trained beside the matrices (PEFT's modules_to_save, which SEQ_CLS fills with
  // "classifier" and "score") and saved as base_model.model.score.weight.
  bool sequence_classification = false;
  // The head's rows when the base model has no head of its own (a causal LM under a reward
  // head); a classifier base gives its num_labels. Not a PEFT field: a loaded adapter's head
  // tensor gives it.
  int64_t num_labels = 1;

  double scale() const;  // lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora
  // Throws on a value outside what PEFT accepts or fp8rl supports.
  void validate() const;
  // Whether the module at `path` of layer `layer` is targeted. Throws on a malformed regex.
  bool targets(const std::string& path, int64_t layer) const;

  // From adapter_config.json's object: rejects every setting that would change what the
  // adapter computes and that fp8rl does not implement (DoRA, fan_in_fan_out, biases,
  // modules_to_save, rank/alpha patterns, PiSSA-style inits that rewrite the base weights...).
  // `where` names the source in errors.
  static LoraConfig from_peft_json(const nlohmann::json& j, const std::string& where);
  // adapter_config.json as PEFT writes it (PEFT's true for the default init).
  nlohmann::json to_peft_json(const std::string& base_model_name) const;
};

// PEFT's path of a decoder projection: "model.layers.{layer}.self_attn.q_proj" /
// "model.layers.{layer}.mlp.down_proj" (projection indexes kProjectionNames).
std::string projection_path(int64_t layer, int projection);
// The name PEFT gives the A (b = false) or B matrix of that projection in
// adapter_model.safetensors ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").
std::string peft_tensor_name(int64_t layer, int projection, bool b);
// The same of expert `expert` of an MoE layer's gate, up or down projection (projection 4, 5,
// 6), as PEFT names the Hub layout's per-expert modules: "model.layers.0.mlp.experts.3.up_proj"
// and "base_model.model.model.layers.0.mlp.experts.3.up_proj.lora_A.weight".
std::string expert_path(int64_t layer, int64_t expert, int projection);
std::string peft_expert_tensor_name(int64_t layer, int64_t expert, int projection, bool b);

class LoraAdapter {
 public:
  // A fresh adapter as PEFT initializes one: A ~ kaiming_uniform_(a=sqrt(5)), i.e. uniform in
  // [-1/sqrt(K), 1/sqrt(K)] ("default"), or normal with std 1/r ("gaussian", PEFT's
  // nn.init.normal_(std=1/r)); B = 0. Values are the counter-based streams of core/rng.h,
  // a function of (seed, layer, projection, index) only.
  static LoraAdapter init(const LoraConfig& config, const Model& model, uint64_t seed);
  // adapter_config.json + adapter_model.safetensors of `dir` (F32/BF16/F16 tensors, converted
  // to fp32 masters), checked completely against the model: every error names the file and,
  // where there is one, the tensor and the shape the model implies.
  static LoraAdapter load_peft(const std::string& dir, const Model& model);
  // Writes adapter_model.safetensors (fp32) and adapter_config.json into `dir`. A new `dir` is
  // written under a temporary name and renamed into place; into an existing one each file is
  // written as a temporary and renamed, tensors first.
  void save_peft(const std::string& dir, const std::string& base_model_name) const;

  // Moves the adapter to ctx's device, once, before a forward there uses it. CUDA: uploads
  // the fp32 masters, writes the bf16 compute copies from them and frees the host masters;
  // the adapter keeps ctx for its later transfers and must go before the CudaDevice. CPU:
  // nothing to do, the masters are the compute copies.
  void to_device(Context& ctx);
  Device device() const { return ctx_.device; }
  // The adapter's term of projection `projection` of `layer` as the forward reads it: views
  // of the compute copies on `device` (which must be the adapter's) with the scale; empty for
  // a projection the adapter does not target.
  LoraWeights weights(int64_t layer, int projection, Device device) const;
  // Checks that the adapter was made for `model` (its layers and every targeted projection's
  // shape) and is on the model's device.
  void check_fits(const Model& model) const;

  // Bumped by mark_updated() after the masters and the compute copies changed (an optimizer
  // step, which writes both in one pass) and by set_masters(); the engine's prefix cache keys
  // cached KV on it. Starts at 1.
  uint64_t version() const { return version_; }
  void mark_updated() { ++version_; }
  // Replaces every master with `values` (f32 [P] on the host, laid out like master_params(),
  // e.g. a loaded checkpoint's), uploading them on CUDA, refreshes the compute copies and
  // bumps the version.
  void set_masters(const TensorView& values);

  const LoraConfig& config() const { return config_; }
  float scale() const { return float(config_.scale()); }
  int64_t num_layers() const { return num_layers_; }
  bool targeted(int64_t layer, int projection) const { return !slot(layer, projection).empty(); }
  // > 0: the projection is an MoE layer's gate, up or down with an A and B per expert.
  int64_t experts(int64_t layer, int projection) const { return slot(layer, projection).experts; }
  // fp32 masters of one targeted projection on device(): A [r, K], B [N, r]. Throws if not
  // targeted.
  TensorView master_a(int64_t layer, int projection) const;
  TensorView master_b(int64_t layer, int projection) const;
  // Every master value in one contiguous f32 vector on device() (by layer: its A matrices in
  // projection order, then its B matrices, each starting on a multiple of 64 elements; the
  // gaps are zero and belong to no matrix): what the optimizer steps.
  TensorView master_params() const;
  // The bf16 compute copies the forward reads, laid out like master_params(), on CUDA (the
  // optimizer's step writes them beside the masters); empty on the CPU, where the masters are
  // the compute copies.
  TensorView compute_params() const;
  // A host copy of the masters, f32 [P] (a download on CUDA).
  Tensor host_masters() const;
  // The same matrix in another buffer laid out like master_params() (the gradients, the
  // optimizer's moments): A [r, K] (b = false) or B [N, r] of `flat` (f32 [P], any device);
  // an MoE layer's expert projection: every expert's, A [E, r, K] and B [E, N, r].
  TensorView slice(const TensorView& flat, int64_t layer, int projection, bool b) const;
  // The fp32 A (b = false) or B the trainer's backward reads on `device`: the masters, which
  // must be there.
  TensorView training_view(int64_t layer, int projection, bool b, Device device) const;
  size_t nbytes() const;  // masters plus compute copies

  // The score head of a SEQ_CLS adapter (LoraConfig::sequence_classification), after the
  // matrices in master_params(): whether there is one, and [num_labels, H] of `flat` (any
  // [P] f32 buffer laid out like the masters: the gradients, the moments).
  bool has_score_head() const { return score_offset_ >= 0; }
  TensorView score_slice(const TensorView& flat) const;
  // The head as the forward applies it (ops::linear): the compute copy of the masters on
  // `device` (the adapter's), f32 on the CPU and bf16 on CUDA.
  LinearWeight score_head(Device device) const;

 private:
  struct Slot {
    int64_t n = 0, k = 0;   // the projection's [N, K]
    int64_t offset = -1;    // element offset of A in the masters; -1: not targeted
    int64_t offset_b = -1;  // element offset of B
    int64_t experts = 0;    // > 0: an MoE layer's gate/up/down, one A and B per expert
    bool empty() const { return offset < 0; }
  };
  LoraAdapter() = default;
  static LoraAdapter allocate(const LoraConfig& config, const Model& model);
  const Slot& slot(int64_t layer, int projection) const;
  TensorView compute_view(const Slot& s, bool b, Device device) const;

  // View of matrix A (b = false) or B of slot s in the [P] vector flat.
  TensorView matrix(const TensorView& flat, const Slot& s, bool b) const;
  // CUDA: device masters = values (f32 [P] host), compute copies = bf16(values); waits.
  void upload(const TensorView& values);

  LoraConfig config_;
  int64_t num_layers_ = 0;
  int64_t num_params_ = 0;
  std::vector<Slot> slots_;      // [layer * 7 + projection]
  Context ctx_;                  // the masters' device (the host until to_device)
  Tensor masters_;               // [P] f32 on the host; empty on CUDA
  DeviceBuffer device_masters_;  // [P] f32 on CUDA, after to_device
  DeviceBuffer compute_copy_;    // [P] bf16 on CUDA, after to_device
  uint64_t version_ = 1;
  int64_t score_offset_ = -1;                // element offset of the score head; -1: none
  int64_t score_rows_ = 0, score_cols_ = 0;  // [num_labels, H]
};

// The CPU reference of one adapted projection's low-rank term, PEFT's unmerged form:
// y += scale * (x A^T) B^T for x [M, K] f32, y [M, N] f32 and f32 A, B (fp64 accumulation).
void add_lora_reference(const TensorView& x, const LoraWeights& lora, const TensorView& y);

}  // namespace fp8rl
