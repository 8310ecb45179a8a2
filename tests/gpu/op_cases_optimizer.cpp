// Op cases of the optimizer's ops (ops/optimizer.h): the CUDA AdamW and SGD steps and the fp64
// L2 norm against the CPU reference on the same inputs, bit for bit (bound 0 differing
// elements): both evaluate ops/optimizer_rules.h with each fp64 operation rounded on its own,
// and the norm's sum in one fixed order. Negative controls: the same AdamW update in fp32
// arithmetic (what a kernel following torch's fp32 code would give) and the norm
// summed in an fp32 accumulator each differ from the reference, so the bitwise comparison
// would catch either; a CUDA step at the next step number (another bias correction) differs
// too. Outputs in guarded buffers.
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "harness.h"
#include "op_cases.h"
#include "ops/optimizer.h"
#include "ops/uniform_hash.h"

namespace fp8rl::gpu_test {

namespace {

// Host f32 values uniform in [lo, hi] in magnitude with random signs, all 24 bits used.
Tensor f32_values(int64_t n, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    const float u = uniform_hash(seed, uint64_t(i), 1.0f);  // [-1, 1]
    const float mag = lo + (hi - lo) * std::fabs(u);
    t.ptr<float>()[i] = u < 0 ? -mag : mag;
  }
  return t;
}

// Elements whose bytes differ between a host tensor and a device tensor of the same dtype.
double elements_differing(Harness& h, const Tensor& host, const TensorView& dev) {
  const Tensor d = to_host(h, dev);
  const size_t es = dtype_size(host.dtype());
  double n = 0;
  for (int64_t i = 0; i < host.numel(); ++i)
    n += std::memcmp(static_cast<const char*>(host.view().data) + size_t(i) * es,
                     static_cast<const char*>(d.view().data) + size_t(i) * es, es) != 0;
  return n;
}

Check differs(const std::string& what, double differing) {
  Check c;
  c.what = "negative control: " + what + " differs somewhere";
  c.err = differing;
  c.bound = 0;
  c.ok = differing > 0;
  return c;
}

ops::AdamWStep adamw_constants(double lr, int64_t t, double weight_decay) {
  ops::AdamWStep s;
  s.lr = lr;
  s.beta1 = 0.9;
  s.beta2 = 0.999;
  s.eps = 1e-8;
  s.one_minus_beta1 = 1.0 - s.beta1;
  s.one_minus_beta2 = 1.0 - s.beta2;
  s.decay = 1.0 - lr * weight_decay;
  s.bias_correction1 = 1.0 - std::pow(s.beta1, double(t));
  s.bias_correction2 = 1.0 - std::pow(s.beta2, double(t));
  return s;
}

}  // namespace

void adamw_step_case(Harness& h, Outcome& o, int64_t n, float grad_scale) {
  const ops::AdamWStep step = adamw_constants(1e-3, 5, 0.01);
  const Tensor p0 = f32_values(n, 901, 1e-3f, 0.5f), g = f32_values(n, 902, 1e-6f, 2.0f);
  const Tensor m0 = f32_values(n, 903, 1e-6f, 0.1f), v0 = f32_values(n, 904, 1e-9f, 1e-2f);
  for (int64_t i = 0; i < n; ++i) v0.ptr<float>()[i] = std::fabs(v0.ptr<float>()[i]);
  Tensor p = copy_of(p0), m = copy_of(m0), v = copy_of(v0);
  Tensor copy = Tensor::empty({n}, DType::bf16);
  ops::adamw_step(h.cpu, step, p, g, grad_scale, m, v, copy);

  const TensorView g_d = to_device(h, g, DType::f32);
  Guard guard(h);
  const TensorView p_d = ops::scratch_alloc(h.gpu, {n}, DType::f32);
  const TensorView m_d = ops::scratch_alloc(h.gpu, {n}, DType::f32);
  const TensorView v_d = ops::scratch_alloc(h.gpu, {n}, DType::f32);
  const TensorView c_d = ops::scratch_alloc(h.gpu, {n}, DType::bf16);
  guard.seal();
  upload_into(h, p0, p_d);
  upload_into(h, m0, m_d);
  upload_into(h, v0, v_d);
  ops::adamw_step(h.gpu, step, p_d, g_d, grad_scale, m_d, v_d, c_d);
  o.checks.push_back(expect_le("params elements != cpu", elements_differing(h, p, p_d), 0));
  o.checks.push_back(expect_le("exp_avg elements != cpu", elements_differing(h, m, m_d), 0));
  o.checks.push_back(expect_le("exp_avg_sq elements != cpu", elements_differing(h, v, v_d), 0));
  o.checks.push_back(
      expect_le("compute copy elements != cpu", elements_differing(h, copy, c_d), 0));
  o.checks.push_back(guard.verify({p_d, m_d, v_d, c_d}));

  // Controls. The same update in fp32 arithmetic (torch's), which rounds every operation to
  // fp32:
  Tensor p32 = copy_of(p0), m32 = copy_of(m0), v32 = copy_of(v0);
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g.ptr<float>()[i] * grad_scale;
    float& mi = m32.ptr<float>()[i];
    float& vi = v32.ptr<float>()[i];
    mi = float(step.beta1) * mi + float(step.one_minus_beta1) * gi;
    vi = float(step.beta2) * vi + float(step.one_minus_beta2) * gi * gi;
    const float m_hat = mi / float(step.bias_correction1);
    const float v_hat = vi / float(step.bias_correction2);
    float& pi = p32.ptr<float>()[i];
    pi = pi * float(step.decay) - float(step.lr) * m_hat / (std::sqrt(v_hat) + float(step.eps));
  }
  o.checks.push_back(differs("the fp32-arithmetic update", elements_differing(h, p32, p_d)));
  // The CUDA step at step number 6 instead of 5.
  upload_into(h, p0, p_d);
  upload_into(h, m0, m_d);
  upload_into(h, v0, v_d);
  ops::adamw_step(h.gpu, adamw_constants(1e-3, 6, 0.01), p_d, g_d, grad_scale, m_d, v_d);
  o.checks.push_back(differs("the step at t + 1", elements_differing(h, p, p_d)));
}

void sgd_step_case(Harness& h, Outcome& o, int64_t n, double momentum, bool nesterov,
                   float grad_scale) {
  const Tensor p0 = f32_values(n, 911, 1e-3f, 0.5f), g = f32_values(n, 912, 1e-6f, 2.0f);
  const Tensor b0 = f32_values(n, 913, 1e-6f, 0.1f);
  const TensorView g_d = to_device(h, g, DType::f32);
  Guard guard(h);
  const TensorView p_d = ops::scratch_alloc(h.gpu, {n}, DType::f32);
  const TensorView b_d = ops::scratch_alloc(h.gpu, {n}, DType::f32);
  const TensorView c_d = ops::scratch_alloc(h.gpu, {n}, DType::bf16);
  guard.seal();
  upload_into(h, p0, p_d);
  upload_into(h, b0, b_d);
  Tensor p = copy_of(p0), b = copy_of(b0);
  Tensor copy = Tensor::empty({n}, DType::bf16);
  // The step that creates the buffer, then one that reads it.
  for (bool first : {true, false}) {
    ops::SgdStep s;
    s.lr = 1e-2;
    s.weight_decay = 0.01;
    s.momentum = momentum;
    s.keep = 1.0 - 0.1;
    s.nesterov = nesterov;
    s.first = first;
    const TensorView buffer_h = momentum != 0.0 ? b.view() : TensorView();
    const TensorView buffer_d = momentum != 0.0 ? b_d : TensorView();
    ops::sgd_step(h.cpu, s, p, g, grad_scale, buffer_h, copy);
    ops::sgd_step(h.gpu, s, p_d, g_d, grad_scale, buffer_d, c_d);
    const std::string at = first ? " (first step)" : " (second step)";
    o.checks.push_back(expect_le("params elements != cpu" + at, elements_differing(h, p, p_d), 0));
    if (momentum != 0.0)
      o.checks.push_back(
          expect_le("momentum_buffer elements != cpu" + at, elements_differing(h, b, b_d), 0));
    o.checks.push_back(
        expect_le("compute copy elements != cpu" + at, elements_differing(h, copy, c_d), 0));
  }
  o.checks.push_back(guard.verify({p_d, b_d, c_d}));
  // Control: the parameters moved (equal bits are not "nothing written").
  o.checks.push_back(differs("the parameters before the steps", elements_differing(h, p0, p_d)));
}

void l2_norm_case(Harness& h, Outcome& o, int64_t n) {
  const Tensor x = f32_values(n, 921, 1e-4f, 3.0f);
  const double ref = ops::l2_norm(h.cpu, x);
  const TensorView x_d = to_device(h, x, DType::f32);
  const double got = ops::l2_norm(h.gpu, x_d);
  o.checks.push_back(expect_le("|cuda - cpu| (bit-exact)", std::fabs(got - ref), 0));
  // Control: the squares summed in an fp32 accumulator round differently.
  float sum32 = 0;
  for (int64_t i = 0; i < n; ++i) sum32 += x.ptr<float>()[i] * x.ptr<float>()[i];
  o.checks.push_back(differs("the fp32-accumulated norm", std::sqrt(double(sum32)) != got ? 1 : 0));
  // The non-finite check: one NaN or Inf anywhere makes the norm non-finite.
  for (float bad : {NAN, INFINITY}) {
    Tensor y = copy_of(x);
    y.ptr<float>()[n / 2 + 1] = bad;
    const double norm = ops::l2_norm(h.gpu, to_device(h, y, DType::f32));
    Check c = expect_le(std::string("finite norm with a ") + (std::isnan(bad) ? "NaN" : "Inf"),
                        std::isfinite(norm) ? 1 : 0, 0);
    o.checks.push_back(c);
  }
}

void add_optimizer_cases(std::vector<OpCase>& c) {
  auto add = [&](std::string name, std::function<void(Harness&, Outcome&)> fn, bool quick) {
    c.push_back({std::move(name), std::move(fn), quick});
  };
  for (int64_t n : {int64_t(1000), int64_t(3) * ops::kNormBlockElements + 77})
    for (float scale : {1.0f, 0.3173f})
      add(
          fmtname("adamw_step", shape({{"P", n}, {"clipped", scale != 1.0f}})),
          [=](Harness& h, Outcome& o) { adamw_step_case(h, o, n, scale); }, n == 1000);
  for (double momentum : {0.0, 0.9})
    for (bool nesterov : {false, true}) {
      if (nesterov && momentum == 0.0) continue;
      const int64_t n = 70001;
      add(
          fmtname("sgd_step",
                  shape({{"P", n}, {"momentum", momentum != 0.0}, {"nesterov", nesterov}})),
          [=](Harness& h, Outcome& o) { sgd_step_case(h, o, n, momentum, nesterov, 0.61f); },
          momentum == 0.0);
    }
  for (int64_t n : {int64_t(5), ops::kNormBlockElements, int64_t(200003)})
    add(
        fmtname("l2_norm", shape({{"P", n}})),
        [=](Harness& h, Outcome& o) { l2_norm_case(h, o, n); }, n == 5);
}

}  // namespace fp8rl::gpu_test
