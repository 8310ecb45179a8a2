// Optimizers over one flat fp32 parameter vector (the LoRA masters,
// LoraAdapter::master_params()) with the update rules of torch.optim, fp32 state on the host,
// and their state saved to and restored from safetensors for an exact resume.
//
// Each element's update is computed in fp64 from the fp32 parameter, gradient and state and
// rounded to fp32 once per stored value; PyTorch computes the same formulas in fp32, so the
// two agree to fp32 rounding (a few ulp per step), not bit for bit. Given the same inputs the
// result here is bit-identical across runs, thread counts and a save/load in between.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace fp8rl {

class SafetensorsFile;
class SafetensorsWriter;

// torch.optim.AdamW's hyperparameters besides lr (which comes per step from the schedule);
// the defaults are transformers.TrainingArguments' adam_beta1, adam_beta2, adam_epsilon and
// weight_decay.
struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  void validate() const;  // torch's ranges: 0 <= beta < 1, eps >= 0, weight_decay >= 0
};

// torch.optim.SGD's hyperparameters besides lr.
struct SgdConfig {
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // requires momentum > 0 and dampening == 0, as in torch
  double weight_decay = 0.0;
  void validate() const;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of params [P] f32 with grads [P] f32 at learning rate lr (P = num_params()).
  virtual void step(std::span<float> params, std::span<const float> grads, double lr) = 0;
  virtual std::string_view name() const = 0;  // "adamw" | "sgd"

  int64_t num_params() const { return num_params_; }
  int64_t steps() const { return steps_; }  // updates applied (torch's state["step"])

  // The state as torch's state_dict holds it: tensors (exp_avg, exp_avg_sq /
  // momentum_buffer, [P] f32) and, as metadata under "optimizer.", the kind, the step count
  // and the hyperparameters. The writer keeps views into this optimizer until it writes.
  void add_state(SafetensorsWriter& writer) const;
  // Restores what add_state wrote. The kind, parameter count and hyperparameters must equal
  // this optimizer's (an error names the first that differs): an exact resume needs them, and
  // a changed value is more likely a mistake than a wish.
  void load_state(const SafetensorsFile& file);
  // add_state into a file of its own (written as path.tmp, then renamed) / load_state from it.
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  explicit Optimizer(int64_t num_params);
  void check_step_args(std::span<float> params, std::span<const float> grads, double lr) const;
  virtual void add_tensors(SafetensorsWriter& writer) const = 0;
  virtual void load_tensors(const SafetensorsFile& file) = 0;
  // Hyperparameters as "key=value;..." in shortest round-trip form, compared on load.
  virtual std::string hyperparameters() const = 0;

  int64_t num_params_ = 0;
  int64_t steps_ = 0;
};

// torch.optim.AdamW, for step t = steps() + 1:
//   p *= 1 - lr * weight_decay                 (decoupled weight decay, applied first)
//   m  = beta1 m + (1 - beta1) g
//   v  = beta2 v + (1 - beta2) g^2
//   p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// with m, v starting at zero and stored in fp32; the update reads the stored (rounded) m, v.
class AdamW final : public Optimizer {
 public:
  AdamW(int64_t num_params, const AdamWConfig& config);
  void step(std::span<float> params, std::span<const float> grads, double lr) override;
  std::string_view name() const override { return "adamw"; }
  const AdamWConfig& config() const { return config_; }
  std::span<const float> exp_avg() const { return {m_.ptr<float>(), size_t(num_params_)}; }
  std::span<const float> exp_avg_sq() const { return {v_.ptr<float>(), size_t(num_params_)}; }

 private:
  void add_tensors(SafetensorsWriter& writer) const override;
  void load_tensors(const SafetensorsFile& file) override;
  std::string hyperparameters() const override;

  AdamWConfig config_;
  Tensor m_;  // [P] f32
  Tensor v_;  // [P] f32
};

// torch.optim.SGD:
//   g' = g + weight_decay p                    (coupled weight decay)
//   momentum > 0: b = g' on the first step, else b = momentum b + (1 - dampening) g';
//                 g' = g' + momentum b with nesterov, else g' = b
//   p -= lr g'
// with the momentum buffer b stored in fp32.
class Sgd final : public Optimizer {
 public:
  Sgd(int64_t num_params, const SgdConfig& config);
  void step(std::span<float> params, std::span<const float> grads, double lr) override;
  std::string_view name() const override { return "sgd"; }
  const SgdConfig& config() const { return config_; }
  // Empty until the first step with momentum > 0 (torch creates the buffer there).
  std::span<const float> momentum_buffer() const {
    return {buffer_.ptr<float>(), buffer_.empty() ? 0 : size_t(num_params_)};
  }

 private:
  void add_tensors(SafetensorsWriter& writer) const override;
  void load_tensors(const SafetensorsFile& file) override;
  std::string hyperparameters() const override;

  SgdConfig config_;
  Tensor buffer_;  // [P] f32 momentum buffer; empty before the first step or without momentum
};

}  // namespace fp8rl
