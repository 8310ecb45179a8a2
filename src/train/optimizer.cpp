#include "train/optimizer.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "formats/safetensors.h"
#include "train/block_loop.h"

namespace fp8rl {

namespace {

constexpr const char* kKindKey = "optimizer.kind";
constexpr const char* kStepKey = "optimizer.step";
constexpr const char* kParamsKey = "optimizer.num_params";
constexpr const char* kHyperKey = "optimizer.hyperparameters";

const std::string& metadata_value(const SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata().find(key);
  CHECK(it != file.metadata().end(), "optimizer state '{}': metadata '{}' is missing", file.path(),
        key);
  return it->second;
}

int64_t parse_count(const SafetensorsFile& file, const std::string& key) {
  const std::string& text = metadata_value(file, key);
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  CHECK(used == text.size() && value >= 0,
        "optimizer state '{}': metadata '{}' = '{}' is not a count", file.path(), key, text);
  return value;
}

// Copies tensor `name` ([P] f32) of the file into dst.
void load_vector(const SafetensorsFile& file, const char* name, int64_t n, const Tensor& dst) {
  const SafetensorsTensorInfo* info = file.find(name);
  CHECK(info != nullptr, "optimizer state '{}': tensor '{}' is missing", file.path(), name);
  CHECK(info->supported && info->dtype == DType::f32 && info->shape == Shape{n},
        "optimizer state '{}': tensor '{}' is {} {}, expected F32 [{}]", file.path(), name,
        info->dtype_str, info->shape.str(), n);
  std::memcpy(dst.ptr<float>(), file.view(*info).data, size_t(n) * sizeof(float));
}

}  // namespace

void AdamWConfig::validate() const {
  CHECK(beta1 >= 0.0 && beta1 < 1.0, "adam_beta1 must be in [0, 1), got {}", beta1);
  CHECK(beta2 >= 0.0 && beta2 < 1.0, "adam_beta2 must be in [0, 1), got {}", beta2);
  CHECK(eps >= 0.0 && std::isfinite(eps), "adam_epsilon must be finite and >= 0, got {}", eps);
  CHECK(weight_decay >= 0.0 && std::isfinite(weight_decay),
        "weight_decay must be finite and >= 0, got {}", weight_decay);
}

void SgdConfig::validate() const {
  CHECK(momentum >= 0.0 && std::isfinite(momentum), "momentum must be finite and >= 0, got {}",
        momentum);
  CHECK(std::isfinite(dampening), "dampening must be finite, got {}", dampening);
  CHECK(weight_decay >= 0.0 && std::isfinite(weight_decay),
        "weight_decay must be finite and >= 0, got {}", weight_decay);
  CHECK(!nesterov || (momentum > 0.0 && dampening == 0.0),
        "nesterov momentum requires momentum > 0 and dampening 0 (got momentum {}, dampening {})",
        momentum, dampening);
}

// ---- Optimizer --------------------------------------------------------------------------------

Optimizer::Optimizer(int64_t num_params) : num_params_(num_params) {
  CHECK(num_params > 0, "optimizer over {} parameters", num_params);
}

void Optimizer::check_step_args(std::span<float> params, std::span<const float> grads,
                                double lr) const {
  CHECK(int64_t(params.size()) == num_params_ && int64_t(grads.size()) == num_params_,
        "{} step: {} parameters and {} gradients, expected {}", name(), params.size(), grads.size(),
        num_params_);
  CHECK(lr >= 0.0 && std::isfinite(lr), "{} step: learning rate {} is not finite and >= 0", name(),
        lr);
}

void Optimizer::add_state(SafetensorsWriter& writer) const {
  writer.add_metadata(kKindKey, std::string(name()));
  writer.add_metadata(kStepKey, std::to_string(steps_));
  writer.add_metadata(kParamsKey, std::to_string(num_params_));
  writer.add_metadata(kHyperKey, hyperparameters());
  add_tensors(writer);
}

void Optimizer::load_state(const SafetensorsFile& file) {
  const std::string& kind = metadata_value(file, kKindKey);
  CHECK(kind == name(), "optimizer state '{}' is of optimizer '{}', not '{}'", file.path(), kind,
        name());
  const int64_t n = parse_count(file, kParamsKey);
  CHECK(n == num_params_, "optimizer state '{}' is over {} parameters, this optimizer over {}",
        file.path(), n, num_params_);
  const std::string& hyper = metadata_value(file, kHyperKey);
  CHECK(hyper == hyperparameters(),
        "optimizer state '{}' was saved with hyperparameters '{}', this optimizer has '{}'",
        file.path(), hyper, hyperparameters());
  const int64_t steps = parse_count(file, kStepKey);
  load_tensors(file);
  steps_ = steps;
}

void Optimizer::save(const std::string& path) const {
  SafetensorsWriter writer;
  add_state(writer);
  writer.write(path);
}

void Optimizer::load(const std::string& path) {
  load_state(*SafetensorsFile::open(path));
}

// ---- AdamW ------------------------------------------------------------------------------------

AdamW::AdamW(int64_t num_params, const AdamWConfig& config)
    : Optimizer(num_params), config_(config) {
  config_.validate();
  m_ = Tensor::zeros({num_params}, DType::f32);
  v_ = Tensor::zeros({num_params}, DType::f32);
}

void AdamW::step(std::span<float> params, std::span<const float> grads, double lr) {
  check_step_args(params, grads, lr);
  const double t = double(steps_ + 1);
  const double b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  const double decay = 1.0 - lr * config_.weight_decay;
  const double bias_correction1 = 1.0 - std::pow(b1, t);
  const double bias_correction2 = 1.0 - std::pow(b2, t);
  float* m = m_.ptr<float>();  // [P] f32
  float* v = v_.ptr<float>();  // [P] f32
  for_each_block(num_params_, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double g = grads[i];
      m[i] = float(b1 * double(m[i]) + (1.0 - b1) * g);
      v[i] = float(b2 * double(v[i]) + (1.0 - b2) * g * g);
      const double m_hat = double(m[i]) / bias_correction1;
      const double v_hat = double(v[i]) / bias_correction2;
      params[i] = float(double(params[i]) * decay - lr * m_hat / (std::sqrt(v_hat) + eps));
    }
  });
  ++steps_;
}

void AdamW::add_tensors(SafetensorsWriter& writer) const {
  writer.add("exp_avg", m_.view());
  writer.add("exp_avg_sq", v_.view());
}

void AdamW::load_tensors(const SafetensorsFile& file) {
  // Into new tensors first, so that a file failing half-way leaves the state as it was.
  Tensor m = Tensor::empty({num_params_}, DType::f32);
  Tensor v = Tensor::empty({num_params_}, DType::f32);
  load_vector(file, "exp_avg", num_params_, m);
  load_vector(file, "exp_avg_sq", num_params_, v);
  m_ = std::move(m);
  v_ = std::move(v);
}

std::string AdamW::hyperparameters() const {
  return fmt::format("beta1={};beta2={};eps={};weight_decay={}", config_.beta1, config_.beta2,
                     config_.eps, config_.weight_decay);
}

// ---- SGD --------------------------------------------------------------------------------------

Sgd::Sgd(int64_t num_params, const SgdConfig& config) : Optimizer(num_params), config_(config) {
  config_.validate();
}

void Sgd::step(std::span<float> params, std::span<const float> grads, double lr) {
  check_step_args(params, grads, lr);
  const double wd = config_.weight_decay, mu = config_.momentum;
  const double keep = 1.0 - config_.dampening;
  const bool first = buffer_.empty();
  if (mu != 0.0 && first) buffer_ = Tensor::empty({num_params_}, DType::f32);
  float* buf = mu != 0.0 ? buffer_.ptr<float>() : nullptr;  // [P] f32
  const bool nesterov = config_.nesterov;
  for_each_block(num_params_, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double p = params[i];
      double g = double(grads[i]) + wd * p;
      if (buf != nullptr) {
        buf[i] = first ? float(g) : float(mu * double(buf[i]) + keep * g);
        g = nesterov ? g + mu * double(buf[i]) : double(buf[i]);
      }
      params[i] = float(p - lr * g);
    }
  });
  ++steps_;
}

void Sgd::add_tensors(SafetensorsWriter& writer) const {
  if (!buffer_.empty()) writer.add("momentum_buffer", buffer_.view());
}

void Sgd::load_tensors(const SafetensorsFile& file) {
  if (file.find("momentum_buffer") == nullptr) {
    // torch has no buffer before the first step with momentum; after one it must be there.
    CHECK(config_.momentum == 0.0 || parse_count(file, kStepKey) == 0,
          "optimizer state '{}': tensor 'momentum_buffer' is missing", file.path());
    buffer_ = Tensor();
    return;
  }
  CHECK(config_.momentum != 0.0, "optimizer state '{}' has a momentum buffer, but momentum is 0",
        file.path());
  Tensor buffer = Tensor::empty({num_params_}, DType::f32);
  load_vector(file, "momentum_buffer", num_params_, buffer);
  buffer_ = std::move(buffer);
}

std::string Sgd::hyperparameters() const {
  return fmt::format("momentum={};dampening={};nesterov={};weight_decay={}", config_.momentum,
                     config_.dampening, config_.nesterov, config_.weight_decay);
}

}  // namespace fp8rl
