// The CPU side of the op additions made for the CUDA backend: the fused FP8 ops equal op +
// quantize_activation bit for bit, linear() of a pre-quantized input equals linear() of the
// plain one, device-agnostic fills and buffers behave, and random device models run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model/forward.h"
#include "model/presets.h"
#include "ops/device.h"
#include "ops/ops.h"
#include "quant/fp8.h"
#include "test_util.h"

using namespace fp8rl;

namespace {

Tensor values(Shape s, uint64_t seed, float bound) {
  Tensor t = Tensor::empty(s, DType::f32);
  Arena a(1 << 20);
  Context ctx{Device::cpu, &a};
  ops::fill_uniform(ctx, t.view(), seed, bound);
  return t;
}

bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

struct Fixture : ::testing::TestWithParam<ActScaling> {
  Arena arena{size_t(64) << 20};
  Context ctx{Device::cpu, &arena};
};

TEST_P(Fixture, RmsNormQuantIsNormThenQuantize) {
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

TEST_P(Fixture, GatedQuantIsGatedThenQuantize) {
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

TEST_P(Fixture, AddRmsNormQuantIsAddThenRmsNormQuant) {
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

INSTANTIATE_TEST_SUITE_P(Scalings, Fixture,
                         ::testing::Values(ActScaling::token, ActScaling::group,
                                           ActScaling::tensor),
                         [](const auto& info) { return std::string(act_scaling_name(info.param)); });

// The fused forward ops are their unfused compositions bit for bit on the CPU (the CPU
// forward, and with it the goldens and DecodeEqualsPrefill, must not move).
TEST(FusedOps, AddRmsNormIsAddThenRmsNorm) {
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
  }
  Tensor x = Tensor::empty({m, k}, DType::f32);
  EXPECT_THROW(ops::add_rms_norm(ctx, x, d, w, 1e-6f, false, x), Error);  // out must not be x
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
  const Tensor a = values({1000}, 7, 0.5f), b = values({1000}, 7, 0.5f), c = values({1000}, 8, 0.5f);
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
  forward(ctx, row, {&seq, 1}, LogitRows::last, logits);
  for (int64_t i = 0; i < logits.numel(); ++i) ASSERT_TRUE(std::isfinite(logits.ptr<float>()[i]));
  EXPECT_EQ(cache.length(), 5);
}

}  // namespace
