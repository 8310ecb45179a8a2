#include "train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "core/check.h"
#include "formats/safetensors.h"
#include "ops/optimizer.h"

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

Optimizer::Optimizer(int64_t num_params, const Context& ctx) : ctx_(ctx), num_params_(num_params) {
  CHECK(num_params > 0, "optimizer over {} parameters", num_params);
}

void Optimizer::step(std::span<float> params, std::span<const float> grads, double lr) {
  CHECK(ctx_.device == Device::cpu, "{} step: host spans given to an optimizer on {}", name(),
        device_name(ctx_.device));
  step(TensorView(params.data(), DType::f32, {int64_t(params.size())}),
       TensorView(const_cast<float*>(grads.data()), DType::f32, {int64_t(grads.size())}), lr);
}

void Optimizer::step(const TensorView& params, const TensorView& grads, double lr, float grad_scale,
                     const TensorView& compute_copy) {
  CHECK(params.numel() == num_params_ && grads.numel() == num_params_,
        "{} step: {} parameters and {} gradients, expected {}", name(), params.numel(),
        grads.numel(), num_params_);
  CHECK(lr >= 0.0 && std::isfinite(lr), "{} step: learning rate {} is not finite and >= 0", name(),
        lr);
  CHECK(std::isfinite(grad_scale) && grad_scale >= 0.0f,
        "{} step: gradient scale {} is not finite and >= 0", name(), grad_scale);
  update(params, grads, lr, grad_scale, compute_copy);
  ++steps_;
}

DeviceBuffer Optimizer::zeros() const {
  DeviceBuffer b(ctx_, size_t(num_params_) * sizeof(float));
  Context ctx = ctx_;
  ops::fill_zero(ctx, vector(b));
  return b;
}

DeviceBuffer Optimizer::load_vector(const SafetensorsFile& file, const char* name) const {
  const SafetensorsTensorInfo* info = file.find(name);
  CHECK(info != nullptr, "optimizer state '{}': tensor '{}' is missing", file.path(), name);
  CHECK(info->supported && info->dtype == DType::f32 && info->shape == Shape{num_params_},
        "optimizer state '{}': tensor '{}' is {} {}, expected F32 [{}]", file.path(), name,
        info->dtype_str, info->shape.str(), num_params_);
  const TensorView from(const_cast<void*>(file.view(*info).data), DType::f32, {num_params_});
  // A moment that is not finite (or a negative second moment, whose square root is NaN) would
  // turn every parameter it touches into NaN on the first step: the resumed run would write a
  // NaN adapter without an error.
  const bool second_moment = std::string_view(name) == "exp_avg_sq";
  const float* values = static_cast<const float*>(from.data);
  for (int64_t i = 0; i < num_params_; ++i) {
    const float x = values[i];
    CHECK(std::isfinite(x) && (!second_moment || x >= 0.0f),
          "optimizer state '{}': tensor '{}' has {} at index {}{}", file.path(), name, x, i,
          second_moment ? " (expected finite and >= 0)" : " (expected finite)");
  }
  DeviceBuffer b(ctx_, size_t(num_params_) * sizeof(float));
  Context ctx = ctx_;
  ops::copy(ctx, from, vector(b));
  ops::synchronize(ctx);  // the file's mapping may go once this returns
  return b;
}

void Optimizer::add_state(SafetensorsWriter& writer) const {
  writer.add_metadata(kKindKey, std::string(name()));
  writer.add_metadata(kStepKey, std::to_string(steps_));
  writer.add_metadata(kParamsKey, std::to_string(num_params_));
  writer.add_metadata(kHyperKey, hyperparameters());
  Context ctx = ctx_;
  for (auto& [name, t] : state()) {
    if (t.device == Device::cpu) {
      writer.add(name, t);
      continue;
    }
    Tensor host = Tensor::empty(t.shape, t.dtype);  // the download the file is written from
    ops::copy(ctx, t, host.view());
    writer.add(name, std::move(host));
  }
}

std::string settings_mismatch(const std::string& saved, const std::string& now,
                              const std::vector<std::string>& may_change) {
  const auto parse = [](const std::string& text) {
    std::vector<std::pair<std::string, std::string>> kv;
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find(';', at);
      if (end == std::string::npos) end = text.size();
      const std::string item = text.substr(at, end - at);
      const size_t eq = item.find('=');
      kv.emplace_back(item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1));
      at = end + 1;
    }
    return kv;
  };
  // The user's names of the optimizer's settings (TrainingArguments' keys).
  const auto user_name = [](const std::string& key) -> std::string {
    if (key == "beta1" || key == "beta2") return "adam_" + key;
    if (key == "eps") return "adam_epsilon";
    return key;
  };
  const auto a = parse(saved), b = parse(now);
  for (const auto& [key, value] : b) {
    if (std::find(may_change.begin(), may_change.end(), key) != may_change.end()) continue;
    const auto it = std::find_if(a.begin(), a.end(), [&](const auto& p) { return p.first == key; });
    const std::string old = it == a.end() ? "(not set)" : it->second;
    if (old != value)
      return fmt::format("{} was {} in the checkpoint, this run has {}", user_name(key), old,
                         value);
  }
  return a.size() == b.size()
             ? ""
             : fmt::format("its settings '{}' differ from this run's '{}'", saved, now);
}

void Optimizer::load_state(const SafetensorsFile& file) {
  const std::string& kind = metadata_value(file, kKindKey);
  CHECK(kind == name(),
        "cannot resume from '{}': optim was {} in the checkpoint, this run has {}; it cannot "
        "change on resume",
        file.path(), kind, name());
  const int64_t n = file.metadata_count(kParamsKey, "optimizer state");
  CHECK(n == num_params_, "optimizer state '{}' is over {} parameters, this optimizer over {}",
        file.path(), n, num_params_);
  const std::string& hyper = metadata_value(file, kHyperKey);
  const std::string mismatch = settings_mismatch(hyper, hyperparameters());
  CHECK(mismatch.empty(),
        "cannot resume from '{}': {}; the optimizer's state was built with it, so it cannot "
        "change on resume",
        file.path(), mismatch);
  const int64_t steps = file.metadata_count(kStepKey, "optimizer state");
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

AdamW::AdamW(int64_t num_params, const AdamWConfig& config, const Context& ctx)
    : Optimizer(num_params, ctx), config_(config) {
  config_.validate();
  m_ = zeros();
  v_ = zeros();
}

void AdamW::update(const TensorView& params, const TensorView& grads, double lr, float grad_scale,
                   const TensorView& compute_copy) {
  const double t = double(steps_ + 1);
  ops::AdamWStep s;
  s.lr = lr;
  s.beta1 = config_.beta1;
  s.beta2 = config_.beta2;
  s.eps = config_.eps;
  s.one_minus_beta1 = 1.0 - config_.beta1;
  s.one_minus_beta2 = 1.0 - config_.beta2;
  s.decay = 1.0 - lr * config_.weight_decay;
  s.bias_correction1 = 1.0 - std::pow(config_.beta1, t);
  s.bias_correction2 = 1.0 - std::pow(config_.beta2, t);
  ops::adamw_step(ctx_, s, params, grads, grad_scale, vector(m_), vector(v_), compute_copy);
}

std::vector<std::pair<std::string, TensorView>> AdamW::state() const {
  return {{"exp_avg", vector(m_)}, {"exp_avg_sq", vector(v_)}};
}

std::span<const float> AdamW::host_span(const DeviceBuffer& b) const {
  CHECK(b.device() == Device::cpu, "the AdamW moments are on {}, not the host",
        device_name(b.device()));
  return {static_cast<const float*>(b.data()), size_t(num_params_)};
}

void AdamW::load_tensors(const SafetensorsFile& file) {
  // Into new tensors first, so that a file failing half-way leaves the state as it was.
  DeviceBuffer m = load_vector(file, "exp_avg");
  DeviceBuffer v = load_vector(file, "exp_avg_sq");
  m_ = std::move(m);
  v_ = std::move(v);
}

std::string AdamW::hyperparameters() const {
  return fmt::format("beta1={};beta2={};eps={};weight_decay={}", config_.beta1, config_.beta2,
                     config_.eps, config_.weight_decay);
}

// ---- SGD --------------------------------------------------------------------------------------

Sgd::Sgd(int64_t num_params, const SgdConfig& config, const Context& ctx)
    : Optimizer(num_params, ctx), config_(config) {
  config_.validate();
  if (config_.momentum != 0.0) buffer_ = DeviceBuffer(ctx_, size_t(num_params_) * sizeof(float));
}

void Sgd::update(const TensorView& params, const TensorView& grads, double lr, float grad_scale,
                 const TensorView& compute_copy) {
  ops::SgdStep s;
  s.lr = lr;
  s.weight_decay = config_.weight_decay;
  s.momentum = config_.momentum;
  s.keep = 1.0 - config_.dampening;
  s.nesterov = config_.nesterov;
  s.first = !started_;
  ops::sgd_step(ctx_, s, params, grads, grad_scale,
                s.momentum != 0.0 ? vector(buffer_) : TensorView(), compute_copy);
  started_ = s.momentum != 0.0;
}

std::vector<std::pair<std::string, TensorView>> Sgd::state() const {
  if (!started_) return {};
  return {{"momentum_buffer", vector(buffer_)}};
}

std::span<const float> Sgd::momentum_buffer() const {
  CHECK(ctx_.device == Device::cpu, "the SGD momentum buffer is on {}, not the host",
        device_name(ctx_.device));
  return {static_cast<const float*>(buffer_.data()), started_ ? size_t(num_params_) : 0};
}

void Sgd::load_tensors(const SafetensorsFile& file) {
  if (file.find("momentum_buffer") == nullptr) {
    // torch has no buffer before the first step with momentum; after one it must be there.
    CHECK(config_.momentum == 0.0 || file.metadata_count(kStepKey, "optimizer state") == 0,
          "optimizer state '{}': tensor 'momentum_buffer' is missing", file.path());
    started_ = false;
    return;
  }
  CHECK(config_.momentum != 0.0, "optimizer state '{}' has a momentum buffer, but momentum is 0",
        file.path());
  buffer_ = load_vector(file, "momentum_buffer");
  started_ = true;
}

std::string Sgd::hyperparameters() const {
  return fmt::format("momentum={};dampening={};nesterov={};weight_decay={}", config_.momentum,
                     config_.dampening, config_.nesterov, config_.weight_decay);
}

}  // namespace fp8rl
