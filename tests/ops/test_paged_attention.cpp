// The paged KV cache on the CPU: store_kv puts each token's keys and values in its slot, and
// paged_attention over randomly scattered blocks equals attention() over each sequence's
// contiguous cache bit for bit (exact and bf16-emulating), for ragged batches of prefills,
// prefill chunks and decodes, with GQA, a window and a softcap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "formats/quant_config.h"
#include "model/rope.h"
#include "ops/columns.h"
#include "ops/memory.h"
#include "ops/ops.h"
#include "quant/fp8.h"
#include "test_util.h"

using namespace fp8rl;

namespace {

constexpr int64_t kBlock = 16;

// Uniform values in [-bound, bound], rounded to bf16 (what a CUDA cache holds).
Tensor cache_values(Shape s, uint64_t seed, float bound) {
  Tensor t = Tensor::empty(s, DType::f32);
  Arena a(1 << 20);
  Context ctx{Device::cpu, &a};
  ops::fill_uniform(ctx, t.view(), seed, bound);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = round_to_bf16(t.ptr<float>()[i]);
  return t;
}

Tensor i32(const std::vector<int32_t>& v, Shape s) {
  Tensor t = Tensor::empty(s, DType::i32);
  std::memcpy(t.view().data, v.data(), v.size() * 4);
  return t;
}

using test::same_bytes;

struct Seq {
  int64_t context, queries;  // tokens in the cache after the step, new ones among them
};

struct Config {
  int64_t hq, hkv, d, window;
  float softcap;
};

// A ragged batch: each sequence's contiguous cache and new queries, and the same keys and
// values scattered over a shuffled pool of blocks (unused slots hold NaN, so a read through a
// wrong slot shows).
struct Batch {
  std::vector<Seq> seqs;
  Config c;
  std::vector<Tensor> kc, vc, q;  // per sequence: [context, Hkv, D], [queries, Hq, D]
  Tensor q_all;                   // [T + padding, Hq, D]
  Tensor k_pool, v_pool;          // [blocks, 16, Hkv, D]
  Tensor cu_q, lens, tables;
  std::vector<int32_t> table_values;
  int64_t width = 0, rows = 0, padding = 3;
  ops::PagedBatch meta;

  Batch(std::vector<Seq> s, Config cfg, uint64_t seed) : seqs(std::move(s)), c(cfg) {
    int64_t blocks = 0, max_q = 0, max_c = 0;
    for (const Seq& sq : seqs) {
      width = std::max(width, (sq.context + kBlock - 1) / kBlock);
      blocks += (sq.context + kBlock - 1) / kBlock;
      rows += sq.queries;
      max_q = std::max(max_q, sq.queries);
      max_c = std::max(max_c, sq.context);
    }
    blocks += 5;  // never used
    std::vector<int32_t> perm(static_cast<size_t>(blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(uint32_t(seed)));
    table_values.assign(size_t(seqs.size() * width), -1);
    std::vector<int32_t> cu{0}, len;
    size_t next = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      for (int64_t b = 0; b < (seqs[i].context + kBlock - 1) / kBlock; ++b)
        table_values[i * width + b] = perm[next++];
      cu.push_back(cu.back() + int32_t(seqs[i].queries));
      len.push_back(int32_t(seqs[i].context));
      kc.push_back(cache_values({seqs[i].context, c.hkv, c.d}, seed + 10 * i + 1, 2.0f));
      vc.push_back(cache_values({seqs[i].context, c.hkv, c.d}, seed + 10 * i + 2, 1.0f));
      q.push_back(cache_values({seqs[i].queries, c.hq, c.d}, seed + 10 * i + 3, 2.0f));
    }
    q_all = cache_values({rows + padding, c.hq, c.d}, seed + 7, 2.0f);
    for (size_t i = 0; i < seqs.size(); ++i)
      std::memcpy(q_all.ptr<float>() + cu[i] * c.hq * c.d, q[i].view().data, q[i].nbytes());
    k_pool = Tensor::empty({blocks, kBlock, c.hkv, c.d}, DType::f32);
    v_pool = Tensor::empty({blocks, kBlock, c.hkv, c.d}, DType::f32);
    std::fill(k_pool.ptr<float>(), k_pool.ptr<float>() + k_pool.numel(), NAN);
    std::fill(v_pool.ptr<float>(), v_pool.ptr<float>() + v_pool.numel(), NAN);
    cu_q = i32(cu, {int64_t(cu.size())});
    lens = i32(len, {int64_t(len.size())});
    set_tables();
    meta.num_seqs = int64_t(seqs.size());
    meta.max_query_len = max_q;
    meta.max_context_len = max_c;
  }

  void set_tables() {
    tables = i32(table_values, {int64_t(seqs.size()), width});
    meta.cu_q = cu_q;
    meta.context_lens = lens;
    meta.block_tables = tables;
  }

  int32_t slot(size_t s, int64_t j) const {
    return table_values[s * width + j / kBlock] * int32_t(kBlock) + int32_t(j % kBlock);
  }

  // Every sequence's keys and values into the pool, through store_kv.
  void store(Context& ctx) {
    for (size_t i = 0; i < seqs.size(); ++i) {
      std::vector<int32_t> sm;
      for (int64_t j = 0; j < seqs[i].context; ++j) sm.push_back(slot(i, j));
      const Tensor mapping = i32(sm, {seqs[i].context});
      ops::store_kv(ctx, kc[i], vc[i], mapping, k_pool, v_pool);
    }
  }

  ops::AttentionParams params() const {
    ops::AttentionParams p;
    p.scale = 1.0f / std::sqrt(float(c.d));
    p.window = c.window;
    p.softcap = c.softcap;
    return p;
  }

  Tensor paged(Context& ctx) {
    Tensor out = cache_values({rows + padding, c.hq, c.d}, 99, 5.0f);  // padding rows: garbage
    ops::paged_attention(ctx, q_all, k_pool, v_pool, meta, params(), out);
    return out;
  }

  // FP8 pools: every sequence's keys and values quantized into e4m3 codes and per-(slot, head)
  // scales through store_kv. Unused slots hold NaN codes and scales.
  Tensor k_codes, v_codes, k_scale, v_scale;
  void store_fp8(Context& ctx) {
    const int64_t nb = k_pool.shape()[0];
    const Shape codes{nb, kBlock, c.hkv, c.d}, scales{nb, kBlock, c.hkv};
    k_codes = Tensor::empty(codes, DType::f8e4m3);
    v_codes = Tensor::empty(codes, DType::f8e4m3);
    k_scale = Tensor::empty(scales, DType::f32);
    v_scale = Tensor::empty(scales, DType::f32);
    std::memset(k_codes.view().data, 0x7f, k_codes.nbytes());  // e4m3 NaN
    std::memset(v_codes.view().data, 0x7f, v_codes.nbytes());
    std::fill(k_scale.ptr<float>(), k_scale.ptr<float>() + k_scale.numel(), NAN);
    std::fill(v_scale.ptr<float>(), v_scale.ptr<float>() + v_scale.numel(), NAN);
    for (size_t i = 0; i < seqs.size(); ++i) {
      std::vector<int32_t> sm;
      for (int64_t j = 0; j < seqs[i].context; ++j) sm.push_back(slot(i, j));
      const Tensor mapping = i32(sm, {seqs[i].context});
      ops::store_kv(ctx, kc[i], vc[i], mapping, k_codes, v_codes, scales_of_fp8());
    }
  }
  ops::KvScales scales_of_fp8() const { return {k_scale.view(), v_scale.view()}; }

  // The f32 pools set to what the FP8 pools dequantize to: code * scale, rounded to bf16 when
  // the activations are (the values a bf16 pool would hold).
  void dequantize_into_pools(bool bf16) {
    const int64_t d = c.d;
    for (int64_t r = 0; r < k_scale.numel(); ++r)
      for (int64_t i = 0; i < d; ++i)
        for (auto [codes, sc, pool] :
             {std::tuple{&k_codes, &k_scale, &k_pool}, std::tuple{&v_codes, &v_scale, &v_pool}}) {
          const float x = e4m3_to_f32(codes->ptr<uint8_t>()[r * d + i]) * sc->ptr<float>()[r];
          pool->ptr<float>()[r * d + i] = bf16 ? round_to_bf16(x) : x;
        }
  }

  Tensor paged_fp8(Context& ctx) {
    Tensor out = cache_values({rows + padding, c.hq, c.d}, 99, 5.0f);
    ops::paged_attention(ctx, q_all, k_codes, v_codes, meta, params(), out, {}, scales_of_fp8());
    return out;
  }

  // attention() of each sequence's new queries against its contiguous cache.
  Tensor reference(Context& ctx) {
    Tensor out = Tensor::zeros({rows + padding, c.hq, c.d}, DType::f32);
    int64_t first = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      ops::attention(ctx, q[i], kc[i], vc[i], seqs[i].context - seqs[i].queries, params(),
                     out.view().slice_rows(first, first + seqs[i].queries));
      first += seqs[i].queries;
    }
    return out;
  }
};

struct PagedAttention : ::testing::TestWithParam<bool> {  // bf16 emulation?
  Arena arena{size_t(64) << 20};
  Context ctx{Device::cpu, &arena};
  void SetUp() override { ctx.bf16_activations = GetParam(); }
};

const std::vector<Seq> kRagged = {{1, 1},  {19, 19}, {257, 257}, {300, 1}, {100, 37},
                                  {64, 1}, {65, 2},  {33, 16},   {16, 16}, {17, 1}};

TEST_P(PagedAttention, EqualsContiguousAttention) {
  for (const Config& c : {Config{8, 2, 64, 0, 0.0f}, Config{4, 4, 32, 50, 0.0f},
                          Config{8, 1, 256, 0, 20.0f}, Config{6, 2, 128, 70, 30.0f}}) {
    Batch b(kRagged, c, 1000 + uint64_t(c.d));
    b.store(ctx);
    const Tensor paged = b.paged(ctx), ref = b.reference(ctx);
    EXPECT_TRUE(same_bytes(paged, ref)) << "D=" << c.d << " window " << c.window;
    float norm = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) norm += std::fabs(ref.ptr<float>()[i]);
    EXPECT_GT(norm, 0.0f);
  }
}

// The same rows through another block placement and inside another batch: identical.
TEST_P(PagedAttention, RowsDoNotDependOnPlacementOrBatch) {
  const Config c{8, 2, 64, 0, 0.0f};
  Batch a(kRagged, c, 7), b({kRagged[3]}, c, 8);
  b.kc[0] = a.kc[3];
  b.vc[0] = a.vc[3];
  std::memcpy(b.q_all.view().data, a.q[3].view().data, a.q[3].nbytes());
  a.store(ctx);
  b.store(ctx);
  const Tensor pa = a.paged(ctx), pb = b.paged(ctx);
  const int64_t row = a.cu_q.ptr<int32_t>()[3];
  EXPECT_TRUE(same_bytes(pa.view().slice_rows(row, row + 1), pb.view().slice_rows(0, 1)));
}

// Negative control: one wrong block table entry changes the rows that see that block.
TEST_P(PagedAttention, WrongBlockTableChangesTheResult) {
  const Config c{8, 2, 64, 0, 0.0f};
  Batch b(kRagged, c, 11);
  b.store(ctx);
  const Tensor good = b.paged(ctx);
  std::swap(b.table_values[2 * b.width + 3], b.table_values[2 * b.width + 5]);  // 257 tokens
  b.set_tables();
  const Tensor bad = b.paged(ctx);
  const int64_t first = b.cu_q.ptr<int32_t>()[2], last = b.cu_q.ptr<int32_t>()[3];
  EXPECT_TRUE(same_bytes(good.view().slice_rows(0, first), bad.view().slice_rows(0, first)));
  EXPECT_TRUE(same_bytes(good.view().slice_rows(first, first + 16 * 3),
                         bad.view().slice_rows(first, first + 16 * 3)));
  EXPECT_FALSE(same_bytes(good.view().slice_rows(first + 16 * 3, last),
                          bad.view().slice_rows(first + 16 * 3, last)));
}

TEST_P(PagedAttention, PaddingRowsAreZeroAndAmaxIsTheOutputs) {
  Batch b(kRagged, Config{4, 2, 32, 0, 0.0f}, 21);
  b.store(ctx);
  Tensor amax = Tensor::zeros({1}, DType::f32);
  Tensor out = cache_values({b.rows + b.padding, 4, 32}, 5, 5.0f);
  ops::paged_attention(ctx, b.q_all, b.k_pool, b.v_pool, b.meta, b.params(), out, amax);
  float mx = 0;
  for (int64_t i = 0; i < out.numel(); ++i) mx = std::max(mx, std::fabs(out.ptr<float>()[i]));
  EXPECT_EQ(amax.ptr<float>()[0], mx);
  for (int64_t i = b.rows * 4 * 32; i < out.numel(); ++i) ASSERT_EQ(out.ptr<float>()[i], 0.0f);
}

// With out_q (an FP8-row o_proj's input) the op also quantizes its output, padding rows as zero
// rows: the codes and scales of quantize(out), for token and group scaling.
TEST_P(PagedAttention, OutQIsTheQuantizedOutput) {
  Batch b(kRagged, Config{4, 2, 32, 0, 0.0f}, 21);
  b.store(ctx);
  const int64_t t = b.rows + b.padding, cols = 4 * 32;
  for (ActScaling act : {ActScaling::token, ActScaling::group}) {
    Tensor out = cache_values({t, 4, 32}, 5, 5.0f);
    const ops::QuantizedActivation q = ops::alloc_quantized(ctx, act, t, cols);
    ops::paged_attention(ctx, b.q_all, b.k_pool, b.v_pool, b.meta, b.params(), out, {}, {}, &q);
    const ops::QuantizedActivation want = ops::alloc_quantized(ctx, act, t, cols);
    ops::quantize(ctx, out.view().reshape({t, cols}), want);
    EXPECT_TRUE(same_bytes(q.codes, want.codes)) << act_scaling_name(act);
    EXPECT_TRUE(same_bytes(q.scales, want.scales)) << act_scaling_name(act);
    // Negative control: another output's quantization differs.
    Tensor other = cache_values({t, 4, 32}, 6, 5.0f);
    ops::quantize(ctx, other.view().reshape({t, cols}), want);
    EXPECT_FALSE(same_bytes(q.codes, want.codes));
  }
  // Tensor scaling goes through amax, not out_q.
  const ops::QuantizedActivation bad = ops::alloc_quantized(ctx, ActScaling::tensor, t, cols);
  Tensor out = cache_values({t, 4, 32}, 5, 5.0f);
  EXPECT_THROW(
      ops::paged_attention(ctx, b.q_all, b.k_pool, b.v_pool, b.meta, b.params(), out, {}, {}, &bad),
      Error);
}

// An FP8 pool reads as the pool of its dequantized values: paged_attention over the codes and
// scales equals paged_attention over an f32 pool holding code * scale (bf16-rounded where the
// activations are) bit for bit, and differs from the unquantized cache by about e4m3's
// precision.
TEST_P(PagedAttention, Fp8PoolEqualsItsDequantizedValues) {
  for (const Config& c :
       {Config{8, 2, 64, 0, 0.0f}, Config{8, 1, 256, 0, 20.0f}, Config{6, 2, 128, 70, 30.0f}}) {
    Batch b(kRagged, c, 2000 + uint64_t(c.d));
    b.store(ctx);
    const Tensor unquantized = b.paged(ctx);
    b.store_fp8(ctx);
    const Tensor fp8 = b.paged_fp8(ctx);
    b.dequantize_into_pools(GetParam());
    const Tensor dequantized = b.paged(ctx);
    EXPECT_TRUE(same_bytes(fp8, dequantized)) << "D=" << c.d;
    // Keys and values carry a relative error up to 2^-4 each (e4m3's half ulp), the outputs
    // (convex combinations of values of magnitude <= 1) move by a fraction of that.
    float dev = 0;
    for (int64_t i = 0; i < b.rows * c.hq * c.d; ++i)
      dev = std::max(dev, std::fabs(fp8.ptr<float>()[i] - unquantized.ptr<float>()[i]));
    EXPECT_GT(dev, 0.0f) << "D=" << c.d;
    EXPECT_LT(dev, 0.25f) << "D=" << c.d;
  }
}

// Negative control: one wrong scale changes exactly the rows that see its slot.
TEST_P(PagedAttention, WrongFp8ScaleChangesTheResult) {
  const Config c{8, 2, 64, 0, 0.0f};
  Batch b(kRagged, c, 31);
  b.store_fp8(ctx);
  const Tensor good = b.paged_fp8(ctx);
  // Sequence 2 (257 tokens, all new): its position 100, kv head 1, value scale doubled.
  b.v_scale.ptr<float>()[b.slot(2, 100) * c.hkv + 1] *= 2.0f;
  const Tensor bad = b.paged_fp8(ctx);
  const int64_t first = b.cu_q.ptr<int32_t>()[2], last = b.cu_q.ptr<int32_t>()[3];
  EXPECT_TRUE(
      same_bytes(good.view().slice_rows(0, first + 100), bad.view().slice_rows(0, first + 100)));
  EXPECT_FALSE(same_bytes(good.view().slice_rows(first + 100, last),
                          bad.view().slice_rows(first + 100, last)));
}

INSTANTIATE_TEST_SUITE_P(Rounding, PagedAttention, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "bf16" : "exact"; });

// store_kv writes each token's Hkv*D values to its slot from a strided source (a slice of a
// fused qkv buffer), skips negative slots, and touches nothing else.
TEST(StoreKv, PlacesRowsAtTheirSlotsAndSkipsPadding) {
  Arena arena(1 << 20);
  Context ctx{Device::cpu, &arena};
  const int64_t t = 6, hkv = 2, d = 8, blocks = 3, width = 5 * hkv * d;
  const Tensor qkv = cache_values({t, width}, 3, 1.0f);
  TensorView k(qkv.view().data, DType::f32, {t, hkv, d}), v = k;
  k.strides[0] = v.strides[0] = width;
  v.data = qkv.ptr<float>() + 3 * hkv * d;
  const std::vector<int32_t> sm = {17, -1, 0, 47, 5, -3};
  const Tensor mapping = i32(sm, {t});
  Tensor kp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32);
  Tensor vp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32);
  std::fill(kp.ptr<float>(), kp.ptr<float>() + kp.numel(), -7.0f);
  std::fill(vp.ptr<float>(), vp.ptr<float>() + vp.numel(), -7.0f);
  ops::store_kv(ctx, k, v, mapping, kp, vp);
  for (int64_t slot = 0; slot < blocks * kBlock; ++slot) {
    const auto src = std::find(sm.begin(), sm.end(), int32_t(slot));
    const int64_t tok = src - sm.begin();
    for (int64_t i = 0; i < hkv * d; ++i) {
      const float ke = src == sm.end() ? -7.0f : qkv.ptr<float>()[tok * width + i];
      const float ve = src == sm.end() ? -7.0f : qkv.ptr<float>()[tok * width + 3 * hkv * d + i];
      ASSERT_EQ(kp.ptr<float>()[slot * hkv * d + i], ke) << "slot " << slot;
      ASSERT_EQ(vp.ptr<float>()[slot * hkv * d + i], ve) << "slot " << slot;
    }
  }
  const Tensor beyond = i32({0, 1, 2, 3, 4, 48}, {t});
  EXPECT_THROW(ops::store_kv(ctx, k, v, beyond, kp, vp), Error);
}

// rope_store_kv over the column parts of one [T, (Hq + 2 Hkv) D] matrix. On the CPU the op is
// rms_norm_rope + store_kv (their numbers are held to HF elsewhere), so this checks its wiring:
// q_out is q through the q norm and RoPE, the pools hold k (not v) through the k norm and RoPE
// and v as it is, at each token's slot (padding skipped); q_out may be q itself but no other
// overlap is accepted. The fused CUDA kernel is held to this in test_ops (rope_store_kv).
TEST(RopeStoreKv, ColumnPartsOfTheStackedOutput) {
  Arena arena(1 << 22);
  Context ctx{Device::cpu, &arena};
  const int64_t t = 5, hq = 4, hkv = 2, d = 16, blocks = 2, width = (hq + 2 * hkv) * d;
  const Tensor qkv = cache_values({t, width}, 7, 2.0f);
  const Tensor qn = cache_values({d}, 8, 1.0f), kn = cache_values({d}, 9, 1.0f);
  auto part = [&](const Tensor& m, int64_t col, int64_t heads) {
    return ops::column_heads(m.view(), col, heads, d);
  };
  const std::vector<float> freq = rope_inv_freq(RopeConfig{}, d);
  const TensorView inv_freq(const_cast<float*>(freq.data()), DType::f32, {d / 2});
  const Tensor pos = i32({3, 4, 9, 10, 11}, {t}), mapping = i32({20, -1, 3, 31, 0}, {t});
  ops::QkRope qk;
  qk.q_norm = qn;
  qk.k_norm = kn;
  qk.eps = 1e-6f;
  qk.positions = pos;
  qk.inv_freq = inv_freq;
  Tensor kp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32),
         vp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f32),
         q_out = Tensor::empty({t, hq, d}, DType::f32);
  std::fill(kp.ptr<float>(), kp.ptr<float>() + kp.numel(), -7.0f);
  std::fill(vp.ptr<float>(), vp.ptr<float>() + vp.numel(), -7.0f);
  const TensorView q = part(qkv, 0, hq), k = part(qkv, hq * d, hkv),
                   v = part(qkv, (hq + hkv) * d, hkv);
  ops::rope_store_kv(ctx, q, k, v, qk, mapping, kp, vp, {}, q_out);

  Tensor q_want = Tensor::empty({t, hq, d}, DType::f32),
         k_want = Tensor::empty({t, hkv, d}, DType::f32);
  ops::rms_norm_rope(ctx, q, qn, 1e-6f, false, pos, inv_freq, q_want);
  ops::rms_norm_rope(ctx, k, kn, 1e-6f, false, pos, inv_freq, k_want);
  EXPECT_EQ(std::memcmp(q_out.view().data, q_want.view().data, q_want.nbytes()), 0);
  const std::vector<int32_t> sm = {20, -1, 3, 31, 0};
  int64_t rotated_differs = 0;
  for (int64_t slot = 0; slot < blocks * kBlock; ++slot) {
    const auto src = std::find(sm.begin(), sm.end(), int32_t(slot));
    const int64_t tok = src - sm.begin();
    for (int64_t i = 0; i < hkv * d; ++i) {
      const float kw = src == sm.end() ? -7.0f : k_want.ptr<float>()[tok * hkv * d + i];
      const float vw = src == sm.end() ? -7.0f : qkv.ptr<float>()[tok * width + (hq + hkv) * d + i];
      ASSERT_EQ(kp.ptr<float>()[slot * hkv * d + i], kw) << "slot " << slot;
      ASSERT_EQ(vp.ptr<float>()[slot * hkv * d + i], vw) << "slot " << slot;
      if (src != sm.end()) rotated_differs += kw != qkv.ptr<float>()[tok * width + hq * d + i];
    }
  }
  EXPECT_GT(rotated_differs, 0);  // control: the stored keys are not the raw ones

  // In place through q's own view; refused when q_out overlaps k, or q with another stride.
  Tensor m = Tensor::empty({t, width}, DType::f32);
  std::memcpy(m.view().data, qkv.view().data, qkv.nbytes());
  const TensorView mq = part(m, 0, hq);
  ops::rope_store_kv(ctx, mq, part(m, hq * d, hkv), part(m, (hq + hkv) * d, hkv), qk, mapping, kp,
                     vp, {}, mq);
  for (int64_t i = 0; i < t; ++i)
    EXPECT_EQ(std::memcmp(m.ptr<float>() + i * width, q_want.ptr<float>() + i * hq * d,
                          size_t(hq * d) * 4),
              0);
  EXPECT_THROW(ops::rope_store_kv(ctx, mq, part(m, hq * d, hkv), part(m, (hq + hkv) * d, hkv), qk,
                                  mapping, kp, vp, {}, part(m, d, hq)),
               Error);
  TensorView q_dense(m.ptr<float>(), DType::f32, {t, hq, d});  // q's start, another stride
  EXPECT_THROW(ops::rope_store_kv(ctx, mq, part(m, hq * d, hkv), part(m, (hq + hkv) * d, hkv), qk,
                                  mapping, kp, vp, {}, q_dense),
               Error);
}

// An FP8 pool: each stored (token, head) row holds the codes and scale that quantize_activation
// gives the [T * Hkv, D] matrix of all new rows with per-row scaling (the recipe), bit for
// bit; padding slots and the other slots are untouched. A zero row gets scale 1.
TEST(StoreKv, Fp8PoolHoldsTheRecipesCodesAndScales) {
  Arena arena(1 << 20);
  Context ctx{Device::cpu, &arena};
  const int64_t t = 6, hkv = 2, d = 8, blocks = 3, width = 5 * hkv * d;
  Tensor qkv = cache_values({t, width}, 5, 3.0f);
  std::fill(qkv.ptr<float>() + 4 * width, qkv.ptr<float>() + 4 * width + d, 0.0f);  // k head 0
  TensorView k(qkv.view().data, DType::f32, {t, hkv, d}), v = k;
  k.strides[0] = v.strides[0] = width;
  v.data = qkv.ptr<float>() + 3 * hkv * d;
  const std::vector<int32_t> sm = {17, -1, 0, 47, 5, -3};
  const Tensor mapping = i32(sm, {t});
  Tensor kp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f8e4m3);
  Tensor vp = Tensor::empty({blocks, kBlock, hkv, d}, DType::f8e4m3);
  Tensor ks = Tensor::empty({blocks, kBlock, hkv}, DType::f32);
  Tensor vs = Tensor::empty({blocks, kBlock, hkv}, DType::f32);
  std::memset(kp.view().data, 0x55, kp.nbytes());
  std::memset(vp.view().data, 0x55, vp.nbytes());
  std::fill(ks.ptr<float>(), ks.ptr<float>() + ks.numel(), -7.0f);
  std::fill(vs.ptr<float>(), vs.ptr<float>() + vs.numel(), -7.0f);
  ops::store_kv(ctx, k, v, mapping, kp, vp, {ks.view(), vs.view()});

  for (int kv = 0; kv < 2; ++kv) {
    Tensor rows = Tensor::empty({t * hkv, d}, DType::f32);  // the new rows, contiguous
    for (int64_t i = 0; i < t; ++i)
      std::memcpy(rows.ptr<float>() + i * hkv * d, qkv.ptr<float>() + i * width + kv * 3 * hkv * d,
                  size_t(hkv * d) * 4);
    Tensor codes = Tensor::empty({t * hkv, d}, DType::f8e4m3);
    Tensor scales = Tensor::empty({t * hkv}, DType::f32);
    quantize_activation(rows, ActScaling::token, codes, scales);
    const Tensor& pool = kv == 0 ? kp : vp;
    const Tensor& pool_scales = kv == 0 ? ks : vs;
    for (int64_t slot = 0; slot < blocks * kBlock; ++slot) {
      const auto src = std::find(sm.begin(), sm.end(), int32_t(slot));
      const int64_t tok = src - sm.begin();
      for (int64_t h = 0; h < hkv; ++h) {
        const float want_scale = src == sm.end() ? -7.0f : scales.ptr<float>()[tok * hkv + h];
        ASSERT_EQ(pool_scales.ptr<float>()[slot * hkv + h], want_scale) << "slot " << slot;
        for (int64_t i = 0; i < d; ++i) {
          const uint8_t want =
              src == sm.end() ? 0x55 : codes.ptr<uint8_t>()[(tok * hkv + h) * d + i];
          ASSERT_EQ(pool.ptr<uint8_t>()[(slot * hkv + h) * d + i], want) << "slot " << slot;
        }
      }
    }
  }
  EXPECT_EQ(ks.ptr<float>()[5 * hkv], 1.0f);  // token 4's zero key row of head 0
  // The dequantized rows are within e4m3's relative precision of the source.
  for (int64_t i = 0; i < d; ++i) {
    const float x = qkv.ptr<float>()[0 * width + i];
    const float y = e4m3_to_f32(kp.ptr<uint8_t>()[17 * hkv * d + i]) * ks.ptr<float>()[17 * hkv];
    EXPECT_LE(std::fabs(x - y), std::fabs(x) * 0.0625f + ks.ptr<float>()[17 * hkv] * 0.001953125f);
  }
  // Negative control: a scale pool of the wrong shape is refused.
  Tensor short_scales = Tensor::empty({blocks, kBlock, 1}, DType::f32);
  EXPECT_THROW(ops::store_kv(ctx, k, v, mapping, kp, vp, {short_scales.view(), vs.view()}), Error);
}

}  // namespace
