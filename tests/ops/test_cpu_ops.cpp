// The CPU side of the op additions made for the CUDA backend: the fused FP8 ops dispatch to
// op + quantize_activation on the CPU (the ...DispatchesToComposition tests check only that:
// they compare an op with the composition it is implemented as; add_rms_norm is also checked
// against an independent double-precision reference), linear() of a pre-quantized input equals
// linear() of the plain one, device-agnostic fills and buffers behave, random device models run,
// and the emulation of CUDA's bf16 activations (Context::bf16_activations) rounds where CUDA does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/forward.h"
#include "model/presets.h"
#include "ops/columns.h"
#include "ops/device.h"
#include "ops/ops.h"
#include "quant/fp8.h"
#include "test_util.h"
#include "tolerances.h"

using namespace fp8rl;

namespace {

Tensor values(Shape s, uint64_t seed, float bound) {
  Tensor t = Tensor::empty(s, DType::f32);
  Arena a(1 << 20);
  Context ctx{Device::cpu, &a};
  ops::fill_uniform(ctx, t.view(), seed, bound);
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(c.view().data, t.view().data, t.nbytes());
  return c;
}

using test::same_bytes;

struct Fixture : ::testing::TestWithParam<ActScaling> {
  Arena arena{size_t(64) << 20};
  Context ctx{Device::cpu, &arena};
};

TEST_P(Fixture, RmsNormQuantDispatchesToComposition) {
  const ActScaling act = GetParam();
  const int64_t m = 19, k = 200;
  const Tensor x = values({m, k}, 1, 3.0f), w = values({k}, 2, 1.0f);
  const ops::QuantizedActivation q = ops::alloc_quantized(ctx, act, m, k);
  ops::rms_norm_quant(ctx, x, w, 1e-6f, true, q);
  Tensor h = Tensor::empty({m, k}, DType::f32);
  ops::rms_norm(ctx, x, w, 1e-6f, true, h);
  Tensor codes = Tensor::empty({m, k}, DType::f8e4m3);
  Tensor scales = Tensor::empty(act_scale_shape(act, m, k), DType::f32);
  quantize_activation(h, act, codes, scales);
  EXPECT_TRUE(same_bytes(q.codes, codes));
  EXPECT_TRUE(same_bytes(q.scales, scales));
}

TEST_P(Fixture, GatedQuantDispatchesToComposition) {
  const ActScaling act = GetParam();
  const int64_t m = 7, k = 300;
  const Tensor g = values({m, k}, 3, 4.0f), u = values({m, k}, 4, 2.0f);
  const ops::QuantizedActivation q = ops::alloc_quantized(ctx, act, m, k);
  ops::silu_mul_quant(ctx, g, u, q);
  Tensor h = Tensor::empty({m, k}, DType::f32);
  ops::silu_mul(ctx, g, u, h);
  const ops::QuantizedActivation r = ops::alloc_quantized(ctx, act, m, k);
  ops::quantize(ctx, h, r);
  EXPECT_TRUE(same_bytes(q.codes, r.codes));
  EXPECT_TRUE(same_bytes(q.scales, r.scales));
}

TEST_P(Fixture, AddRmsNormQuantDispatchesToComposition) {
  const ActScaling act = GetParam();
  const int64_t m = 11, k = 200;
  const Tensor x0 = values({m, k}, 9, 3.0f), d = values({m, k}, 10, 3.0f),
               w = values({k}, 11, 1.0f);
  Tensor x = Tensor::empty({m, k}, DType::f32), y = Tensor::empty({m, k}, DType::f32);
  std::memcpy(x.view().data, x0.view().data, x0.nbytes());
  std::memcpy(y.view().data, x0.view().data, x0.nbytes());
  const ops::QuantizedActivation q = ops::alloc_quantized(ctx, act, m, k);
  ops::add_rms_norm_quant(ctx, x, d, w, 1e-6f, false, q);
  ops::add(ctx, y, d, y);
  const ops::QuantizedActivation r = ops::alloc_quantized(ctx, act, m, k);
  ops::rms_norm_quant(ctx, y, w, 1e-6f, false, r);
  EXPECT_TRUE(same_bytes(x, y));
  EXPECT_TRUE(same_bytes(q.codes, r.codes));
  EXPECT_TRUE(same_bytes(q.scales, r.scales));
}

// The fused quantizers' plain output equals the plain op's bit for bit and leaves the codes
// as they are without it; the gated one may write over gate itself. Each plain starts as NaN.
TEST_P(Fixture, FusedQuantizersWritePlainOutput) {
  const ActScaling act = GetParam();
  const int64_t m = 9, k = 256;
  const Tensor x = values({m, k}, 21, 3.0f), d = values({m, k}, 22, 3.0f),
               w = values({k}, 23, 1.0f), g = values({m, k}, 24, 4.0f),
               u = values({m, k}, 25, 2.0f);
  auto nan_tensor = [&] {
    Tensor t = Tensor::empty({m, k}, DType::f32);
    ops::fill(ctx, t.view(), NAN);
    return t;
  };
  {
    const ops::QuantizedActivation q = ops::alloc_quantized(ctx, act, m, k),
                                   r = ops::alloc_quantized(ctx, act, m, k);
    Tensor plain = nan_tensor(), h = Tensor::empty({m, k}, DType::f32);
    ops::rms_norm_quant(ctx, x, w, 1e-6f, false, q, plain);
    ops::rms_norm_quant(ctx, x, w, 1e-6f, false, r);
    ops::rms_norm(ctx, x, w, 1e-6f, false, h);
    EXPECT_TRUE(same_bytes(plain, h));
    EXPECT_TRUE(same_bytes(q.codes, r.codes));
  }
  {
    Tensor x1 = copy_of(x), x2 = copy_of(x), plain = nan_tensor(),
           h = Tensor::empty({m, k}, DType::f32);
    const ops::QuantizedActivation q = ops::alloc_quantized(ctx, act, m, k),
                                   r = ops::alloc_quantized(ctx, act, m, k);
    ops::add_rms_norm_quant(ctx, x1, d, w, 1e-6f, true, q, plain);
    ops::add_rms_norm(ctx, x2, d, w, 1e-6f, true, h);
    EXPECT_TRUE(same_bytes(plain, h));
    EXPECT_TRUE(same_bytes(x1, x2));
    ops::rms_norm_quant(ctx, x2, w, 1e-6f, true, r);
    EXPECT_TRUE(same_bytes(q.codes, r.codes));
  }
  {
    Tensor plain = nan_tensor(), over_gate = copy_of(g), h = Tensor::empty({m, k}, DType::f32);
    const ops::QuantizedActivation q = ops::alloc_quantized(ctx, act, m, k),
                                   r = ops::alloc_quantized(ctx, act, m, k),
                                   s = ops::alloc_quantized(ctx, act, m, k);
    ops::silu_mul_quant(ctx, g, u, q, plain);
    ops::silu_mul_quant(ctx, g, u, r);
    ops::silu_mul_quant(ctx, over_gate, u, s, over_gate);
    ops::silu_mul(ctx, g, u, h);
    EXPECT_TRUE(same_bytes(plain, h));
    EXPECT_TRUE(same_bytes(over_gate, h));
    EXPECT_TRUE(same_bytes(q.codes, r.codes));
    EXPECT_TRUE(same_bytes(s.codes, r.codes));
  }
}

TEST_P(Fixture, LinearOfQuantizedInputEqualsLinear) {
  const ActScaling act = GetParam();
  const int64_t m = 5, n = 48, k = 200;
  const Fp8Scheme scheme = act == ActScaling::group   ? Fp8Scheme::block
                           : act == ActScaling::token ? Fp8Scheme::row
                                                      : Fp8Scheme::tensor;
  const Tensor wv = values({n, k}, 5, 0.1f), x = values({m, k}, 6, 2.0f);
  Tensor codes = Tensor::empty({n, k}, DType::f8e4m3);
  Tensor scales = Tensor::empty(weight_scale_shape(scheme, n, k), DType::f32);
  quantize_weight(wv, scheme, codes, scales);
  LinearWeight w;
  w.weight = codes;
  w.scales = scales;
  w.scheme = scheme;
  w.act = act;
  Tensor a = Tensor::empty({m, n}, DType::f32), b = Tensor::empty({m, n}, DType::f32);
  ops::linear(ctx, x, w, a);
  const ops::QuantizedActivation q = ops::alloc_quantized(ctx, act, m, k);
  ops::quantize(ctx, x, q);
  ops::linear(ctx, q, w, b);
  EXPECT_TRUE(same_bytes(a, b));
  // dequantize() gives the values linear() multiplies.
  Tensor xd = Tensor::empty({m, k}, DType::f32);
  ops::dequantize(ctx, q, xd);
  EXPECT_LE(test::rel_max_diff(xd, x), 1.0 / 16);
}

INSTANTIATE_TEST_SUITE_P(
    Scalings, Fixture, ::testing::Values(ActScaling::token, ActScaling::group, ActScaling::tensor),
    [](const auto& info) { return std::string(act_scaling_name(info.param)); });

// The fused forward ops are their unfused compositions bit for bit on the CPU (the CPU
// forward, and with it the goldens and DecodeEqualsPrefill, must not move). That checks the
// dispatch only; the values are checked against a double-precision reference written here.
TEST(FusedOps, AddRmsNormDispatchesToComposition) {
  Arena arena{size_t(16) << 20};
  Context ctx{Device::cpu, &arena};
  const int64_t m = 9, k = 77;
  const Tensor x0 = values({m, k}, 12, 3.0f), d = values({m, k}, 13, 3.0f),
               w = values({k}, 14, 1.0f);
  for (bool plus_one : {false, true}) {
    Tensor x = Tensor::empty({m, k}, DType::f32), y = Tensor::empty({m, k}, DType::f32);
    std::memcpy(x.view().data, x0.view().data, x0.nbytes());
    std::memcpy(y.view().data, x0.view().data, x0.nbytes());
    Tensor a = Tensor::empty({m, k}, DType::f32), b = Tensor::empty({m, k}, DType::f32);
    ops::add_rms_norm(ctx, x, d, w, 1e-6f, plus_one, a);
    ops::add(ctx, y, d, y);
    ops::rms_norm(ctx, y, w, 1e-6f, plus_one, b);
    EXPECT_TRUE(same_bytes(x, y));
    EXPECT_TRUE(same_bytes(a, b));
    // Independent reference: r = x0 + d, out = r / sqrt(mean(r^2) + eps) * (w or 1 + w).
    Tensor ref = Tensor::empty({m, k}, DType::f32), sum = Tensor::empty({m, k}, DType::f32);
    for (int64_t i = 0; i < m; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < k; ++j) {
        const double r = double(x0.ptr<float>()[i * k + j]) + double(d.ptr<float>()[i * k + j]);
        sum.ptr<float>()[i * k + j] = float(r);
        ss += r * r;
      }
      const double inv = 1.0 / std::sqrt(ss / double(k) + 1e-6);
      for (int64_t j = 0; j < k; ++j) {
        const double g = double(w.ptr<float>()[j]) + (plus_one ? 1.0 : 0.0);
        ref.ptr<float>()[i * k + j] = float(double(sum.ptr<float>()[i * k + j]) * inv * g);
      }
    }
    EXPECT_EQ(test::rel_max_diff(x, sum), 0.0);  // the residual add is one f32 rounding
    EXPECT_LE(test::rel_max_diff(a, ref), test::f32_reduction_bound(k)) << plus_one;
  }
  Tensor x = Tensor::empty({m, k}, DType::f32);
  EXPECT_THROW(ops::add_rms_norm(ctx, x, d, w, 1e-6f, false, x), Error);  // out must not be x
}

TEST(FusedOps, LinearAccumulateAddsScaledProduct) {
  Arena arena{size_t(16) << 20};
  const int64_t m = 7, k = 33, n = 19;
  const float alpha = 2.5f;
  const Tensor x = values({m, k}, 21, 2.0f), w = values({n, k}, 22, 0.5f),
               out0 = values({m, n}, 23, 3.0f);
  LinearWeight lw;
  lw.weight = w.view();
  Tensor ref = Tensor::empty({m, n}, DType::f32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c)
        acc += double(x.ptr<float>()[i * k + c]) * double(w.ptr<float>()[j * k + c]);
      ref.ptr<float>()[i * n + j] = float(double(out0.ptr<float>()[i * n + j]) + alpha * acc);
    }
  for (bool bf16 : {false, true}) {
    Context ctx{Device::cpu, &arena};
    ctx.bf16_activations = bf16;
    Tensor out = Tensor::empty({m, n}, DType::f32);
    std::memcpy(out.view().data, out0.view().data, out0.nbytes());
    ops::linear_accumulate(ctx, x, lw, alpha, out);
    // bf16: operands are rounded (x, w) and the result once: a few bf16 half-ulps.
    const double bound = bf16 ? 4 * test::kBf16HalfUlp : test::f32_reduction_bound(k);
    EXPECT_LE(test::rel_max_diff(out, ref), bound) << bf16;
    if (bf16) {
      for (int64_t i = 0; i < m * n; ++i)
        EXPECT_EQ(out.ptr<float>()[i], round_to_bf16(out.ptr<float>()[i]));
    }
    Tensor bad = Tensor::empty({m, n}, DType::f32);
    std::memcpy(bad.view().data, out0.view().data, out0.nbytes());
    ops::linear_accumulate(ctx, x, lw, 1.0f, bad);
    EXPECT_GT(test::rel_max_diff(bad, ref), 10 * bound) << bf16;
  }
}

TEST(FusedOps, RmsNormRopeIsRmsNormThenRope) {
  Arena arena{size_t(16) << 20};
  Context ctx{Device::cpu, &arena};
  const int64_t t = 6, heads = 3, d = 16;
  const Tensor x = values({t, heads, d}, 15, 3.0f), w = values({d}, 16, 1.0f);
  const Tensor inv_freq = values({d / 2}, 17, 0.5f);
  const std::vector<int32_t> pos = {0, 1, 2, 30, 31, 100000};
  const TensorView p(const_cast<int32_t*>(pos.data()), DType::i32, {t});
  for (bool norm : {false, true}) {
    // Unfused: rms_norm over each head, then rope in place.
    Tensor ref = Tensor::empty({t, heads, d}, DType::f32);
    std::memcpy(ref.view().data, x.view().data, x.nbytes());
    if (norm)
      ops::rms_norm(ctx, ref.view().reshape({t * heads, d}), w, 1e-6f, true,
                    ref.view().reshape({t * heads, d}));
    ops::rope(ctx, ref, p, inv_freq);
    const TensorView wv = norm ? w.view() : TensorView();
    // In place.
    Tensor a = Tensor::empty({t, heads, d}, DType::f32);
    std::memcpy(a.view().data, x.view().data, x.nbytes());
    ops::rms_norm_rope(ctx, a, wv, 1e-6f, true, p, inv_freq, a);
    EXPECT_TRUE(same_bytes(a, ref));
    // Into a strided destination (a KV-cache-like slice with padded rows): pads untouched.
    const int64_t stride = heads * d + 5;
    Tensor buf = Tensor::zeros({t, stride}, DType::f32);
    TensorView out(buf.view().data, DType::f32, {t, heads, d});
    out.strides[0] = stride;
    ops::rms_norm_rope(ctx, x, wv, 1e-6f, true, p, inv_freq, out);
    for (int64_t i = 0; i < t; ++i) {
      EXPECT_EQ(std::memcmp(buf.ptr<float>() + i * stride, ref.ptr<float>() + i * heads * d,
                            size_t(heads * d) * 4),
                0);
      for (int64_t j = heads * d; j < stride; ++j)
        EXPECT_EQ(buf.ptr<float>()[i * stride + j], 0.0f);
    }
  }
  // Partial overlap of x and out is refused.
  Tensor big = Tensor::empty({t + 1, heads, d}, DType::f32);
  EXPECT_THROW(ops::rms_norm_rope(ctx, big.view().slice_rows(0, t), w, 1e-6f, true, p, inv_freq,
                                  big.view().slice_rows(1, t + 1)),
               Error);
}

TEST(Memory, FillUniformIsDeterministicAndBounded) {
  const Tensor a = values({1000}, 7, 0.5f), b = values({1000}, 7, 0.5f),
               c = values({1000}, 8, 0.5f);
  EXPECT_TRUE(same_bytes(a, b));
  EXPECT_FALSE(same_bytes(a, c));
  float lo = 1, hi = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    lo = std::min(lo, a.ptr<float>()[i]);
    hi = std::max(hi, a.ptr<float>()[i]);
  }
  EXPECT_GE(lo, -0.5f);
  EXPECT_LT(hi, 0.5f);
  EXPECT_LT(lo, -0.4f);
  EXPECT_GT(hi, 0.4f);
}

TEST(Memory, DeviceBufferAndScratchOnTheCpu) {
  Arena arena(1 << 16);
  Context ctx{Device::cpu, &arena};
  DeviceBuffer b(ctx, 256);
  const TensorView v = b.view({64}, DType::f32);
  ops::fill(ctx, v, 2.5f);
  EXPECT_EQ(v.ptr<float>()[63], 2.5f);
  EXPECT_THROW(b.view({65}, DType::f32), Error);
  {
    ops::ScratchScope s(ctx);
    ops::scratch_alloc(ctx, {100}, DType::f32);
    EXPECT_GT(ops::scratch_mark(ctx), 0u);
  }
  EXPECT_EQ(ops::scratch_mark(ctx), 0u);
}

// dst[moves[i][0]] = src[moves[i][1]]; other elements untouched; moves outside either tensor
// raise. The CPU's StreamMark and asynchronous copy to the host are done on return.
TEST(Memory, CopyElementsAndStreamMarkOnTheCpu) {
  Arena arena(1 << 16);
  Context ctx{Device::cpu, &arena};
  Tensor src = Tensor::empty({4}, DType::i32), dst = Tensor::empty({6}, DType::i32);
  Tensor moves = Tensor::empty({2, 2}, DType::i32);
  for (int i = 0; i < 4; ++i) src.ptr<int32_t>()[i] = 10 + i;
  for (int i = 0; i < 6; ++i) dst.ptr<int32_t>()[i] = -i;
  const int32_t m[] = {5, 2, 0, 3};  // dst[5] = src[2], dst[0] = src[3]
  std::memcpy(moves.ptr<int32_t>(), m, sizeof m);
  ops::copy_elements(ctx, src.view(), moves.view(), dst.view());
  const std::vector<int32_t> got(dst.ptr<int32_t>(), dst.ptr<int32_t>() + 6);
  EXPECT_EQ(got, (std::vector<int32_t>{13, -1, -2, -3, -4, 12}));
  moves.ptr<int32_t>()[3] = 4;  // src has 4 elements
  EXPECT_THROW(ops::copy_elements(ctx, src.view(), moves.view(), dst.view()), Error);
  moves.ptr<int32_t>()[3] = 3;
  moves.ptr<int32_t>()[2] = 6;  // dst has 6
  EXPECT_THROW(ops::copy_elements(ctx, src.view(), moves.view(), dst.view()), Error);

  ops::StreamMark a(ctx), b(ctx);
  a.record();
  Tensor back = Tensor::empty({4}, DType::i32);
  ops::copy_to_host_async(ctx, src.view(), back.view());
  b.record();
  b.wait();
  EXPECT_EQ(std::memcmp(back.ptr<int32_t>(), src.ptr<int32_t>(), 16), 0);
  EXPECT_EQ(b.seconds_since(a), 0.0);
}

TEST(Device, CudaDeviceWithoutGpuIsAnError) {
  if (CudaDevice::count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_THROW(CudaDevice(), Error);
}

// A random model made on the CPU runs, and its FP8 variant quantizes the same bf16 weights.
TEST(RandomModel, RunsAndQuantizesTheSameWeights) {
  const ModelConfig c = preset_config("qwen3-tiny");
  Arena arena;
  Context ctx{Device::cpu, &arena};
  const Model off = Model::random(c, Fp8Scheme::off, ctx, 3);
  const Model row = Model::random(c, Fp8Scheme::row, ctx, 3);
  Tensor deq = Tensor::empty(off.layers[0].q.weight.shape, DType::f32);
  dequantize_weight(row.layers[0].q.weight, Fp8Scheme::row, row.layers[0].q.scales, deq);
  Tensor ref = Tensor::empty(deq.shape(), DType::f32);
  convert(off.layers[0].q.weight.data, DType::bf16, ref.view().data, DType::f32,
          size_t(ref.numel()));
  EXPECT_LE(test::rel_max_diff(deq, ref), 1.0 / 16);
  const std::vector<int32_t> ids = {1, 5, 9, 200, 3};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4};
  KvCache cache(c, 8, ctx);
  Tensor logits = Tensor::empty({1, c.vocab_size}, DType::f32);
  SequenceInput seq{ids, pos, &cache};
  forward(ctx, row, nullptr, {&seq, 1}, LogitRows::last, logits);
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_TRUE(std::isfinite(logits.ptr<float>()[i]));
  EXPECT_EQ(cache.length(), 5);
}

// ---- bf16 activations emulated on the CPU --------------------------------------------------

// Uniform values that are bf16 numbers (what every CUDA activation is), as f32.
Tensor bf16_values(Shape s, uint64_t seed, float bound) {
  Tensor t = values(s, seed, bound);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = round_to_bf16(t.ptr<float>()[i]);
  return t;
}

Tensor rounded(const TensorView& x) {
  Tensor t = Tensor::empty(x.shape, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) t.ptr<float>()[i] = round_to_bf16(x.ptr<float>()[i]);
  return t;
}

Tensor converted(const TensorView& x, DType dt) {
  Tensor t = Tensor::empty(x.shape, dt);
  convert(x.data, x.dtype, t.view().data, dt, size_t(x.numel()));
  return t;
}

bool all_bf16(const TensorView& x) {
  for (int64_t i = 0; i < x.numel(); ++i)
    if (round_to_bf16(x.ptr<float>()[i]) != x.ptr<float>()[i]) return false;
  return true;
}

// The same ops with exact fp32 activations and with bf16 activations emulated.
struct Bf16Ops : ::testing::Test {
  Arena arena_exact{size_t(64) << 20}, arena_emul{size_t(64) << 20};
  Context exact{Device::cpu, &arena_exact};
  Context emul{Device::cpu, &arena_emul};
  void SetUp() override { emul.bf16_activations = true; }
};

// Ops whose only rounding on CUDA is their output's: the emulation gives exactly the fp32
// result rounded to bf16 (kBf16EmulationLogits's note in tolerances.h: bit-identical).
TEST_F(Bf16Ops, ElementwiseOutputsAreTheExactOutputsRounded) {
  const int64_t t = 7, d = 96, heads = 3;
  const Tensor x = bf16_values({t, d}, 11, 3.0f), y = bf16_values({t, d}, 12, 2.0f);
  const Tensor w = values({d}, 13, 1.0f);
  auto check = [&](const char* what, auto&& op) {
    Tensor a = Tensor::empty({t, d}, DType::f32), b = Tensor::empty({t, d}, DType::f32);
    op(exact, a.view());
    op(emul, b.view());
    EXPECT_TRUE(all_bf16(b)) << what;
    EXPECT_TRUE(same_bytes(b, rounded(a))) << what;
    EXPECT_FALSE(same_bytes(a, b)) << what << ": nothing was rounded";
  };
  check("rms_norm", [&](Context& c, TensorView o) { ops::rms_norm(c, x, w, 1e-6f, false, o); });
  check("rms_norm 1+w", [&](Context& c, TensorView o) { ops::rms_norm(c, x, w, 1e-6f, true, o); });
  check("silu_mul", [&](Context& c, TensorView o) { ops::silu_mul(c, x, y, o); });
  check("gelu_tanh_mul", [&](Context& c, TensorView o) { ops::gelu_tanh_mul(c, x, y, o); });
  check("add", [&](Context& c, TensorView o) { ops::add(c, x, y, o); });
  check("softcap", [&](Context& c, TensorView o) {
    std::memcpy(o.data, x.view().data, x.nbytes());
    ops::softcap(c, o, 2.0f);
  });
  const std::vector<int32_t> pos = {0, 1, 5, 17, 100, 3000, 7};
  std::vector<float> inv_freq(size_t(d / heads / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(d / heads));
  const TensorView freq(inv_freq.data(), DType::f32, {int64_t(inv_freq.size())});
  check("rope", [&](Context& c, TensorView o) {
    std::memcpy(o.data, x.view().data, x.nbytes());
    ops::rope(c, o.reshape({t, heads, d / heads}), pos, freq);
  });
  // The embedding table is bf16 on CUDA: an f32 table is read rounded, then scaled and rounded.
  const Tensor table = values({50, d}, 14, 1.0f);
  const Tensor table_bf16 = converted(converted(table, DType::bf16), DType::f32);
  const std::vector<int32_t> ids = {3, 49, 0, 3, 7, 8, 20};
  Tensor a = Tensor::empty({t, d}, DType::f32), b = Tensor::empty({t, d}, DType::f32);
  ops::embedding(exact, ids, table_bf16, 13.856406f, a);
  ops::embedding(emul, ids, table, 13.856406f, b);
  EXPECT_TRUE(same_bytes(b, rounded(a)));
}

TEST_F(Bf16Ops, LogitsAreNotRounded) {
  const int64_t m = 5, n = 64, k = 96;
  const Tensor x = bf16_values({m, k}, 21, 2.0f);
  LinearWeight w;
  const Tensor wt = converted(values({n, k}, 22, 0.1f), DType::bf16);
  w.weight = wt;
  Tensor a = Tensor::empty({m, n}, DType::f32), b = Tensor::empty({m, n}, DType::f32);
  ops::linear(exact, x, w, a, ops::Output::f32);
  ops::linear(emul, x, w, b, ops::Output::f32);
  EXPECT_TRUE(same_bytes(a, b));
  ops::softcap(exact, a, 0.5f, ops::Output::f32);
  ops::softcap(emul, b, 0.5f, ops::Output::f32);
  EXPECT_TRUE(same_bytes(a, b));
  EXPECT_FALSE(all_bf16(b));
}

// Linears: unquantized weights are read as bf16 (the device copy) and the output rounded once
// after the bias; a native FP8 GEMM rounds only its output; the dequantize-to-bf16 fallback
// (K not a multiple of 16) rounds both dequantized operands as well.
TEST_F(Bf16Ops, LinearRoundsWhereCudaDoes) {
  const int64_t m = 6, n = 48;
  const Tensor bias = values({n}, 31, 0.5f);
  for (int64_t k : {256, 200}) {
    const Tensor x = bf16_values({m, k}, 32, 2.0f), wf = values({n, k}, 33, 0.1f);
    // Unquantized f32 weight, with a bias.
    LinearWeight plain;
    plain.weight = wf;
    plain.bias = bias;
    LinearWeight plain_bf16 = plain;
    const Tensor wb = converted(converted(wf, DType::bf16), DType::f32);
    plain_bf16.weight = wb;
    Tensor a = Tensor::empty({m, n}, DType::f32), b = Tensor::empty({m, n}, DType::f32);
    ops::linear(exact, x, plain_bf16, a);
    ops::linear(emul, x, plain, b);
    EXPECT_TRUE(same_bytes(b, rounded(a))) << "unquantized K=" << k;

    // FP8 row weights, per-token activations.
    Tensor codes = Tensor::empty({n, k}, DType::f8e4m3);
    Tensor scales = Tensor::empty(weight_scale_shape(Fp8Scheme::row, n, k), DType::f32);
    quantize_weight(wf, Fp8Scheme::row, codes, scales);
    LinearWeight fp8;
    fp8.weight = codes;
    fp8.scales = scales;
    fp8.scheme = Fp8Scheme::row;
    fp8.act = ActScaling::token;
    ASSERT_EQ(fp8_gemm_native(fp8, fp8.act), k % 16 == 0);
    ops::linear(exact, x, fp8, a);
    ops::linear(emul, x, fp8, b);
    EXPECT_TRUE(all_bf16(b));
    if (fp8_gemm_native(fp8, fp8.act)) {
      EXPECT_TRUE(same_bytes(b, rounded(a))) << "native FP8";
    } else {
      // bf16(x_hat) and bf16(w_hat) through the exact linear, then the output rounding.
      const ops::QuantizedActivation q = ops::alloc_quantized(emul, ActScaling::token, m, k);
      ops::quantize(emul, x, q);
      Tensor xh = Tensor::empty({m, k}, DType::f32);
      ops::dequantize(emul, q, xh);
      EXPECT_TRUE(all_bf16(xh));
      Tensor wh = Tensor::empty({n, k}, DType::f32);
      dequantize_weight(codes, Fp8Scheme::row, scales, wh);
      LinearWeight deq;
      const Tensor whr = rounded(wh);
      deq.weight = whr;
      Tensor c = Tensor::empty({m, n}, DType::f32);
      ops::linear(exact, xh, deq, c);
      EXPECT_TRUE(same_bytes(b, rounded(c))) << "dequantized fallback";
      Tensor d = Tensor::empty({m, n}, DType::f32);
      ops::linear(emul, q, fp8, d);  // the pre-quantized entry takes the same path
      EXPECT_TRUE(same_bytes(b, d));
    }
  }
}

// Fused quantization: per-token and per-group quantize the op's fp32 values on CUDA (nothing to
// round); per-tensor quantizes the op's bf16 output.
TEST_F(Bf16Ops, FusedQuantizationSeesWhatCudaQuantizes) {
  const int64_t m = 9, k = 300;
  const Tensor x = bf16_values({m, k}, 41, 3.0f), w = values({k}, 42, 1.0f);
  const Tensor g = bf16_values({m, k}, 43, 4.0f), u = bf16_values({m, k}, 44, 2.0f);
  for (ActScaling act : {ActScaling::token, ActScaling::group, ActScaling::tensor}) {
    for (int gated = 0; gated < 2; ++gated) {
      const ops::QuantizedActivation qa = ops::alloc_quantized(exact, act, m, k);
      const ops::QuantizedActivation qb = ops::alloc_quantized(emul, act, m, k);
      Tensor h = Tensor::empty({m, k}, DType::f32);
      if (gated) {
        ops::silu_mul_quant(exact, g, u, qa);
        ops::silu_mul_quant(emul, g, u, qb);
        ops::silu_mul(emul, g, u, h);
      } else {
        ops::rms_norm_quant(exact, x, w, 1e-6f, false, qa);
        ops::rms_norm_quant(emul, x, w, 1e-6f, false, qb);
        ops::rms_norm(emul, x, w, 1e-6f, false, h);
      }
      const std::string what = std::string(act_scaling_name(act)) + (gated ? " gated" : " norm");
      if (act == ActScaling::tensor) {
        const ops::QuantizedActivation qh = ops::alloc_quantized(emul, act, m, k);
        ops::quantize(emul, h, qh);  // the bf16 output, quantized
        EXPECT_TRUE(same_bytes(qb.codes, qh.codes)) << what;
        EXPECT_TRUE(same_bytes(qb.scales, qh.scales)) << what;
      } else {
        EXPECT_TRUE(same_bytes(qb.codes, qa.codes)) << what;
        EXPECT_TRUE(same_bytes(qb.scales, qa.scales)) << what;
      }
    }
  }
}

// Attention as the CUDA kernel computes it: close to the exact one (P and the output rounded to
// bf16: kCudaAttention of max |v|), bf16 outputs, and each query row independent of the others
// (a decode step gives the prefill's row bit for bit), across several key tiles, with a window,
// and with D = 256 (tiles of 32 keys).
TEST_F(Bf16Ops, AttentionFollowsTheKernel) {
  struct Case {
    int64_t d, window;
    float softcap;
  };
  for (const Case& c : {Case{64, 0, 0.0f}, Case{32, 50, 0.0f}, Case{256, 0, 20.0f}}) {
    const int64_t t = 150, hq = 4, hkv = 2;
    const Tensor q = bf16_values({t, hq, c.d}, 51, 2.0f);
    const Tensor kc = bf16_values({t, hkv, c.d}, 52, 2.0f),
                 vc = bf16_values({t, hkv, c.d}, 53, 1.0f);
    ops::AttentionParams p;
    p.scale = 1.0f / std::sqrt(float(c.d));
    p.window = c.window;
    p.softcap = c.softcap;
    Tensor a = Tensor::empty({t, hq, c.d}, DType::f32), b = Tensor::empty({t, hq, c.d}, DType::f32);
    ops::attention(exact, q, kc, vc, 0, p, a);
    ops::attention(emul, q, kc, vc, 0, p, b);
    EXPECT_TRUE(all_bf16(b));
    double vmax = 0;
    for (int64_t i = 0; i < vc.numel(); ++i)
      vmax = std::max(vmax, double(std::fabs(vc.ptr<float>()[i])));
    double diff = 0;
    for (int64_t i = 0; i < a.numel(); ++i)
      diff = std::max(diff, double(std::fabs(a.ptr<float>()[i] - b.ptr<float>()[i])));
    EXPECT_LE(diff / vmax, test::kCudaAttention) << "D=" << c.d;
    EXPECT_GT(diff, 0.0);
    // The last query alone (a decode step) against the full cache.
    Tensor last = Tensor::empty({1, hq, c.d}, DType::f32);
    ops::attention(emul, q.view().slice_rows(t - 1, t), kc, vc, t - 1, p, last);
    EXPECT_TRUE(same_bytes(last, b.view().slice_rows(t - 1, t))) << "D=" << c.d;
  }
}

TEST_F(Bf16Ops, DequantizeRoundsLikeTheKernel) {
  const int64_t m = 4, k = 256;
  const Tensor x = bf16_values({m, k}, 61, 5.0f);
  const ops::QuantizedActivation q = ops::alloc_quantized(exact, ActScaling::group, m, k);
  ops::quantize(exact, x, q);
  Tensor a = Tensor::empty({m, k}, DType::f32), b = Tensor::empty({m, k}, DType::f32);
  ops::dequantize(exact, q, a);
  ops::dequantize(emul, q, b);
  EXPECT_TRUE(same_bytes(b, rounded(a)));
}

}  // namespace
