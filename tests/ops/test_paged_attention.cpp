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

#include "ops/memory.h"
#include "ops/ops.h"

using namespace fp8rl;

namespace {

constexpr int64_t kBlock = 16;

// Uniform values in [-bound, bound], rounded to bf16 (what a CUDA cache holds).
Tensor bf16_values(Shape s, uint64_t seed, float bound) {
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

bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

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
      kc.push_back(bf16_values({seqs[i].context, c.hkv, c.d}, seed + 10 * i + 1, 2.0f));
      vc.push_back(bf16_values({seqs[i].context, c.hkv, c.d}, seed + 10 * i + 2, 1.0f));
      q.push_back(bf16_values({seqs[i].queries, c.hq, c.d}, seed + 10 * i + 3, 2.0f));
    }
    q_all = bf16_values({rows + padding, c.hq, c.d}, seed + 7, 2.0f);
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
    Tensor out = bf16_values({rows + padding, c.hq, c.d}, 99, 5.0f);  // padding rows: garbage
    ops::paged_attention(ctx, q_all, k_pool, v_pool, meta, params(), out);
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
  Tensor out = bf16_values({b.rows + b.padding, 4, 32}, 5, 5.0f);
  ops::paged_attention(ctx, b.q_all, b.k_pool, b.v_pool, b.meta, b.params(), out, amax);
  float mx = 0;
  for (int64_t i = 0; i < out.numel(); ++i) mx = std::max(mx, std::fabs(out.ptr<float>()[i]));
  EXPECT_EQ(amax.ptr<float>()[0], mx);
  for (int64_t i = b.rows * 4 * 32; i < out.numel(); ++i) ASSERT_EQ(out.ptr<float>()[i], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Rounding, PagedAttention, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "bf16" : "exact"; });

// store_kv writes each token's Hkv*D values to its slot from a strided source (a slice of a
// fused qkv buffer), skips negative slots, and touches nothing else.
TEST(StoreKv, PlacesRowsAtTheirSlotsAndSkipsPadding) {
  Arena arena(1 << 20);
  Context ctx{Device::cpu, &arena};
  const int64_t t = 6, hkv = 2, d = 8, blocks = 3, width = 5 * hkv * d;
  const Tensor qkv = bf16_values({t, width}, 3, 1.0f);
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

}  // namespace
