// Optimizers over one flat fp32 parameter vector (the LoRA masters,
// LoraAdapter::master_params()) with the update rules of torch.optim, their fp32 state on the
// optimizer's device (the host, or CUDA memory beside the masters), and their state saved to
// and restored from safetensors for an exact resume (a device state goes through a host copy).
//
// Each element's update is computed in fp64 from the fp32 parameter, gradient and state and
// rounded to fp32 once per stored value (ops/optimizer_rules.h); PyTorch computes the same
// formulas in fp32, so the two agree to fp32 rounding (a few ulp per step), not bit for bit.
// Given the same inputs the result here is bit-identical across runs, thread counts, devices
// (CPU and CUDA run the same per-element code, ops/optimizer.h) and a save/load in between.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/context.h"
#include "ops/memory.h"

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

// Where two settings texts "key=value;key=value" (a checkpoint's and this run's) differ, for the
// error of a resume that changed one: "<key> was <saved> in the checkpoint, this run has <now>"
// for the first differing key not in `may_change` (keys named by `config_name`, its config
// key's name), or "" when they agree.
std::string settings_mismatch(const std::string& saved, const std::string& now,
                              const std::vector<std::string>& may_change = {});

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of params [P] f32 with grads [P] f32 at learning rate lr (P = num_params()),
  // host memory; for an optimizer on the host.
  void step(std::span<float> params, std::span<const float> grads, double lr);
  // One update on the optimizer's device: params, grads [P] f32 there, each gradient read as
  // fp32(grads[i] * grad_scale) (the clipping factor; 1: none). compute_copy (optional, [P]
  // bf16 there) is set to bf16(new params) in the same pass: on CUDA the adapter's copy that
  // the forward reads (LoraAdapter::compute_params()), so no copy step follows.
  void step(const TensorView& params, const TensorView& grads, double lr, float grad_scale = 1.0f,
            const TensorView& compute_copy = {});
  virtual std::string_view name() const = 0;  // "adamw" | "sgd"

  int64_t num_params() const { return num_params_; }
  int64_t steps() const { return steps_; }  // updates applied (torch's state["step"])
  Device device() const { return ctx_.device; }
  // The state tensors by their names in the state file ([P] f32 views on device(); a tensor
  // not created yet, such as SGD's buffer before the first step, is left out).
  virtual std::vector<std::pair<std::string, TensorView>> state() const = 0;
  // Bytes of state memory on device(), allocated when the optimizer is made (SGD's momentum
  // buffer too, though torch's state has it only from the first step): a step allocates
  // nothing, so the memory plan made before the first step holds.
  virtual size_t state_bytes() const = 0;

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
  // The state lives on ctx's device (the default Context: the host); a CUDA context must
  // outlive the optimizer.
  Optimizer(int64_t num_params, const Context& ctx);
  // The update of step() after its checks; increments steps_.
  virtual void update(const TensorView& params, const TensorView& grads, double lr,
                      float grad_scale, const TensorView& compute_copy) = 0;
  // Restores the state tensors from the file (leaving the state as it was on an error).
  virtual void load_tensors(const SafetensorsFile& file) = 0;
  // Hyperparameters as "key=value;..." in shortest round-trip form, compared on load.
  virtual std::string hyperparameters() const = 0;
  // A zeroed [P] f32 state tensor on the optimizer's device.
  DeviceBuffer zeros() const;
  // Tensor `name` ([P] f32) of the file in a new state tensor on the optimizer's device.
  DeviceBuffer load_vector(const SafetensorsFile& file, const char* name) const;
  TensorView vector(const DeviceBuffer& b) const { return b.view({num_params_}, DType::f32); }

  Context ctx_;  // the state's device
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
  AdamW(int64_t num_params, const AdamWConfig& config, const Context& ctx = {});
  std::string_view name() const override { return "adamw"; }
  const AdamWConfig& config() const { return config_; }
  std::vector<std::pair<std::string, TensorView>> state() const override;
  size_t state_bytes() const override { return m_.size() + v_.size(); }
  // The moments of an optimizer on the host.
  std::span<const float> exp_avg() const { return host_span(m_); }
  std::span<const float> exp_avg_sq() const { return host_span(v_); }

 private:
  void update(const TensorView& params, const TensorView& grads, double lr, float grad_scale,
              const TensorView& compute_copy) override;
  void load_tensors(const SafetensorsFile& file) override;
  std::string hyperparameters() const override;
  std::span<const float> host_span(const DeviceBuffer& b) const;

  AdamWConfig config_;
  DeviceBuffer m_;  // [P] f32
  DeviceBuffer v_;  // [P] f32
};

// torch.optim.SGD:
//   g' = g + weight_decay p                    (coupled weight decay)
//   momentum > 0: b = g' on the first step, else b = momentum b + (1 - dampening) g';
//                 g' = g' + momentum b with nesterov, else g' = b
//   p -= lr g'
// with the momentum buffer b stored in fp32.
class Sgd final : public Optimizer {
 public:
  Sgd(int64_t num_params, const SgdConfig& config, const Context& ctx = {});
  std::string_view name() const override { return "sgd"; }
  const SgdConfig& config() const { return config_; }
  std::vector<std::pair<std::string, TensorView>> state() const override;
  size_t state_bytes() const override { return buffer_.size(); }
  // Of an optimizer on the host; empty until the first step with momentum > 0 (torch creates
  // the buffer there).
  std::span<const float> momentum_buffer() const;

 private:
  void update(const TensorView& params, const TensorView& grads, double lr, float grad_scale,
              const TensorView& compute_copy) override;
  void load_tensors(const SafetensorsFile& file) override;
  std::string hyperparameters() const override;

  SgdConfig config_;
  DeviceBuffer buffer_;   // [P] f32 momentum buffer, with momentum only
  bool started_ = false;  // the buffer holds torch's state: a step ran, or a state was loaded
};

}  // namespace fp8rl
