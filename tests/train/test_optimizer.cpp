// The optimizer layer against the literal PyTorch / transformers formulas: AdamW and SGD
// steps against fp64 references and hand-derived values, clip_grad_norm_, the schedules at
// their breakpoints, the non-finite guard, and save -> load -> continue.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "formats/safetensors.h"
#include "tolerances.h"
#include "train/gradients.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/train_step.h"
#include "train/training_arguments.h"

namespace fp8rl {
namespace {

using test::kF32Eps;
using test::optimizer_f32_bound;

// Values in [lo, hi) with a random sign, a pure function of (seed, i).
std::vector<float> signed_values(uint64_t seed, int64_t n, float lo, float hi) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float mag = lo + (hi - lo) * uniform01(seed, uint64_t(2 * i));
    out[size_t(i)] = uniform01(seed, uint64_t(2 * i + 1)) < 0.5f ? -mag : mag;
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0.0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

double max_abs(const std::vector<float>& a) {
  double m = 0.0;
  for (float x : a) m = std::max(m, std::fabs(double(x)));
  return m;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// torch.optim.AdamW's update written out in fp64 with fp64 state. The switches turn off what
// distinguishes it, for the negative controls: bias correction, and decoupled weight decay
// (coupled: torch.optim.Adam's g += wd p).
struct AdamWReference {
  std::vector<double> p, m, v;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool bias_correction = true, decoupled = true;
  int t = 0;

  explicit AdamWReference(const std::vector<float>& p0)
      : p(p0.begin(), p0.end()), m(p0.size(), 0.0), v(p0.size(), 0.0) {}
  void step(const std::vector<float>& grads, double lr) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grads[i];
      if (decoupled) {
        p[i] *= 1.0 - lr * weight_decay;
      } else {
        g += weight_decay * p[i];
      }
      m[i] = beta1 * m[i] + (1.0 - beta1) * g;
      v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
      const double m_hat = bias_correction ? m[i] / (1.0 - std::pow(beta1, t)) : m[i];
      const double v_hat = bias_correction ? v[i] / (1.0 - std::pow(beta2, t)) : v[i];
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

// torch.optim.SGD's update written out in fp64 with an fp64 momentum buffer.
struct SgdReference {
  std::vector<double> p, buf;
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  int t = 0;

  explicit SgdReference(const std::vector<float>& p0)
      : p(p0.begin(), p0.end()), buf(p0.size(), 0.0) {}
  void step(const std::vector<float>& grads, double lr) {
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = double(grads[i]) + weight_decay * p[i];
      if (momentum != 0.0) {
        buf[i] = t == 1 ? g : momentum * buf[i] + (1.0 - dampening) * g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
};

// ---- AdamW ------------------------------------------------------------------------------------

TEST(AdamW, StepsEqualTheLiteralFormulasInFp64) {
  constexpr int64_t n = 1000;
  constexpr int steps = 5;
  const double lr = 0.05;
  AdamWConfig config;
  config.weight_decay = 0.1;
  std::vector<float> params = signed_values(1, n, 0.0f, 2.0f);
  AdamW opt(n, config);
  AdamWReference ref(params), no_bias_correction(params), coupled(params);
  ref.weight_decay = no_bias_correction.weight_decay = coupled.weight_decay = 0.1;
  no_bias_correction.bias_correction = false;
  coupled.decoupled = false;
  const double bound = optimizer_f32_bound(steps, max_abs(params) + 0.5, lr * 2.0);
  for (int s = 1; s <= steps; ++s) {
    const std::vector<float> grads = signed_values(100 + s, n, 0.5f, 1.0f);
    opt.step(params, grads, lr);
    ref.step(grads, lr);
    no_bias_correction.step(grads, lr);
    coupled.step(grads, lr);
    EXPECT_EQ(opt.steps(), s);
    EXPECT_LE(max_abs_diff(params, ref.p), bound) << "step " << s;
    // Negative controls: each left-out ingredient moves the parameters far beyond the bound.
    EXPECT_GT(max_abs_diff(params, no_bias_correction.p), 100 * bound) << "step " << s;
    EXPECT_GT(max_abs_diff(params, coupled.p), 100 * bound) << "step " << s;
  }
  // The state is the reference's state, rounded to fp32.
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(opt.exp_avg()[i], ref.m[i], 4 * steps * kF32Eps);
    EXPECT_NEAR(opt.exp_avg_sq()[i], ref.v[i], 4 * steps * kF32Eps);
  }
}

// Bias correction at t = 1 and t = 2 in closed form: with weight decay 0 and the same
// gradient g twice, m_t = (1 - beta1^t) g and v_t = (1 - beta2^t) g^2, so m_hat = g and
// v_hat = g^2 and each step moves p by exactly lr g / (|g| + eps). Without bias correction
// the first step would move by lr 0.1 g / (sqrt(0.001) |g| + eps) = 3.16 lr.
TEST(AdamW, BiasCorrectionMakesTheFirstStepsLrTimesSign) {
  const double lr = 0.01;
  std::vector<float> params = {1.0f, -2.0f, 0.5f, 3.0f};
  const std::vector<float> grads = {0.5f, -0.25f, 1.0f, -0.75f};
  AdamW opt(4, AdamWConfig{});
  for (int t = 1; t <= 2; ++t) {
    const std::vector<float> before = params;
    opt.step(params, grads, lr);
    for (size_t i = 0; i < 4; ++i) {
      const double g = grads[i];
      const double expected = double(before[i]) - lr * g / (std::fabs(g) + 1e-8);
      EXPECT_NEAR(params[i], expected, 2 * kF32Eps * 4.0) << "t " << t << " i " << i;
    }
  }
}

// Decoupled weight decay alone: with g = 0, m = v = 0 and the update is 0 / (0 + eps) = 0, so
// p_t = p_0 (1 - lr wd)^t exactly as torch's p.mul_(1 - lr * wd).
TEST(AdamW, WeightDecayIsDecoupled) {
  AdamWConfig config;
  config.weight_decay = 0.5;
  std::vector<float> params = {1.0f, -4.0f};
  const std::vector<float> zero = {0.0f, 0.0f};
  AdamW opt(2, config);
  for (int t = 1; t <= 3; ++t) {
    opt.step(params, zero, 0.1);
    EXPECT_NEAR(params[0], std::pow(0.95, t), 4 * kF32Eps);
    EXPECT_NEAR(params[1], -4.0 * std::pow(0.95, t), 16 * kF32Eps);
  }
}

// Three steps of torch.optim.AdamW(lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
// on p0 = [1, -0.5, 0.25, 2] with gradients chosen so that |g| is constant per element:
//   step 1: g = [1,  1, -2, 0]
//   step 2: g = [1, -1, -2, 0]
//   step 3: g = [1,  1,  2, 0]
// Then v_t = (1 - 0.999^t) g^2, so v_hat = g^2 and sqrt(v_hat) = |g| at every step, and the
// bias corrections 1 - 0.9^t are 0.1, 0.19, 0.271. Per element, with decay 1 - lr wd = 0.99:
//   e0 (g = 1, 1, 1): m_hat = 1 each step;
//      p1 = 0.99 * 1 - 0.1 = 0.89; p2 = 0.8811 - 0.1 = 0.7811; p3 = 0.773289 - 0.1 = 0.673289
//   e1 (g = 1, -1, 1): m1 = 0.1, m_hat 1; m2 = 0.09 - 0.1 = -0.01, m_hat = -0.01 / 0.19
//      = -1/19; m3 = -0.009 + 0.1 = 0.091, m_hat = 0.091 / 0.271 = 91/271;
//      p1 = -0.495 - 0.1 = -0.595; p2 = -0.58905 + 0.1/19 = -0.583786842105263;
//      p3 = -0.577948973684211 - 9.1/271 = -0.611528309477568
//   e2 (g = -2, -2, 2): m1 = -0.2, m_hat = -2; m2 = -0.18 - 0.2 = -0.38, m_hat = -2;
//      m3 = -0.342 + 0.2 = -0.142, m_hat = -142/271; update ratio m_hat / |g| = -1, -1, -71/271;
//      p1 = 0.2475 + 0.1 = 0.3475; p2 = 0.344025 + 0.1 = 0.444025;
//      p3 = 0.43958475 + 7.1/271 = 0.465784011992620
//   e3 (g = 0): m = v = 0, update 0 / (0 + eps) = 0; p_t = 2 * 0.99^t: 1.98, 1.9602, 1.940598
// eps changes each update by the factor |g| / (|g| + eps), i.e. by < 1e-8 * lr = 1e-9 a step,
// below fp32's resolution here; PyTorch's fp32 result is these values rounded to fp32, give
// or take an ulp or two of its own fp32 arithmetic.
TEST(AdamW, ThreeStepsEqualHandDerivedPytorchValues) {
  AdamWConfig config;
  config.weight_decay = 0.1;
  std::vector<float> params = {1.0f, -0.5f, 0.25f, 2.0f};
  const std::vector<std::vector<float>> grads = {{1, 1, -2, 0}, {1, -1, -2, 0}, {1, 1, 2, 0}};
  const std::vector<std::vector<double>> expected = {
      {0.89, -0.595, 0.3475, 1.98},
      {0.7811, -0.583786842105263, 0.444025, 1.9602},
      {0.673289, -0.611528309477568, 0.465784011992620, 1.940598}};
  AdamW opt(4, config);
  for (int s = 0; s < 3; ++s) {
    opt.step(params, grads[size_t(s)], 0.1);
    const double bound = optimizer_f32_bound(s + 1, 2.0, 0.1) + 3e-9 + 1e-15;
    EXPECT_LE(max_abs_diff(params, expected[size_t(s)]), bound) << "step " << s + 1;
  }
  // Negative control: the same steps with coupled (L2) weight decay, torch.optim.Adam's
  // rule, miss these values by far more than the bound.
  std::vector<float> p0 = {1.0f, -0.5f, 0.25f, 2.0f};
  AdamWReference coupled(p0);
  coupled.weight_decay = 0.1;
  coupled.decoupled = false;
  for (const auto& g : grads) coupled.step(g, 0.1);
  double d = 0.0;
  for (size_t i = 0; i < 4; ++i) d = std::max(d, std::fabs(coupled.p[i] - expected[2][i]));
  EXPECT_GT(d, 1e-3);
}

// ---- SGD --------------------------------------------------------------------------------------

TEST(Sgd, StepsEqualTheLiteralFormulasInFp64) {
  constexpr int64_t n = 1000;
  constexpr int steps = 5;
  const double lr = 0.05;
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Case c :
       {Case{0.0, 0.0, 0.0, false}, Case{0.0, 0.0, 0.1, false}, Case{0.9, 0.0, 0.1, false},
        Case{0.9, 0.0, 0.1, true}, Case{0.9, 0.5, 0.0, false}}) {
    SCOPED_TRACE(fmt::format("momentum {} dampening {} wd {} nesterov {}", c.momentum, c.dampening,
                             c.weight_decay, c.nesterov));
    std::vector<float> params = signed_values(2, n, 0.0f, 2.0f);
    Sgd opt(n, SgdConfig{c.momentum, c.dampening, c.nesterov, c.weight_decay});
    SgdReference ref(params);
    ref.momentum = c.momentum;
    ref.dampening = c.dampening;
    ref.weight_decay = c.weight_decay;
    ref.nesterov = c.nesterov;
    const double max_update =
        lr * (1 + c.momentum) * (1.0 + c.weight_decay * 3.0) / (1.0 - c.momentum);
    const double bound = optimizer_f32_bound(steps, max_abs(params) + 1.0, max_update);
    for (int s = 1; s <= steps; ++s) {
      const std::vector<float> grads = signed_values(200 + s, n, 0.5f, 1.0f);
      opt.step(params, grads, lr);
      ref.step(grads, lr);
      EXPECT_LE(max_abs_diff(params, ref.p), bound) << "step " << s;
    }
    // Negative control: the plain gradient step lands elsewhere whenever momentum or weight
    // decay is on.
    if (c.momentum != 0.0 || c.weight_decay != 0.0) {
      std::vector<float> p0 = signed_values(2, n, 0.0f, 2.0f);
      SgdReference plain(p0);
      for (int s = 1; s <= steps; ++s) plain.step(signed_values(200 + s, n, 0.5f, 1.0f), lr);
      EXPECT_GT(max_abs_diff(params, plain.p), 100 * bound);
    }
  }
}

// torch.optim.SGD(lr=0.1, ...) on p0 = 1 with g = 1 at every step, by hand:
//   momentum 0.9, wd 0.1: g' = g + 0.1 p; the first step's buffer is g' itself.
//     1: g' = 1.1, b = 1.1, p = 1 - 0.11 = 0.89
//     2: g' = 1.089, b = 0.99 + 1.089 = 2.079, p = 0.89 - 0.2079 = 0.6821
//     3: g' = 1.06821, b = 1.8711 + 1.06821 = 2.93931, p = 0.6821 - 0.293931 = 0.388169
//   nesterov, momentum 0.9, wd 0.1: the step uses g' + 0.9 b.
//     1: g' = 1.1, b = 1.1, g' + 0.9 b = 2.09, p = 1 - 0.209 = 0.791
//     2: g' = 1.0791, b = 0.99 + 1.0791 = 2.0691, g' + 0.9 b = 2.94129, p = 0.496871
//   momentum 0.9, dampening 0.5 (not applied on the first step, where b = g):
//     1: b = 1, p = 0.9; 2: b = 0.9 + 0.5 = 1.4, p = 0.76; 3: b = 1.26 + 0.5 = 1.76, p = 0.584
TEST(Sgd, StepsEqualHandDerivedPytorchValues) {
  const std::vector<float> g = {1.0f};
  auto run = [&](SgdConfig config, int steps) {
    std::vector<float> p = {1.0f};
    Sgd opt(1, config);
    for (int s = 0; s < steps; ++s) opt.step(p, g, 0.1);
    return double(p[0]);
  };
  const double tol = 8 * kF32Eps;
  EXPECT_NEAR(run({0.9, 0.0, false, 0.1}, 1), 0.89, tol);
  EXPECT_NEAR(run({0.9, 0.0, false, 0.1}, 2), 0.6821, tol);
  EXPECT_NEAR(run({0.9, 0.0, false, 0.1}, 3), 0.388169, tol);
  EXPECT_NEAR(run({0.9, 0.0, true, 0.1}, 1), 0.791, tol);
  EXPECT_NEAR(run({0.9, 0.0, true, 0.1}, 2), 0.496871, tol);
  EXPECT_NEAR(run({0.9, 0.5, false, 0.0}, 1), 0.9, tol);
  EXPECT_NEAR(run({0.9, 0.5, false, 0.0}, 2), 0.76, tol);
  EXPECT_NEAR(run({0.9, 0.5, false, 0.0}, 3), 0.584, tol);
  // Negative control: dampening applied on the first step too (b1 = 0.5) would give
  // p = 0.95, 0.86, ... instead.
  EXPECT_GT(std::fabs(run({0.9, 0.5, false, 0.0}, 1) - 0.95), 100 * tol);
}

TEST(Sgd, RejectsNesterovWithoutMomentum) {
  EXPECT_THROW(Sgd(4, SgdConfig{0.0, 0.0, true, 0.0}), Error);
  EXPECT_THROW(Sgd(4, SgdConfig{0.9, 0.1, true, 0.0}), Error);
}

// ---- Gradient clipping and accumulation -------------------------------------------------------

TEST(ClipGradNorm, ScalesOnlyAboveMaxAndReturnsThePreClipNorm) {
  const std::vector<float> g0 = signed_values(3, 50000, 0.0f, 1.0f);  // several blocks
  double sum = 0.0;
  for (float x : g0) sum += double(x) * double(x);
  const double norm = std::sqrt(sum);  // ~129

  // Above the maximum: every gradient times float(max / (norm + 1e-6)).
  std::vector<float> g = g0;
  EXPECT_NEAR(clip_grad_norm(g, 1.0), norm, 1e-12 * norm);
  const float coef = float(1.0 / (norm + 1e-6));
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], g0[i] * coef) << i;
  EXPECT_NEAR(grad_norm(g), 1.0, 1e-5);

  // Below the maximum (clip_coef >= 1): untouched, bit for bit.
  g = g0;
  EXPECT_NEAR(clip_grad_norm(g, 2.0 * norm), norm, 1e-12 * norm);
  EXPECT_TRUE(same_bits(g, g0));

  // max_norm 0: off, the norm still reported.
  g = g0;
  EXPECT_NEAR(clip_grad_norm(g, 0.0), norm, 1e-12 * norm);
  EXPECT_TRUE(same_bits(g, g0));

  EXPECT_THROW(clip_grad_norm(g, -1.0), Error);
}

TEST(ClipGradNorm, NormIsIndependentOfTheThreadCount) {
  const std::vector<float> g = signed_values(4, 100000, 0.0f, 3.0f);
  const int threads = num_threads();
  set_num_threads(1);
  const double one = grad_norm(g);
  set_num_threads(threads);
  const double all = grad_norm(g);
  EXPECT_EQ(std::memcmp(&one, &all, sizeof(double)), 0);
}

TEST(GradientAccumulation, SumsMicroBatchesAndScales) {
  const int micro = 4;
  const int64_t n = 40000;
  std::vector<float> acc(size_t(n), 0.0f);
  std::vector<double> mean(size_t(n), 0.0);
  for (int k = 0; k < micro; ++k) {
    const std::vector<float> g = signed_values(10 + k, n, 0.0f, 1.0f);
    accumulate_gradients(acc, g);
    for (int64_t i = 0; i < n; ++i) mean[size_t(i)] += double(g[size_t(i)]) / micro;
  }
  scale_gradients(acc, 1.0 / micro);
  // Each of the `micro` additions rounds by at most 2^-24 of a partial sum (|sum| <= micro),
  // and the scale by 1/4 is exact: |mean error| <= micro * micro * 2^-24 / micro.
  EXPECT_LE(max_abs_diff(acc, mean), micro * kF32Eps);
  std::vector<float> short_buffer(10);
  EXPECT_THROW(accumulate_gradients(acc, short_buffer), Error);
}

TEST(GradientAccumulation, F32SpanTakesOnlyContiguousHostF32) {
  Tensor t = Tensor::zeros({3, 64}, DType::f32);
  const std::span<float> s = f32_span(t.view());
  EXPECT_EQ(s.size(), 192u);
  EXPECT_EQ(s.data(), t.ptr<float>());
  EXPECT_THROW(f32_span(Tensor::zeros({8}, DType::bf16).view()), Error);
  TensorView strided = t.view();
  strided.shape = Shape{3, 32};  // rows of 32 out of 64: not contiguous
  EXPECT_THROW(f32_span(strided), Error);
}

// ---- Learning-rate schedules ------------------------------------------------------------------

TEST(LrSchedule, FactorsAtTheBreakpointsEqualTransformersLambdas) {
  const int64_t W = 10, N = 110;
  const LrSchedule constant{LrSchedulerType::constant, W, N};
  const LrSchedule warm{LrSchedulerType::constant_with_warmup, W, N};
  const LrSchedule linear{LrSchedulerType::linear, W, N};
  const LrSchedule cosine{LrSchedulerType::cosine, W, N};
  // constant ignores warmup, as get_scheduler("constant") does.
  for (int64_t s : {0, 5, 10, 110, 500}) EXPECT_EQ(constant.factor(s), 1.0);
  // Warmup from 0: s / W, identical for the three warmed schedules.
  for (const LrSchedule* sch : {&warm, &linear, &cosine}) {
    EXPECT_EQ(sch->factor(0), 0.0);
    EXPECT_EQ(sch->factor(1), 0.1);
    EXPECT_EQ(sch->factor(5), 0.5);
    EXPECT_EQ(sch->factor(9), 0.9);
    EXPECT_EQ(sch->factor(W), 1.0);  // end of warmup: the full rate
  }
  EXPECT_EQ(warm.factor(60), 1.0);
  EXPECT_EQ(warm.factor(500), 1.0);
  // linear: (N - s) / (N - W).
  EXPECT_EQ(linear.factor(60), 0.5);
  EXPECT_EQ(linear.factor(85), 0.25);
  EXPECT_EQ(linear.factor(N - 1), 0.01);
  EXPECT_EQ(linear.factor(N), 0.0);
  EXPECT_EQ(linear.factor(N + 7), 0.0);
  // cosine: 0.5 (1 + cos(pi progress)) for num_cycles 0.5.
  EXPECT_NEAR(cosine.factor(35), 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-15);
  EXPECT_NEAR(cosine.factor(60), 0.5, 1e-15);
  EXPECT_NEAR(cosine.factor(N), 0.0, 1e-15);
  EXPECT_NEAR(cosine.factor(N - 1), 0.5 * (1 + std::cos(std::numbers::pi * 0.99)), 1e-15);
  // lr = base * factor.
  EXPECT_EQ(linear.lr(2e-4, 60), 1e-4);
}

TEST(LrSchedule, WithoutWarmupStartsAtTheFullRate) {
  const LrSchedule linear{LrSchedulerType::linear, 0, 4};
  EXPECT_EQ(linear.factor(0), 1.0);
  EXPECT_EQ(linear.factor(1), 0.75);
  EXPECT_EQ(linear.factor(3), 0.25);
  const LrSchedule cosine{LrSchedulerType::cosine, 0, 4};
  EXPECT_EQ(cosine.factor(0), 1.0);
  EXPECT_NEAR(cosine.factor(2), 0.5, 1e-15);
}

TEST(LrSchedule, ParsesNamesAndRejectsBadSettings) {
  EXPECT_EQ(parse_lr_scheduler_type("cosine"), LrSchedulerType::cosine);
  EXPECT_EQ(lr_scheduler_name(LrSchedulerType::constant_with_warmup), "constant_with_warmup");
  EXPECT_THROW(parse_lr_scheduler_type("polynomial"), Error);
  EXPECT_THROW((LrSchedule{LrSchedulerType::linear, 0, 0}.validate()), Error);
  EXPECT_THROW((LrSchedule{LrSchedulerType::cosine, -1, 10}.validate()), Error);
  EXPECT_NO_THROW((LrSchedule{LrSchedulerType::constant, 0, 0}.validate()));
}

// ---- The guarded step -------------------------------------------------------------------------

TrainStepConfig step_config() {
  TrainStepConfig c;
  c.learning_rate = 1e-2;
  c.schedule = LrSchedule{LrSchedulerType::cosine, 3, 20};
  c.max_grad_norm = 1.0;
  return c;
}

TEST(TrainStep, NonFiniteStepIsSkippedLeavingEverythingUntouched) {
  constexpr int64_t n = 3000;
  std::vector<float> params = signed_values(5, n, 0.0f, 1.0f);
  AdamWConfig adamw;
  adamw.weight_decay = 0.01;
  TrainStep trainer(std::make_unique<AdamW>(n, adamw), step_config());
  std::vector<float> grads = signed_values(6, n, 0.0f, 1.0f);
  ASSERT_FALSE(trainer.step(params, grads, 1.0).skipped);

  const auto& opt = static_cast<const AdamW&>(trainer.optimizer());
  const std::vector<float> p0 = params;
  const std::vector<float> m0(opt.exp_avg().begin(), opt.exp_avg().end());
  const std::vector<float> v0(opt.exp_avg_sq().begin(), opt.exp_avg_sq().end());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Bad {
    int64_t index;
    float value;
    double loss;
  };
  int skipped = 0;
  for (const Bad bad : {Bad{17, nan, 1.0}, Bad{n - 1, inf, 1.0}, Bad{0, -inf, 1.0},
                        Bad{-1, 0.0f, double(nan)}, Bad{-1, 0.0f, double(inf)}}) {
    grads = signed_values(7, n, 0.0f, 1.0f);
    if (bad.index >= 0) grads[size_t(bad.index)] = bad.value;
    const StepResult r = trainer.step(params, grads, bad.loss);
    ++skipped;
    EXPECT_TRUE(r.skipped);
    EXPECT_EQ(trainer.skipped_steps(), skipped);
    EXPECT_TRUE(same_bits(params, p0));
    EXPECT_TRUE(same_bits(opt.exp_avg(), m0));
    EXPECT_TRUE(same_bits(opt.exp_avg_sq(), v0));
    EXPECT_EQ(opt.steps(), 1);  // the bias correction does not move on
  }
  EXPECT_EQ(trainer.global_step(), 1 + skipped);  // the schedule does

  // Negative control: the same non-finite step with the guard off writes NaN.
  TrainStepConfig unguarded = step_config();
  unguarded.skip_nonfinite = false;
  TrainStep reckless(std::make_unique<AdamW>(n, adamw), unguarded);
  std::vector<float> p = p0;
  grads = signed_values(7, n, 0.0f, 1.0f);
  grads[17] = nan;
  EXPECT_FALSE(reckless.step(p, grads, 1.0).skipped);
  EXPECT_TRUE(std::isnan(p[17]));
}

TEST(TrainStep, ClipsAndUsesTheScheduledRate) {
  constexpr int64_t n = 100;
  std::vector<float> params(n, 1.0f), reference(n, 1.0f);
  TrainStepConfig c = step_config();
  c.schedule = LrSchedule{LrSchedulerType::linear, 2, 10};
  TrainStep trainer(std::make_unique<Sgd>(n, SgdConfig{}), c);
  Sgd plain(n, SgdConfig{});
  for (int s = 0; s < 4; ++s) {
    std::vector<float> grads = signed_values(20 + s, n, 0.5f, 1.0f);  // norm ~7.5: clipped
    const StepResult r = trainer.step(params, grads, 0.5);
    EXPECT_FALSE(r.skipped);
    EXPECT_EQ(r.lr, c.schedule.lr(c.learning_rate, s));  // step s + 1 runs at factor(s)
    std::vector<float> g = signed_values(20 + s, n, 0.5f, 1.0f);
    EXPECT_EQ(r.grad_norm, clip_grad_norm(g, c.max_grad_norm));
    plain.step(reference, g, r.lr);
    EXPECT_TRUE(same_bits(params, reference)) << "step " << s;
    if (s == 0) {
      EXPECT_EQ(r.lr, 0.0);
      EXPECT_TRUE(same_bits(params, std::vector<float>(n, 1.0f))) << "warmup starts at rate 0";
    }
  }
  EXPECT_NE(params[0], 1.0f);
}

// ---- Checkpoints ------------------------------------------------------------------------------

class Resume : public ::testing::TestWithParam<bool> {};

TEST_P(Resume, SaveLoadContinueEqualsUninterruptedBitForBit) {
  const bool adamw = GetParam();
  constexpr int64_t n = 20000;
  constexpr int total = 8, split = 3;
  auto make = [&] {
    std::unique_ptr<Optimizer> opt;
    if (adamw) {
      AdamWConfig c;
      c.weight_decay = 0.01;
      opt = std::make_unique<AdamW>(n, c);
    } else {
      opt = std::make_unique<Sgd>(n, SgdConfig{0.9, 0.0, true, 0.01});
    }
    return TrainStep(std::move(opt), step_config());
  };
  auto grads_of = [&](int s) {
    std::vector<float> g = signed_values(300 + s, n, 0.0f, 0.05f);
    if (s == 4) g[5] = std::numeric_limits<float>::quiet_NaN();  // one skipped step after resume
    return g;
  };
  const std::vector<float> p0 = signed_values(8, n, 0.0f, 1.0f);

  std::vector<float> straight = p0;
  TrainStep a = make();
  for (int s = 0; s < total; ++s) {
    std::vector<float> g = grads_of(s);
    a.step(straight, g, 1.0);
  }

  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("fp8rl_optim_{}.safetensors", adamw))
          .string();
  std::vector<float> resumed = p0;
  {
    TrainStep b = make();
    for (int s = 0; s < split; ++s) {
      std::vector<float> g = grads_of(s);
      b.step(resumed, g, 1.0);
    }
    b.save(path);
  }
  TrainStep c = make();
  c.load(path);
  EXPECT_EQ(c.global_step(), split);
  for (int s = split; s < total; ++s) {
    std::vector<float> g = grads_of(s);
    c.step(resumed, g, 1.0);
  }
  EXPECT_TRUE(same_bits(resumed, straight));
  EXPECT_EQ(c.global_step(), a.global_step());
  EXPECT_EQ(c.skipped_steps(), 1);
  EXPECT_EQ(c.optimizer().steps(), a.optimizer().steps());

  // Negative control: continuing from the saved parameters without the optimizer state
  // (fresh moments, step count 0, schedule restarted) does not reproduce the run.
  std::vector<float> fresh = p0;
  TrainStep d = make();
  for (int s = 0; s < split; ++s) {
    std::vector<float> g = grads_of(s);
    d.step(fresh, g, 1.0);
  }
  TrainStep e = make();
  for (int s = split; s < total; ++s) {
    std::vector<float> g = grads_of(s);
    e.step(fresh, g, 1.0);
  }
  EXPECT_FALSE(same_bits(fresh, straight));
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, Resume, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "AdamW" : "Sgd"; });

TEST(Checkpoint, LoadRejectsAStateOfOtherSettings) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "fp8rl_optim_mismatch.safetensors").string();
  AdamW saved(16, AdamWConfig{});
  std::vector<float> p(16, 1.0f), g(16, 0.5f);
  saved.step(p, g, 0.1);
  saved.save(path);

  AdamW same(16, AdamWConfig{});
  same.load(path);
  EXPECT_EQ(same.steps(), 1);
  EXPECT_TRUE(same_bits(same.exp_avg(), saved.exp_avg()));
  EXPECT_TRUE(same_bits(same.exp_avg_sq(), saved.exp_avg_sq()));

  AdamWConfig other;
  other.weight_decay = 0.1;
  AdamW decayed(16, other);
  EXPECT_THROW(decayed.load(path), Error);
  EXPECT_EQ(decayed.steps(), 0);
  AdamW larger(32, AdamWConfig{});
  EXPECT_THROW(larger.load(path), Error);
  Sgd sgd(16, SgdConfig{});
  EXPECT_THROW(sgd.load(path), Error);
  TrainStep trainer(std::make_unique<AdamW>(16, AdamWConfig{}), step_config());
  EXPECT_THROW(trainer.load(path), Error);  // an optimizer-only file has no training counters
  std::filesystem::remove(path);
}

// The view step (what the trainers call on any device) on the host: the clipping factor
// applied as the gradients are read gives the bits of scaling them in place first, the
// gradients stay as given, and the bf16 compute copy is bf16(new params).
TEST(Optimizers, ViewStepScalesOnReadAndWritesTheComputeCopy) {
  constexpr int64_t n = 40000;  // three blocks of the element loops
  const std::vector<float> p0 = signed_values(31, n, 0.0f, 1.0f);
  const std::vector<float> g0 = signed_values(32, n, 0.0f, 2.0f);
  const float factor = 0.3173f;
  for (bool adamw : {true, false}) {
    auto make = [&]() -> std::unique_ptr<Optimizer> {
      if (adamw) return std::make_unique<AdamW>(n, AdamWConfig{});
      SgdConfig sc;
      sc.momentum = 0.9;
      return std::make_unique<Sgd>(n, sc);
    };
    std::unique_ptr<Optimizer> fused = make(), plain = make(), unscaled = make();
    std::vector<float> p = p0, g = g0, q = p0, r = p0;
    std::vector<uint16_t> copy(static_cast<size_t>(n));
    std::vector<float> scaled = g0;
    for (float& x : scaled) x *= factor;
    for (int s = 0; s < 2; ++s) {
      fused->step(TensorView(p.data(), DType::f32, {n}), TensorView(g.data(), DType::f32, {n}),
                  0.01, factor, TensorView(copy.data(), DType::bf16, {n}));
      plain->step(q, scaled, 0.01);
      unscaled->step(r, g0, 0.01);
    }
    EXPECT_TRUE(same_bits(p, q)) << fused->name();
    EXPECT_TRUE(same_bits(g, g0)) << fused->name();
    EXPECT_FALSE(same_bits(r, q)) << fused->name() << ": control, the factor changes the step";
    int64_t copies_wrong = 0;
    for (int64_t i = 0; i < n; ++i) copies_wrong += copy[size_t(i)] != f32_to_bf16(p[size_t(i)]);
    EXPECT_EQ(copies_wrong, 0) << fused->name();
    // The state by name, as the state file holds it.
    const auto state = fused->state();
    ASSERT_EQ(state.size(), adamw ? 2u : 1u);
    EXPECT_EQ(state[0].first, adamw ? "exp_avg" : "momentum_buffer");
    EXPECT_EQ(state[0].second.numel(), n);
  }
}

// Training holds the adapter's masters, their gradients and the optimizer's state: a number of
// parameters no machine holds (an absurd lora_r) is an error naming it and the bytes, before
// anything is allocated ("out of memory" before).
TEST(MakeOptimizer, AbsurdSizesAreNamedBeforeAllocating) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  TrainingArguments a;
  const auto error_of = [&] {
    try {
      make_optimizer(a, int64_t{1} << 50, ctx);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string adamw = error_of();
  EXPECT_NE(adamw.find("training the adapter's 1125899906842624 parameters (their number follows "
                       "lora_r and the target modules) with AdamW: 18014398509481984 bytes"),
            std::string::npos)
      << adamw;
  a.optim = OptimizerKind::sgd;
  const std::string sgd = error_of();
  EXPECT_NE(sgd.find("with SGD: 9007199254740992 bytes"), std::string::npos) << sgd;
  // The control: a size that fits.
  EXPECT_NE(make_optimizer(a, 1000, ctx), nullptr);
}

}  // namespace
}  // namespace fp8rl
