// The backward ops (ops/backward.h) against fp64 central finite differences of an independent
// fp64 re-implementation of each forward (plain loops here), for L = sum c * y with random c.
// Each forward is first checked against that fp64 forward (so the finite differences are of
// the function the op computes), and each gradient check has a negative control: the gradient
// with one term dropped must fail the same bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/rng.h"
#include "ops/backward.h"
#include "ops/memory.h"
#include "ops/ops.h"
#include "quant/fp8.h"
#include "test_util.h"
#include "tolerances.h"

using namespace fp8rl;
using test::backward_grad_bound;
using test::forward_f32_bound;
using test::kFdStep;

namespace {

using Vec = std::vector<double>;

// Uniform floats in [-bound, bound) from a seeded generator.
Tensor uniform(Shape s, uint64_t seed, float bound) {
  Tensor t = Tensor::empty(s, DType::f32);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-bound, bound);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

Vec to_vec(const TensorView& t) {
  Vec v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.ptr<const float>()[i];
  return v;
}

Tensor copy_of(const TensorView& t) {
  Tensor c = Tensor::empty(t.shape, t.dtype);
  std::memcpy(c.view().data, t.data, t.nbytes());
  return c;
}

Tensor i32(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::i32);
  std::memcpy(t.view().data, v.data(), v.size() * 4);
  return t;
}

using test::same_bytes;

// max |got - ref| / max |ref|.
double rel_err(const float* got, const Vec& ref) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(got[i]) - ref[i]));
    scale = std::max(scale, std::fabs(ref[i]));
  }
  return scale == 0.0 ? diff : diff / scale;
}
double rel_err(const TensorView& got, const Vec& ref) {
  return rel_err(got.ptr<const float>(), ref);
}
double rel_err(const Vec& got, const Vec& ref) {
  std::vector<float> f(got.begin(), got.end());
  return rel_err(f.data(), ref);
}

// The central difference of `loss` with respect to every element of x (x restored after).
Vec fd_grad(Vec& x, const std::function<double()>& loss) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + kFdStep;
    const double lp = loss();
    x[i] = x0 - kFdStep;
    const double lm = loss();
    x[i] = x0;
    g[i] = (lp - lm) / (2 * kFdStep);
  }
  return g;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// A negative control: the error of a gradient with a term dropped must exceed the bound.
void expect_fails(double err, double bound) {
  EXPECT_GT(err, bound);
  std::printf("  negative control: %.3g (bound %.3g)\n", err, bound);
}

struct Fixture : ::testing::Test {
  Arena arena{size_t(64) << 20};
  Context ctx{Device::cpu, &arena};
};

// ---- fp64 forwards ----------------------------------------------------------------------

// rows of D: y = x / sqrt(mean x^2 + eps) * (plus_one ? 1 + w : w)
Vec rms_norm64(const Vec& x, const Vec& w, int64_t d, double eps, bool plus_one) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / size_t(d); ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < d; ++j) ss += x[r * d + j] * x[r * d + j];
    const double inv = 1.0 / std::sqrt(ss / double(d) + eps);
    for (int64_t j = 0; j < d; ++j)
      y[r * d + j] = x[r * d + j] * inv * (plus_one ? 1.0 + w[j] : w[j]);
  }
  return y;
}

// RoPE of [T, heads, D] (rotate-half), angle = float(position * inv_freq) as the forward has it.
Vec rope64(const Vec& x, const std::vector<int32_t>& pos, const std::vector<float>& inv_freq,
           int64_t heads, int64_t d) {
  Vec y(x.size());
  const int64_t half = d / 2;
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const size_t base = (t * heads + h) * d;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(float(pos[t]) * inv_freq[size_t(i)]);
        const double c = std::cos(angle), s = std::sin(angle);
        const double a = x[base + i], b = x[base + i + half];
        y[base + i] = a * c - b * s;
        y[base + i + half] = b * c + a * s;
      }
    }
  return y;
}

double silu64(double g) {
  return g / (1.0 + std::exp(-g));
}
double gelu64(double g) {
  return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

// ---- RMSNorm ----------------------------------------------------------------------------

struct NormCase {
  int64_t rows, d;
  bool plus_one;
};

class RmsNormBackward : public Fixture, public ::testing::WithParamInterface<NormCase> {};

TEST_P(RmsNormBackward, MatchesFiniteDifferences) {
  const auto [rows, d, plus_one] = GetParam();
  const double eps = 1e-6;
  const Tensor x = uniform({rows, d}, 1, 2.0f), w = uniform({d}, 2, 1.0f);
  const Tensor dy_c = uniform({rows, d}, 3, 1.0f);  // c of L = sum c * y
  // Forward: equals rms_norm bit for bit, and the fp64 forward to fp32 precision.
  Tensor out = Tensor::empty({rows, d}, DType::f32), ref = Tensor::empty({rows, d}, DType::f32);
  Tensor inv = Tensor::empty({rows}, DType::f32);
  ops::rms_norm_save(ctx, x, w, float(eps), plus_one, out, inv);
  ops::rms_norm(ctx, x, w, float(eps), plus_one, ref);
  EXPECT_TRUE(same_bytes(out, ref));
  Vec xv = to_vec(x), wv = to_vec(w);
  const Vec c = to_vec(dy_c);
  EXPECT_LE(rel_err(out, rms_norm64(xv, wv, d, eps, plus_one)), forward_f32_bound(d));
  // Backward: dx written, dw accumulated onto what is there.
  Tensor dx = Tensor::empty({rows, d}, DType::f32);
  Tensor dw = uniform({d}, 4, 1.0f);
  const Vec dw0 = to_vec(dw);
  ops::rms_norm_backward(ctx, x, w, inv, plus_one, dy_c, dx, dw);
  const auto loss = [&] { return dot(c, rms_norm64(xv, wv, d, eps, plus_one)); };
  const Vec gx = fd_grad(xv, loss), gw = fd_grad(wv, loss);
  Vec dw_added = to_vec(dw);
  for (size_t j = 0; j < dw_added.size(); ++j) dw_added[j] -= dw0[j];
  const double ex = rel_err(dx, gx), ew = rel_err(dw_added, gw);
  EXPECT_LE(ex, backward_grad_bound(d)) << "dx";
  EXPECT_LE(ew, backward_grad_bound(rows * d)) << "dw";
  std::printf("rms_norm rows %ld D %ld: dx %.3g dw %.3g\n", long(rows), long(d), ex, ew);
  // dx may alias dy.
  Tensor alias = copy_of(dy_c);
  ops::rms_norm_backward(ctx, x, w, inv, plus_one, alias, alias);
  EXPECT_TRUE(same_bytes(alias, dx));
  // Negative control: x = 0 with the true inverse RMS makes x_hat = 0, i.e. dx = inv * dy * w
  // without the mean term.
  const Tensor zero = Tensor::zeros({rows, d}, DType::f32);
  Tensor dx_bad = Tensor::empty({rows, d}, DType::f32);
  ops::rms_norm_backward(ctx, zero, w, inv, plus_one, dy_c, dx_bad);
  expect_fails(rel_err(dx_bad, gx), backward_grad_bound(d));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormBackward,
                         ::testing::Values(NormCase{1, 16, false}, NormCase{3, 32, true},
                                           NormCase{19, 16, true}, NormCase{19, 200, false}));

// ---- q/k norm + RoPE --------------------------------------------------------------------

struct HeadCase {
  int64_t t, heads, d;
  bool norm, plus_one;
};

class NormRopeBackward : public Fixture, public ::testing::WithParamInterface<HeadCase> {};

TEST_P(NormRopeBackward, MatchesFiniteDifferences) {
  const auto [t, heads, d, norm, plus_one] = GetParam();
  const double eps = 1e-6;
  const Tensor x = uniform({t, heads, d}, 11, 2.0f), w = uniform({d}, 12, 1.0f);
  const Tensor c_t = uniform({t, heads, d}, 13, 1.0f);
  std::vector<int32_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) pos[size_t(i)] = int32_t(5 + 37 * i % 101);  // ragged positions
  std::vector<float> freq(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    freq[size_t(i)] = float(std::pow(10000.0, -2.0 * double(i) / double(d)));
  const Tensor positions = i32(pos);
  const TensorView inv_freq(freq.data(), DType::f32, {d / 2});
  const TensorView wv_t = norm ? w.view() : TensorView();
  Tensor out = Tensor::empty({t, heads, d}, DType::f32),
         ref = Tensor::empty({t, heads, d}, DType::f32);
  Tensor inv = Tensor::empty({t * heads}, DType::f32);
  ops::rms_norm_rope_save(ctx, x, wv_t, float(eps), plus_one, positions, inv_freq, out, inv);
  ops::rms_norm_rope(ctx, x, wv_t, float(eps), plus_one, positions, inv_freq, ref);
  EXPECT_TRUE(same_bytes(out, ref));
  Vec xv = to_vec(x), wv = to_vec(w);
  const Vec c = to_vec(c_t);
  const auto fwd = [&] {
    return rope64(norm ? rms_norm64(xv, wv, d, eps, plus_one) : xv, pos, freq, heads, d);
  };
  EXPECT_LE(rel_err(out, fwd()), forward_f32_bound(d));
  Tensor dx = Tensor::empty({t, heads, d}, DType::f32), dw = Tensor::zeros({d}, DType::f32);
  const Tensor c_before = copy_of(c_t);
  ops::rms_norm_rope_backward(ctx, x, wv_t, inv, plus_one, positions, inv_freq, c_t, dx,
                              norm ? dw.view() : TensorView());
  EXPECT_TRUE(same_bytes(c_t, c_before));  // dy is left unchanged
  const auto loss = [&] { return dot(c, fwd()); };
  const Vec gx = fd_grad(xv, loss);
  const double ex = rel_err(dx, gx);
  EXPECT_LE(ex, backward_grad_bound(d)) << "dx";
  double ew = 0.0;
  if (norm) {
    ew = rel_err(dw, fd_grad(wv, loss));
    EXPECT_LE(ew, backward_grad_bound(t * heads * d)) << "dw";
  }
  std::printf("rms_norm_rope T %ld heads %ld D %ld norm %d: dx %.3g dw %.3g\n", long(t),
              long(heads), long(d), int(norm), ex, ew);
  // Negative control: the forward rotation instead of its inverse.
  Tensor bad = copy_of(c_t);
  ops::rope(ctx, bad, positions, inv_freq);
  if (norm)
    ops::rms_norm_backward(ctx, x.view().reshape({t * heads, d}), w, inv, plus_one,
                           bad.view().reshape({t * heads, d}), bad.view().reshape({t * heads, d}));
  expect_fails(rel_err(bad, gx), backward_grad_bound(d));
}

INSTANTIATE_TEST_SUITE_P(Shapes, NormRopeBackward,
                         ::testing::Values(HeadCase{1, 1, 16, true, false},
                                           HeadCase{3, 3, 32, true, true},
                                           HeadCase{19, 1, 16, true, false},
                                           HeadCase{19, 3, 32, false, false}));

// ---- Gated activations and softcap ---------------------------------------------------------

class GatedBackward : public Fixture, public ::testing::WithParamInterface<bool> {};

TEST_P(GatedBackward, MatchesFiniteDifferences) {
  const bool silu = GetParam();
  for (const int64_t rows : {1, 3, 19}) {
    const int64_t cols = 37;
    const Tensor g = uniform({rows, cols}, 21, 4.0f), u = uniform({rows, cols}, 22, 2.0f);
    const Tensor c_t = uniform({rows, cols}, 23, 1.0f);
    Vec gv = to_vec(g), uv = to_vec(u);
    const Vec c = to_vec(c_t);
    const auto act = [&](double x) { return silu ? silu64(x) : gelu64(x); };
    const auto fwd = [&] {
      Vec y(gv.size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = act(gv[i]) * uv[i];
      return y;
    };
    Tensor out = Tensor::empty({rows, cols}, DType::f32);
    if (silu)
      ops::silu_mul(ctx, g, u, out);
    else
      ops::gelu_tanh_mul(ctx, g, u, out);
    EXPECT_LE(rel_err(out, fwd()), forward_f32_bound(1));
    Tensor dg = Tensor::empty({rows, cols}, DType::f32),
           du = Tensor::empty({rows, cols}, DType::f32);
    if (silu)
      ops::silu_mul_backward(ctx, g, u, c_t, dg, du);
    else
      ops::gelu_tanh_mul_backward(ctx, g, u, c_t, dg, du);
    const auto loss = [&] { return dot(c, fwd()); };
    const Vec fg = fd_grad(gv, loss), fu = fd_grad(uv, loss);
    const double eg = rel_err(dg, fg), eu = rel_err(du, fu);
    EXPECT_LE(eg, backward_grad_bound(1));
    EXPECT_LE(eu, backward_grad_bound(1));
    std::printf("%s rows %ld: dgate %.3g dup %.3g\n", silu ? "silu_mul" : "gelu_tanh_mul",
                long(rows), eg, eu);
    // Negative control: act' without its second term (SiLU: s g (1 - s); GELU: the tanh'
    // term), subtracted from the op's dgate.
    Vec bad = to_vec(dg);
    for (size_t i = 0; i < bad.size(); ++i) {
      const double x = gv[i];
      double term;
      if (silu) {
        const double s = 1.0 / (1.0 + std::exp(-x));
        term = s * x * (1.0 - s);
      } else {
        const double k = std::sqrt(2.0 / M_PI), th = std::tanh(k * (x + 0.044715 * x * x * x));
        term = 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
      }
      bad[i] -= c[i] * uv[i] * term;
    }
    expect_fails(rel_err(bad, fg), backward_grad_bound(1));
  }
}

INSTANTIATE_TEST_SUITE_P(Acts, GatedBackward, ::testing::Values(true, false));

TEST_F(Fixture, SoftcapBackwardMatchesFiniteDifferences) {
  const float cap = 3.0f;
  for (const int64_t rows : {1, 3, 19}) {
    const int64_t cols = 29;
    Tensor x = uniform({rows, cols}, 31, 3.0f * cap);
    const Tensor c_t = uniform({rows, cols}, 32, 1.0f);
    Vec xv = to_vec(x);
    const Vec c = to_vec(c_t);
    const auto fwd = [&] {
      Vec y(xv.size());
      for (size_t i = 0; i < y.size(); ++i) y[i] = cap * std::tanh(xv[i] / cap);
      return y;
    };
    ops::softcap(ctx, x, cap, ops::Output::f32);  // x becomes y
    EXPECT_LE(rel_err(x, fwd()), forward_f32_bound(1));
    Tensor dx = Tensor::empty({rows, cols}, DType::f32);
    ops::softcap_backward(ctx, x, cap, c_t, dx);
    const Vec g = fd_grad(xv, [&] { return dot(c, fwd()); });
    const double e = rel_err(dx, g);
    EXPECT_LE(e, backward_grad_bound(1));
    std::printf("softcap rows %ld: dx %.3g\n", long(rows), e);
    // Negative control: y = 0 gives the factor 1, i.e. no derivative of tanh.
    const Tensor zero = Tensor::zeros({rows, cols}, DType::f32);
    ops::softcap_backward(ctx, zero, cap, c_t, dx);
    expect_fails(rel_err(dx, g), backward_grad_bound(1));
  }
}

// ---- Attention --------------------------------------------------------------------------

struct AttnCase {
  int64_t hq, hkv, d, window;
  float softcap, scale;
};

// fp64 causal attention of one sequence of n tokens: out [n, Hq, D], lse [n, Hq].
void attention64(const double* q, const double* k, const double* v, int64_t n, const AttnCase& a,
                 double* out, double* lse) {
  const int64_t group = a.hq / a.hkv;
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < a.hq; ++h) {
      const int64_t lo = a.window > 0 ? std::max<int64_t>(0, i - a.window + 1) : 0;
      const double* qi = q + (i * a.hq + h) * a.d;
      double mx = -INFINITY;
      for (int64_t j = lo; j <= i; ++j) {
        const double* kj = k + (j * a.hkv + h / group) * a.d;
        double dotv = 0.0;
        for (int64_t x = 0; x < a.d; ++x) dotv += qi[x] * kj[x];
        dotv *= a.scale;
        if (a.softcap > 0) dotv = a.softcap * std::tanh(dotv / a.softcap);
        s[size_t(j)] = dotv;
        mx = std::max(mx, dotv);
      }
      double sum = 0.0;
      for (int64_t j = lo; j <= i; ++j) sum += std::exp(s[size_t(j)] - mx);
      const double l = mx + std::log(sum);
      if (lse != nullptr) lse[i * a.hq + h] = l;
      double* o = out + (i * a.hq + h) * a.d;
      for (int64_t x = 0; x < a.d; ++x) o[x] = 0.0;
      for (int64_t j = lo; j <= i; ++j) {
        const double p = std::exp(s[size_t(j)] - l);
        const double* vj = v + (j * a.hkv + h / group) * a.d;
        for (int64_t x = 0; x < a.d; ++x) o[x] += p * vj[x];
      }
    }
}

class AttentionBackward : public Fixture, public ::testing::WithParamInterface<AttnCase> {};

TEST_P(AttentionBackward, MatchesFiniteDifferences) {
  const AttnCase a = GetParam();
  const std::vector<int64_t> lens = {1, 3, 19};
  constexpr int64_t kBlock = 16, kPadding = 2;
  std::vector<int32_t> cu{0};
  for (int64_t n : lens) cu.push_back(cu.back() + int32_t(n));
  const int64_t t = cu.back(), rows = t + kPadding;
  const Tensor q = uniform({rows, a.hq, a.d}, 41, 1.0f);
  const Tensor k = uniform({rows, a.hkv, a.d}, 42, 1.0f), v = uniform({rows, a.hkv, a.d}, 43, 1.0f);
  Tensor c_t = uniform({rows, a.hq, a.d}, 44, 1.0f);
  std::fill(c_t.ptr<float>() + t * a.hq * a.d, c_t.ptr<float>() + c_t.numel(), 0.0f);
  // Blocks shuffled over a pool; each sequence's tokens are its whole context.
  int64_t width = 0, blocks = 0;
  for (int64_t n : lens) {
    width = std::max(width, (n + kBlock - 1) / kBlock);
    blocks += (n + kBlock - 1) / kBlock;
  }
  std::vector<int32_t> perm(static_cast<size_t>(blocks + 3));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<int32_t> table(static_cast<size_t>(int64_t(lens.size()) * width), 0), slots;
  size_t next = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int64_t b = 0; b < (lens[s] + kBlock - 1) / kBlock; ++b)
      table[s * size_t(width) + size_t(b)] = perm[next++];
    for (int64_t j = 0; j < lens[s]; ++j)
      slots.push_back(table[s * size_t(width) + size_t(j / kBlock)] * int32_t(kBlock) +
                      int32_t(j % kBlock));
  }
  for (int64_t i = 0; i < kPadding; ++i) slots.push_back(-1);
  Tensor k_pool = Tensor::empty({int64_t(perm.size()), kBlock, a.hkv, a.d}, DType::f32);
  Tensor v_pool = Tensor::empty(k_pool.shape(), DType::f32);
  ops::fill(ctx, k_pool, NAN);
  ops::fill(ctx, v_pool, NAN);
  const Tensor slot_mapping = i32(slots), cu_t = i32(cu);
  std::vector<int32_t> lens32(lens.begin(), lens.end());
  const Tensor lens_t = i32(lens32);
  Tensor tables = Tensor::empty({int64_t(lens.size()), width}, DType::i32);
  std::memcpy(tables.view().data, table.data(), table.size() * 4);
  ops::store_kv(ctx, k, v, slot_mapping, k_pool, v_pool);
  ops::PagedBatch batch{cu_t, lens_t, tables, int64_t(lens.size()), 19, 19, {}, {}, {}, {}};
  ops::AttentionParams p;
  p.scale = a.scale;
  p.softcap = a.softcap;
  p.window = a.window;

  Tensor out = Tensor::empty({rows, a.hq, a.d}, DType::f32),
         ref = Tensor::empty(out.shape(), DType::f32);
  Tensor lse = Tensor::empty({rows, a.hq}, DType::f32);
  ops::paged_attention_lse(ctx, q, k_pool, v_pool, batch, p, out, lse);
  ops::paged_attention(ctx, q, k_pool, v_pool, batch, p, ref);
  EXPECT_TRUE(same_bytes(out, ref));

  Vec qv = to_vec(q), kv = to_vec(k), vv = to_vec(v);
  const Vec c = to_vec(c_t);
  // The fp64 forward of sequence s, and the loss over every sequence.
  Vec out64(size_t(rows * a.hq * a.d), 0.0), lse64(size_t(rows * a.hq), 0.0);
  const auto seq_loss = [&](size_t s) {
    const int64_t b = cu[s];
    attention64(qv.data() + b * a.hq * a.d, kv.data() + b * a.hkv * a.d,
                vv.data() + b * a.hkv * a.d, lens[s], a, out64.data() + b * a.hq * a.d,
                lse64.data() + b * a.hq);
    double l = 0.0;
    for (int64_t i = b * a.hq * a.d; i < cu[s + 1] * a.hq * a.d; ++i)
      l += c[size_t(i)] * out64[size_t(i)];
    return l;
  };
  for (size_t s = 0; s < lens.size(); ++s) seq_loss(s);
  const int64_t n_max = 19 * a.d;
  EXPECT_LE(rel_err(out, out64), forward_f32_bound(n_max));
  double lse_err = 0.0;
  for (int64_t i = 0; i < t * a.hq; ++i)
    lse_err = std::max(lse_err, std::fabs(double(lse.ptr<float>()[i]) - lse64[size_t(i)]) /
                                    std::max(1.0, std::fabs(lse64[size_t(i)])));
  EXPECT_LE(lse_err, forward_f32_bound(n_max));

  Tensor dq = Tensor::empty(q.shape(), DType::f32), dk = Tensor::empty(k.shape(), DType::f32),
         dv = Tensor::empty(v.shape(), DType::f32);
  ops::paged_attention_backward(ctx, q, k_pool, v_pool, batch, p, out, lse, c_t, dq, dk, dv);
  // Finite differences per sequence (an element changes only its own sequence's loss).
  const auto fd_rows = [&](Vec& x, int64_t per_token) {
    Vec g(x.size(), 0.0);
    for (size_t s = 0; s < lens.size(); ++s)
      for (int64_t i = cu[s] * per_token; i < cu[s + 1] * per_token; ++i) {
        const double x0 = x[size_t(i)];
        x[size_t(i)] = x0 + kFdStep;
        const double lp = seq_loss(s);
        x[size_t(i)] = x0 - kFdStep;
        const double lm = seq_loss(s);
        x[size_t(i)] = x0;
        g[size_t(i)] = (lp - lm) / (2 * kFdStep);
      }
    return g;
  };
  const Vec gq = fd_rows(qv, a.hq * a.d), gk = fd_rows(kv, a.hkv * a.d),
            gv = fd_rows(vv, a.hkv * a.d);
  const double bound = backward_grad_bound(n_max * (a.hq / a.hkv));
  const double eq = rel_err(dq, gq), ek = rel_err(dk, gk), ev = rel_err(dv, gv);
  EXPECT_LE(eq, bound) << "dq";
  EXPECT_LE(ek, bound) << "dk";
  EXPECT_LE(ev, bound) << "dv";
  std::printf(
      "attention Hq %ld Hkv %ld D %ld window %ld softcap %g: dq %.3g dk %.3g dv %.3g "
      "(bound %.3g)\n",
      long(a.hq), long(a.hkv), long(a.d), long(a.window), double(a.softcap), eq, ek, ev, bound);
  // Negative control: out = 0 makes Delta = dout . out = 0, dropping the softmax's -P rowsum
  // term from dS.
  const Tensor zero = Tensor::zeros(out.shape(), DType::f32);
  Tensor bq = Tensor::empty(q.shape(), DType::f32), bk = Tensor::empty(k.shape(), DType::f32),
         bv = Tensor::empty(v.shape(), DType::f32);
  ops::paged_attention_backward(ctx, q, k_pool, v_pool, batch, p, zero, lse, c_t, bq, bk, bv);
  expect_fails(rel_err(bq, gq), bound);
  expect_fails(rel_err(bk, gk), bound);
  EXPECT_TRUE(same_bytes(bv, dv));  // dv has no Delta term
}

INSTANTIATE_TEST_SUITE_P(Configs, AttentionBackward,
                         ::testing::Values(AttnCase{3, 3, 16, 0, 0.0f, 0.25f},
                                           AttnCase{6, 2, 32, 0, 0.0f, 0.5f},
                                           AttnCase{3, 1, 16, 5, 0.0f, 0.5f},
                                           AttnCase{3, 3, 16, 0, 1.5f, 1.0f},
                                           AttnCase{6, 2, 32, 4, 2.0f, 0.6f}));

TEST_F(Fixture, AttentionBackwardRefusesCachedContext) {
  // A sequence with earlier tokens in the cache is not a full prefill.
  const Tensor q = uniform({2, 1, 16}, 1, 1.0f);
  Tensor pool = Tensor::zeros({1, 16, 1, 16}, DType::f32);
  const Tensor cu = i32({0, 2}), lens = i32({5}), tables = Tensor::zeros({1, 1}, DType::i32);
  ops::PagedBatch b{cu, lens, tables, 1, 2, 5, {}, {}, {}, {}};
  Tensor lse = Tensor::zeros({2, 1}, DType::f32), g = Tensor::empty({2, 1, 16}, DType::f32);
  Tensor g2 = Tensor::empty({2, 1, 16}, DType::f32), g3 = Tensor::empty({2, 1, 16}, DType::f32);
  EXPECT_THROW(ops::paged_attention_backward(ctx, q, pool, pool, b, {}, q, lse, q, g, g2, g3),
               Error);
}

// ---- Linear input gradient -----------------------------------------------------------------

struct LinearCase {
  Fp8Scheme scheme;
  DType dtype;  // of an unquantized weight
};

class LinearBackward : public Fixture, public ::testing::WithParamInterface<LinearCase> {};

TEST_P(LinearBackward, MatchesFiniteDifferences) {
  const auto [scheme, dtype] = GetParam();
  const int64_t n = 150, k = 200;  // ragged 128x128 blocks
  const Tensor w32 = uniform({n, k}, 51, 1.0f);
  // Row-dependent magnitudes so that the scales differ across rows and blocks.
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j)
      w32.ptr<float>()[r * k + j] *= float(1 + r % 7) * (j < 128 ? 1.0f : 3.0f);
  LinearWeight w;
  Tensor codes, scales, wq;
  Tensor w_hat = Tensor::empty({n, k}, DType::f32);
  if (scheme != Fp8Scheme::off) {
    codes = Tensor::empty({n, k}, DType::f8e4m3);
    scales = Tensor::empty(weight_scale_shape(scheme, n, k), DType::f32);
    quantize_weight(w32, scheme, codes, scales);
    w.weight = codes;
    w.scheme = scheme;
    w.act = ActScaling::token;  // the forward's; the backward is straight-through
    w.scales = scales;
    dequantize_weight(codes, scheme, scales, w_hat);
  } else {
    wq = Tensor::empty({n, k}, dtype);
    convert(w32.view().data, DType::f32, wq.view().data, dtype, size_t(n * k));
    convert(wq.view().data, dtype, w_hat.view().data, DType::f32, size_t(n * k));
    w.weight = wq;
  }
  const Vec wv = to_vec(w_hat);
  for (const int64_t m : {1, 3, 19}) {
    const Tensor x = uniform({m, k}, 52, 1.0f), c_t = uniform({m, n}, 53, 1.0f);
    Vec xv = to_vec(x);
    const Vec c = to_vec(c_t);
    // L = sum_{m,n} c x w_hat^T; an element of row i changes only row i's terms.
    const auto row_loss = [&](int64_t i) {
      double l = 0.0;
      for (int64_t o = 0; o < n; ++o) {
        double y = 0.0;
        for (int64_t j = 0; j < k; ++j) y += xv[size_t(i * k + j)] * wv[size_t(o * k + j)];
        l += c[size_t(i * n + o)] * y;
      }
      return l;
    };
    Vec g(xv.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) {
        double& e = xv[size_t(i * k + j)];
        const double x0 = e;
        e = x0 + kFdStep;
        const double lp = row_loss(i);
        e = x0 - kFdStep;
        const double lm = row_loss(i);
        e = x0;
        g[size_t(i * k + j)] = (lp - lm) / (2 * kFdStep);
      }
    Tensor dx = uniform({m, k}, 54, 1.0f);
    const Vec dx0 = to_vec(dx);
    ops::linear_backward_input(ctx, c_t, w, dx, /*accumulate=*/false);
    const double e = rel_err(dx, g);
    EXPECT_LE(e, backward_grad_bound(n));
    // accumulate: += onto what is there.
    Tensor acc = uniform({m, k}, 54, 1.0f);
    ops::linear_backward_input(ctx, c_t, w, acc, /*accumulate=*/true);
    Vec added = to_vec(acc);
    for (size_t i = 0; i < added.size(); ++i) added[i] -= dx0[i];
    EXPECT_LE(rel_err(added, g), backward_grad_bound(n) + 4 * test::kF32Eps);
    std::printf("linear_backward_input %s %s M %ld: dx %.3g\n",
                std::string(scheme_name(scheme)).c_str(), std::string(dtype_name(dtype)).c_str(),
                long(m), e);
    // Negative control for FP8: the codes without their scales.
    if (scheme != Fp8Scheme::off) {
      Tensor ones = Tensor::empty(scales.shape(), DType::f32);
      ops::fill(ctx, ones, 1.0f);
      LinearWeight bad = w;
      bad.scales = ones;
      ops::linear_backward_input(ctx, c_t, bad, dx);
      expect_fails(rel_err(dx, g), backward_grad_bound(n));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Weights, LinearBackward,
                         ::testing::Values(LinearCase{Fp8Scheme::off, DType::f32},
                                           LinearCase{Fp8Scheme::off, DType::bf16},
                                           LinearCase{Fp8Scheme::tensor, DType::f8e4m3},
                                           LinearCase{Fp8Scheme::row, DType::f8e4m3},
                                           LinearCase{Fp8Scheme::block, DType::f8e4m3}));

// ---- LoRA --------------------------------------------------------------------------------

class LoraBackward : public Fixture, public ::testing::WithParamInterface<float> {};

TEST_P(LoraBackward, MatchesFiniteDifferences) {
  const float p = GetParam();
  const int64_t k = 40, r = 4, n = 24;
  const float scale = 2.0f;
  const ops::LoraDropout dropout{p, 99};
  for (const int64_t m : {1, 3, 19}) {
    const Tensor x = uniform({m, k}, 61, 1.0f), a = uniform({r, k}, 62, 0.5f),
                 b = uniform({n, r}, 63, 0.5f), c_t = uniform({m, n}, 64, 1.0f);
    // The mask the forward uses: lora_dropout of ones. Every entry is 0 or 1 / (1 - p), and
    // lora_dropout(x) is x times it.
    const Tensor ones_src = [&] {
      Tensor o = Tensor::empty({m, k}, DType::f32);
      ops::fill(ctx, o, 1.0f);
      return o;
    }();
    Tensor mask = Tensor::empty({m, k}, DType::f32), xd = Tensor::empty({m, k}, DType::f32);
    ops::lora_dropout(ctx, ones_src, dropout, mask);
    ops::lora_dropout(ctx, x, dropout, xd);
    for (int64_t i = 0; i < m * k; ++i) {
      const float mk = mask.ptr<float>()[i];
      ASSERT_TRUE(mk == 0.0f || mk == 1.0f / (1.0f - p)) << mk;
      ASSERT_EQ(xd.ptr<float>()[i], x.ptr<float>()[i] * mk);
    }
    Vec xv = to_vec(x), av = to_vec(a), bv = to_vec(b);
    const Vec c = to_vec(c_t), mv = to_vec(mask);
    const auto loss = [&] {
      double l = 0.0;
      for (int64_t i = 0; i < m; ++i) {
        double u[8] = {};
        for (int64_t q = 0; q < r; ++q)
          for (int64_t j = 0; j < k; ++j)
            u[q] += xv[size_t(i * k + j)] * mv[size_t(i * k + j)] * av[size_t(q * k + j)];
        for (int64_t o = 0; o < n; ++o) {
          double y = 0.0;
          for (int64_t q = 0; q < r; ++q) y += u[q] * bv[size_t(o * r + q)];
          l += c[size_t(i * n + o)] * scale * y;
        }
      }
      return l;
    };
    Tensor dx = uniform({m, k}, 65, 1.0f), da = uniform({r, k}, 66, 1.0f),
           db = uniform({n, r}, 67, 1.0f);
    const Vec dx0 = to_vec(dx), da0 = to_vec(da), db0 = to_vec(db);
    ops::lora_backward(ctx, x, a, b, scale, dropout, c_t, dx, da, db);
    const auto added = [](const TensorView& t, const Vec& before) {
      Vec v = to_vec(t);
      for (size_t i = 0; i < v.size(); ++i) v[i] -= before[i];
      return v;
    };
    const Vec gx = fd_grad(xv, loss), ga = fd_grad(av, loss), gb = fd_grad(bv, loss);
    const double ex = rel_err(added(dx, dx0), gx), ea = rel_err(added(da, da0), ga),
                 eb = rel_err(added(db, db0), gb);
    // Reductions: n then r for dx, n then m for dA, k then m for dB; the += adds one rounding
    // of the initial values (|.| <= 1) relative to the gradient, covered by 4 ulps.
    const double bound = backward_grad_bound(n * std::max<int64_t>(m, r) + k) + 4 * test::kF32Eps;
    EXPECT_LE(ex, bound) << "dx";
    EXPECT_LE(ea, bound) << "dA";
    EXPECT_LE(eb, bound) << "dB";
    std::printf("lora p %g M %ld: dx %.3g dA %.3g dB %.3g\n", double(p), long(m), ex, ea, eb);
    if (p > 0 && m > 1) {
      // Negative control: the backward without the forward's dropout mask.
      Tensor bx = Tensor::zeros({m, k}, DType::f32), ba = Tensor::zeros({r, k}, DType::f32),
             bb = Tensor::zeros({n, r}, DType::f32);
      ops::lora_backward(ctx, x, a, b, scale, {}, c_t, bx, ba, bb);
      expect_fails(rel_err(bx, gx), bound);
      expect_fails(rel_err(ba, ga), bound);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dropout, LoraBackward, ::testing::Values(0.0f, 0.3f));

TEST_F(Fixture, LoraDropoutKeepsOneMinusP) {
  const int64_t m = 64, k = 512;
  Tensor ones = Tensor::empty({m, k}, DType::f32), mask = Tensor::empty({m, k}, DType::f32);
  ops::fill(ctx, ones, 1.0f);
  const float p = 0.25f;
  ops::lora_dropout(ctx, ones, {p, 5}, mask);
  int64_t kept = 0;
  for (int64_t i = 0; i < m * k; ++i) kept += mask.ptr<float>()[i] != 0.0f;
  // Binomial(N, 1 - p): five standard deviations.
  const double nn = double(m * k), mean = nn * (1 - p), sd = std::sqrt(nn * p * (1 - p));
  EXPECT_LE(std::fabs(double(kept) - mean), 5 * sd);
  // Another seed gives another mask.
  Tensor other = Tensor::empty({m, k}, DType::f32);
  ops::lora_dropout(ctx, ones, {p, 6}, other);
  EXPECT_FALSE(same_bytes(mask, other));
}

// ---- lm_head + cross-entropy -----------------------------------------------------------------

struct CeCase {
  Fp8Scheme scheme;
  int64_t h, v;
  float softcap, temperature;
};

class CrossEntropy : public Fixture, public ::testing::WithParamInterface<CeCase> {};

TEST_P(CrossEntropy, ChunkedEqualsFp64AndFiniteDifferences) {
  const CeCase cc = GetParam();
  const int64_t t = 19, h = cc.h, v = cc.v;
  const Tensor x = uniform({t, h}, 71, 1.0f), w32 = uniform({v, h}, 72, 1.0f);
  LinearWeight w;
  Tensor codes, scales;
  Tensor w_hat = Tensor::empty({v, h}, DType::f32);
  if (cc.scheme != Fp8Scheme::off) {
    codes = Tensor::empty({v, h}, DType::f8e4m3);
    scales = Tensor::empty(weight_scale_shape(cc.scheme, v, h), DType::f32);
    quantize_weight(w32, cc.scheme, codes, scales);
    w.weight = codes;
    w.scheme = cc.scheme;
    w.scales = scales;  // weight-only (act none): the loss is smooth in x
    dequantize_weight(codes, cc.scheme, scales, w_hat);
  } else {
    w.weight = w32;
    std::memcpy(w_hat.view().data, w32.view().data, w32.nbytes());
  }
  std::vector<int32_t> targets(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i)
    targets[size_t(i)] = i % 5 == 2 ? ops::kIgnoreIndex : int32_t(i * 37 % v);
  const Tensor tg = i32(targets);
  const Tensor dloss = uniform({t}, 73, 1.0f);
  Vec xv = to_vec(x);
  const Vec wv = to_vec(w_hat), dl = to_vec(dloss);
  // fp64 row: loss, lse, entropy.
  struct Row {
    double loss, lse, entropy;
  };
  const auto row64 = [&](int64_t i) {
    Vec z(static_cast<size_t>(v));
    double mx = -INFINITY;
    for (int64_t o = 0; o < v; ++o) {
      double l = 0.0;
      for (int64_t j = 0; j < h; ++j) l += xv[size_t(i * h + j)] * wv[size_t(o * h + j)];
      if (cc.softcap > 0) l = cc.softcap * std::tanh(l / cc.softcap);
      z[size_t(o)] = l / cc.temperature;
      mx = std::max(mx, z[size_t(o)]);
    }
    double sum = 0.0;
    for (double zz : z) sum += std::exp(zz - mx);
    const double lse = mx + std::log(sum);
    double ent = 0.0;
    for (double zz : z) ent += std::exp(zz - lse) * (lse - zz);
    const int32_t tgt = targets[size_t(i)];
    if (tgt == ops::kIgnoreIndex) return Row{0.0, lse, 0.0};
    return Row{lse - z[size_t(tgt)], lse, ent};
  };
  Vec loss64(static_cast<size_t>(t)), lse64(static_cast<size_t>(t)), ent64(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    const Row r = row64(i);
    loss64[size_t(i)] = r.loss;
    lse64[size_t(i)] = r.lse;
    ent64[size_t(i)] = r.entropy;
  }
  // Gradient of sum_t dloss[t] loss[t]: an element of row i changes only row i's loss.
  Vec g(xv.size());
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < h; ++j) {
      double& e = xv[size_t(i * h + j)];
      const double x0 = e;
      e = x0 + kFdStep;
      const double lp = row64(i).loss;
      e = x0 - kFdStep;
      const double lm = row64(i).loss;
      e = x0;
      g[size_t(i * h + j)] = dl[size_t(i)] * (lp - lm) / (2 * kFdStep);
    }
  const auto abs_err = [](const TensorView& got, const Vec& ref) {
    double e = 0.0;
    for (size_t i = 0; i < ref.size(); ++i)
      e = std::max(e, std::fabs(double(got.ptr<const float>()[i]) - ref[i]) /
                          std::max(1.0, std::fabs(ref[i])));
    return e;
  };
  Tensor first_loss, first_dx;
  for (const int64_t chunk : {int64_t(1), int64_t(7), t}) {
    ops::CrossEntropyParams p;
    p.temperature = cc.temperature;
    p.softcap = cc.softcap;
    p.chunk_rows = chunk;
    Tensor loss = Tensor::empty({t}, DType::f32), logprob = Tensor::empty({t}, DType::f32),
           lse = Tensor::empty({t}, DType::f32), ent = Tensor::empty({t}, DType::f32);
    ops::lm_head_cross_entropy(ctx, x, w, tg, p, loss, logprob, lse, ent);
    const double bound_f = forward_f32_bound(h) + forward_f32_bound(v);
    const double el = abs_err(loss, loss64), es = abs_err(lse, lse64), ee = abs_err(ent, ent64);
    EXPECT_LE(el, bound_f) << "loss";
    EXPECT_LE(es, bound_f) << "lse";
    EXPECT_LE(ee, bound_f) << "entropy";
    for (int64_t i = 0; i < t; ++i) EXPECT_EQ(logprob.ptr<float>()[i], -loss.ptr<float>()[i]);
    Tensor dx = Tensor::empty({t, h}, DType::f32);
    ops::lm_head_cross_entropy_backward(ctx, x, w, tg, p, lse, dloss, dx);
    const double bound = backward_grad_bound(std::max(h, v));
    const double eg = rel_err(dx, g);
    EXPECT_LE(eg, bound) << "dx";
    for (int64_t i = 0; i < t; ++i) {
      if (targets[size_t(i)] != ops::kIgnoreIndex) continue;
      for (int64_t j = 0; j < h; ++j) EXPECT_EQ(dx.ptr<float>()[i * h + j], 0.0f);
    }
    std::printf(
        "cross-entropy %s H %ld V %ld softcap %g T %g chunk %ld: loss %.3g lse %.3g "
        "entropy %.3g dx %.3g\n",
        std::string(scheme_name(cc.scheme)).c_str(), long(h), long(v), double(cc.softcap),
        double(cc.temperature), long(chunk), el, es, ee, eg);
    // The chunking changes nothing: the linear is batch-invariant and rows are independent.
    if (first_loss.empty()) {
      first_loss = copy_of(loss);
      first_dx = copy_of(dx);
    } else {
      EXPECT_TRUE(same_bytes(loss, first_loss));
      EXPECT_TRUE(same_bytes(dx, first_dx));
    }
    // Negative control: the backward without the softcap's derivative (or, uncapped, without
    // the temperature's 1/T).
    ops::CrossEntropyParams bad = p;
    if (cc.softcap > 0)
      bad.softcap = 0.0f;
    else
      bad.temperature = 1.0f;
    Tensor lse_bad = Tensor::empty({t}, DType::f32);
    ops::lm_head_cross_entropy(ctx, x, w, tg, bad, loss, logprob, lse_bad);
    ops::lm_head_cross_entropy_backward(ctx, x, w, tg, bad, lse_bad, dloss, dx);
    expect_fails(rel_err(dx, g), bound);
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, CrossEntropy,
                         ::testing::Values(CeCase{Fp8Scheme::off, 40, 300, 0.0f, 0.7f},
                                           CeCase{Fp8Scheme::off, 40, 300, 5.0f, 1.0f},
                                           CeCase{Fp8Scheme::row, 40, 300, 0.0f, 1.3f},
                                           CeCase{Fp8Scheme::block, 200, 150, 4.0f, 0.8f}));

TEST_F(Fixture, CrossEntropyRejectsBadTargets) {
  const Tensor x = uniform({2, 8}, 1, 1.0f), w32 = uniform({10, 8}, 2, 1.0f);
  LinearWeight w;
  w.weight = w32;
  const Tensor tg = i32({3, 10});
  Tensor a = Tensor::empty({2}, DType::f32), b = Tensor::empty({2}, DType::f32),
         c = Tensor::empty({2}, DType::f32);
  EXPECT_THROW(ops::lm_head_cross_entropy(ctx, x, w, tg, {}, a, b, c), Error);
}

TEST_F(Fixture, BackwardRefusesBf16Emulation) {
  Context emu = ctx;
  emu.bf16_activations = true;
  const Tensor x = uniform({2, 8}, 1, 1.0f), w = uniform({8}, 2, 1.0f);
  Tensor out = Tensor::empty({2, 8}, DType::f32), inv = Tensor::empty({2}, DType::f32);
  EXPECT_THROW(ops::rms_norm_save(emu, x, w, 1e-6f, false, out, inv), Error);
}

TEST(BackwardDryRun, TakesScratchAndTouchesNothing) {
  // Views over addresses of a measuring arena, which nobody may dereference: the ops check the
  // shapes, take their scratch and compute nothing.
  Arena measuring = Arena::measuring(Device::cpu, 64);
  Context dry{Device::cpu, &measuring};
  dry.dry_run = true;
  void* nowhere = measuring.base();
  const int64_t t = 9, h = 40, v = 300;
  LinearWeight w;
  w.weight = TensorView(nowhere, DType::f32, {v, h});
  const TensorView x(nowhere, DType::f32, {t, h}), tg(nowhere, DType::i32, {t}),
      row(nowhere, DType::f32, {t});
  ops::CrossEntropyParams p;
  p.chunk_rows = 4;
  ops::lm_head_cross_entropy(dry, x, w, tg, p, row, row, row);
  ops::lm_head_cross_entropy_backward(dry, x, w, tg, p, row, row, x);
  EXPECT_GE(measuring.high_water(), size_t(p.chunk_rows * v * 4));
  EXPECT_EQ(measuring.mark(), 0u);
}

// ---- Mixture of experts -------------------------------------------------------------------

// moe_route + moe_experts with f32 weights, L = sum c * out, against an fp64 MoE forward with
// the op's expert choice held (the top-k choice is piecewise constant: no gradient of its own;
// the inputs keep every token's k-th and (k+1)-th probabilities apart by far more than h moves
// them). Both backward ops together give dx; the negative control drops the router's term
// (the gradient through the routing weights' softmax).
class MoeBackward : public Fixture, public ::testing::WithParamInterface<bool> {};

TEST_P(MoeBackward, ExpertsAndRouterMatchFiniteDifferences) {
  const bool normalize = GetParam();
  const int64_t t = 6, h = 12, inter = 8, ne = 4, k = 2;
  const Tensor x = uniform({t, h}, 31, 1.0f), c_t = uniform({t, h}, 32, 1.0f);
  const Tensor wr = uniform({ne, h}, 33, 1.0f), wg = uniform({ne, inter, h}, 34, 0.5f),
               wu = uniform({ne, inter, h}, 35, 0.5f), wd = uniform({ne, h, inter}, 36, 0.5f);
  MoeWeights w;
  w.router.weight = wr.view();
  w.gate.weight = wg.view();
  w.up.weight = wu.view();
  w.down.weight = wd.view();
  Tensor weights = Tensor::empty({t, k}, DType::f32), ids = Tensor::empty({t, k}, DType::i32);
  Tensor out = Tensor::empty({t, h}, DType::f32);
  ops::moe_route(ctx, x, w.router, normalize, weights, ids);
  ops::moe_experts(ctx, x, w, ops::GatedActivation::silu, weights, ids, out);
  Vec xv = to_vec(x);
  const Vec c = to_vec(c_t), r = to_vec(wr), g = to_vec(wg), u = to_vec(wu), d = to_vec(wd);
  const int32_t* chosen = ids.view().ptr<const int32_t>();
  double min_gap = INFINITY;  // between each token's k-th and (k+1)-th probability
  const auto fwd = [&] {
    Vec y(size_t(t * h), 0.0);
    for (int64_t i = 0; i < t; ++i) {
      Vec p(static_cast<size_t>(ne));
      double m = -INFINITY, sum = 0.0, kept = 0.0;
      for (int64_t e = 0; e < ne; ++e) {
        double z = 0.0;
        for (int64_t j = 0; j < h; ++j) z += xv[size_t(i * h + j)] * r[size_t(e * h + j)];
        p[size_t(e)] = z;
        m = std::max(m, z);
      }
      for (double& v : p) sum += (v = std::exp(v - m));
      for (double& v : p) v /= sum;
      Vec sorted = p;
      std::sort(sorted.rbegin(), sorted.rend());
      min_gap = std::min(min_gap, sorted[size_t(k - 1)] - sorted[size_t(k)]);
      for (int64_t s = 0; s < k; ++s) kept += p[size_t(chosen[i * k + s])];
      for (int64_t s = 0; s < k; ++s) {
        const int64_t e = chosen[i * k + s];
        const double ws = normalize ? p[size_t(e)] / kept : p[size_t(e)];
        Vec a(static_cast<size_t>(inter));
        for (int64_t n = 0; n < inter; ++n) {
          double gn = 0.0, un = 0.0;
          for (int64_t j = 0; j < h; ++j) {
            gn += g[size_t((e * inter + n) * h + j)] * xv[size_t(i * h + j)];
            un += u[size_t((e * inter + n) * h + j)] * xv[size_t(i * h + j)];
          }
          a[size_t(n)] = silu64(gn) * un;
        }
        for (int64_t j = 0; j < h; ++j) {
          double yj = 0.0;
          for (int64_t n = 0; n < inter; ++n)
            yj += d[size_t((e * h + j) * inter + n)] * a[size_t(n)];
          y[size_t(i * h + j)] += ws * yj;
        }
      }
    }
    return y;
  };
  EXPECT_LE(rel_err(out, fwd()), forward_f32_bound(h + inter));
  ASSERT_GT(min_gap, 1e-2);  // far beyond what h = 1e-4 on x moves a probability
  Tensor dx = Tensor::empty({t, h}, DType::f32), dw = Tensor::empty({t, k}, DType::f32);
  ops::moe_experts_backward(ctx, x, w, ops::GatedActivation::silu, weights, ids, c_t, dx, dw);
  const Tensor experts_only = copy_of(dx);
  ops::moe_route_backward(ctx, x, w.router, normalize, ids, dw, dx);
  const Vec fd = fd_grad(xv, [&] { return dot(c, fwd()); });
  const int64_t n = 2 * inter * k + h + ne;
  const double err = rel_err(dx, fd);
  EXPECT_LE(err, backward_grad_bound(n));
  std::printf("moe (normalize %d): dx %.3g\n", int(normalize), err);
  expect_fails(rel_err(experts_only, fd), backward_grad_bound(n));
}

INSTANTIATE_TEST_SUITE_P(Normalize, MoeBackward, ::testing::Values(true, false));

// LoRA on the experts (A [E, r, K], B [E, N, r] per projection), without and with dropout:
// moe_experts_backward's dx and every adapter gradient against central differences of an fp64
// forward with the routing held (and each expert's dropout mask, taken from lora_dropout on
// ones with the expert's stream). Negative control: the dx of the backward without the
// adapters (their terms dropped).
class MoeExpertLoraBackward : public Fixture, public ::testing::WithParamInterface<float> {};

TEST_P(MoeExpertLoraBackward, MatchesFiniteDifferences) {
  const float p_drop = GetParam();
  const int64_t t = 5, h = 10, inter = 6, ne = 3, k = 2, r = 2;
  const float scale = 1.5f;
  const Tensor x = uniform({t, h}, 41, 1.0f), c_t = uniform({t, h}, 42, 1.0f);
  const Tensor wr = uniform({ne, h}, 43, 1.0f), wg = uniform({ne, inter, h}, 44, 0.5f),
               wu = uniform({ne, inter, h}, 45, 0.5f), wd = uniform({ne, h, inter}, 46, 0.5f);
  Tensor ag = uniform({ne, r, h}, 47, 0.5f), bg = uniform({ne, inter, r}, 48, 0.5f);
  Tensor au = uniform({ne, r, h}, 49, 0.5f), bu = uniform({ne, inter, r}, 50, 0.5f);
  Tensor ad = uniform({ne, r, inter}, 51, 0.5f), bd = uniform({ne, h, r}, 52, 0.5f);
  MoeWeights w;
  w.router.weight = wr.view();
  w.gate.weight = wg.view();
  w.up.weight = wu.view();
  w.down.weight = wd.view();
  const ops::LoraDropout dg{p_drop, 101}, du{p_drop, 102}, dd{p_drop, 103};
  const MoeLora lora{{ag.view(), bg.view(), scale},
                     {au.view(), bu.view(), scale},
                     {ad.view(), bd.view(), scale},
                     dg,
                     du,
                     dd};
  Tensor weights = Tensor::empty({t, k}, DType::f32), ids = Tensor::empty({t, k}, DType::i32);
  Tensor out = Tensor::empty({t, h}, DType::f32);
  ops::moe_route(ctx, x, w.router, true, weights, ids);
  ops::moe_experts(ctx, x, w, ops::GatedActivation::silu, weights, ids, out, lora);
  const Vec c = to_vec(c_t), g = to_vec(wg), u = to_vec(wu), d = to_vec(wd);
  Vec xv = to_vec(x), wv = to_vec(weights);
  Vec agv = to_vec(ag), bgv = to_vec(bg), auv = to_vec(au), buv = to_vec(bu), adv = to_vec(ad),
      bdv = to_vec(bd);
  const int32_t* chosen = ids.view().ptr<const int32_t>();
  // Each (token, slot)'s row among its expert's rows (token order), and the experts' masks.
  std::vector<int64_t> local(size_t(t * k)), rows(size_t(ne), 0);
  for (int64_t q = 0; q < t * k; ++q) local[size_t(q)] = rows[size_t(chosen[q])]++;
  const auto masks = [&](const ops::LoraDropout& drop, int64_t cols) {
    std::vector<Vec> m;
    for (int64_t e = 0; e < ne; ++e) {
      Tensor ones = Tensor::empty({std::max<int64_t>(rows[size_t(e)], 1), cols}, DType::f32);
      std::fill(ones.ptr<float>(), ones.ptr<float>() + ones.numel(), 1.0f);
      Tensor mk = Tensor::empty(ones.view().shape, DType::f32);
      ops::lora_dropout(ctx, ones, {drop.p, rng_key(drop.seed, uint64_t(e))}, mk);
      m.push_back(to_vec(mk));
    }
    return m;
  };
  const std::vector<Vec> mg = masks(dg, h), mu = masks(du, h), md = masks(dd, inter);
  // y = W v + scale B (A (mask * v)) for expert e of a projection [n, kk] with rank r.
  const auto proj = [&](const Vec& W, const Vec& A, const Vec& B, int64_t e, int64_t n, int64_t kk,
                        const double* v, const double* mask, double* y) {
    Vec av(static_cast<size_t>(r), 0.0);
    for (int64_t j = 0; j < r; ++j)
      for (int64_t q = 0; q < kk; ++q)
        av[size_t(j)] += A[size_t((e * r + j) * kk + q)] * v[q] * mask[q];
    for (int64_t o = 0; o < n; ++o) {
      double acc = 0.0;
      for (int64_t q = 0; q < kk; ++q) acc += W[size_t((e * n + o) * kk + q)] * v[q];
      for (int64_t j = 0; j < r; ++j) acc += scale * B[size_t((e * n + o) * r + j)] * av[size_t(j)];
      y[o] = acc;
    }
  };
  // The routing weights held at the op's values (their gradient is the router's, tested above).
  const auto fwd = [&] {
    Vec y(size_t(t * h), 0.0);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t s = 0; s < k; ++s) {
        const int64_t e = chosen[i * k + s], row = local[size_t(i * k + s)];
        Vec gv(static_cast<size_t>(inter)), uv(static_cast<size_t>(inter)),
            a(static_cast<size_t>(inter)), ye(static_cast<size_t>(h));
        proj(g, agv, bgv, e, inter, h, xv.data() + i * h, mg[size_t(e)].data() + row * h,
             gv.data());
        proj(u, auv, buv, e, inter, h, xv.data() + i * h, mu[size_t(e)].data() + row * h,
             uv.data());
        for (int64_t n = 0; n < inter; ++n) a[size_t(n)] = silu64(gv[size_t(n)]) * uv[size_t(n)];
        proj(d, adv, bdv, e, h, inter, a.data(), md[size_t(e)].data() + row * inter, ye.data());
        for (int64_t j = 0; j < h; ++j)
          y[size_t(i * h + j)] += wv[size_t(i * k + s)] * ye[size_t(j)];
      }
    return y;
  };
  EXPECT_LE(rel_err(out, fwd()), forward_f32_bound(h + inter));
  Tensor dx = Tensor::empty({t, h}, DType::f32), dw = Tensor::empty({t, k}, DType::f32);
  Tensor gag = Tensor::zeros(ag.view().shape, DType::f32),
         gbg = Tensor::zeros(bg.view().shape, DType::f32);
  Tensor gau = Tensor::zeros(au.view().shape, DType::f32),
         gbu = Tensor::zeros(bu.view().shape, DType::f32);
  Tensor gad = Tensor::zeros(ad.view().shape, DType::f32),
         gbd = Tensor::zeros(bd.view().shape, DType::f32);
  const ops::MoeLoraGrads grads{gag.view(), gbg.view(), gau.view(),
                                gbu.view(), gad.view(), gbd.view()};
  ops::moe_experts_backward(ctx, x, w, ops::GatedActivation::silu, weights, ids, c_t, dx, dw, lora,
                            grads);
  const auto loss = [&] { return dot(c, fwd()); };
  const int64_t n = 2 * inter * k + h + 2 * r;
  const double bound = backward_grad_bound(n);
  const struct {
    const char* name;
    const Tensor& got;
    Vec& param;
  } checks[] = {{"dx", dx, xv},     {"gate A", gag, agv}, {"gate B", gbg, bgv}, {"up A", gau, auv},
                {"up B", gbu, buv}, {"down A", gad, adv}, {"down B", gbd, bdv}};
  for (const auto& ch : checks) {
    const double err = rel_err(ch.got, fd_grad(ch.param, loss));
    EXPECT_LE(err, bound) << ch.name;
    std::printf("moe lora (dropout %.1f) %s: %.3g\n", p_drop, ch.name, err);
  }
  // Negative control: the backward without the adapters gives the frozen experts' dx only.
  Tensor dx_frozen = Tensor::empty({t, h}, DType::f32);
  ops::moe_experts_backward(ctx, x, w, ops::GatedActivation::silu, weights, ids, c_t, dx_frozen,
                            dw);
  expect_fails(rel_err(dx_frozen, fd_grad(xv, loss)), bound);
}

INSTANTIATE_TEST_SUITE_P(Dropout, MoeExpertLoraBackward, ::testing::Values(0.0f, 0.3f));

}  // namespace
