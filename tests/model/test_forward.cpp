// One forward for prefill, decode steps and batches: the same math whichever way tokens arrive.
#include <gtest/gtest.h>

#include "model_test_util.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;

namespace {

// Prefill `split` tokens, then one decode step per remaining token; logits of every token.
Tensor prefill_then_decode(const Model& m, const std::vector<int32_t>& ids, size_t split,
                           bool bf16_activations = false) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  ctx.bf16_activations = bf16_activations;
  KvCache cache(m.config(), int64_t(ids.size()));
  const int64_t v = m.config().vocab_size;
  Tensor all = Tensor::empty({int64_t(ids.size()), v}, DType::f32);
  size_t done = 0;
  while (done < ids.size()) {
    const size_t n = done == 0 ? split : 1;
    std::vector<int32_t> tok(ids.begin() + long(done), ids.begin() + long(done + n));
    const std::vector<int32_t> pos = positions_from(n, int32_t(done));
    SequenceInput seq{tok, pos, &cache};
    forward(ctx, m, nullptr, {&seq, 1}, LogitRows::all,
            all.view().slice_rows(int64_t(done), int64_t(done + n)));
    done += n;
  }
  EXPECT_EQ(cache.length(), int64_t(ids.size()));
  return all;
}

// The last parameter: the CPU's emulation of bf16 activations (Context::bf16_activations),
// whose roundings are per element and whose attention works per query row, so it keeps the
// invariance.
class DecodeEqualsPrefill
    : public ::testing::TestWithParam<std::tuple<std::string, Fp8Scheme, bool>> {};

TEST_P(DecodeEqualsPrefill, SameLogits) {
  const auto& [arch, scheme, bf16] = GetParam();
  const Model m = load_model(golden_dir(arch), scheme);
  const std::vector<int32_t> ids = golden_ids(arch);  // 32 tokens: past the sliding window
  const Tensor full = prefill_logits(m, ids, bf16);
  const Tensor stepped = prefill_then_decode(m, ids, 5, bf16);
  // The GEMM is batch-invariant and every other op works per token: bit-identical.
  EXPECT_EQ(rel_max_diff(stepped, full), 0.0);
}

// Row and block scaling are per token: decode steps see exactly the prefill's numbers. Tensor
// scaling couples all tokens of a forward through one amax, so it is excluded by design.
INSTANTIATE_TEST_SUITE_P(
    Archs, DecodeEqualsPrefill,
    ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "mistral", "gemma3"),
                       ::testing::Values(Fp8Scheme::off, Fp8Scheme::row, Fp8Scheme::block),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::string(scheme_name(std::get<1>(info.param))) +
             (std::get<2>(info.param) ? "_bf16" : "");
    });

class BatchOfSequences : public ::testing::TestWithParam<bool> {};

TEST_P(BatchOfSequences, EqualsSeparateRuns) {
  const bool bf16 = GetParam();
  const Model m = load_model(golden_dir("gemma3"), Fp8Scheme::row);
  const std::vector<int32_t> a = golden_ids("gemma3");
  const std::vector<int32_t> b(a.begin() + 3, a.begin() + 20);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  ctx.bf16_activations = bf16;
  KvPool pool(m.config(), 16, ctx);
  KvCache ca(pool, 64), cb(pool, 64);
  const std::vector<int32_t> pa = positions_from(a.size()), pb = positions_from(b.size());
  SequenceInput batch[2] = {{a, pa, &ca}, {b, pb, &cb}};
  const int64_t v = m.config().vocab_size;
  Tensor logits = Tensor::empty({int64_t(a.size() + b.size()), v}, DType::f32);
  forward(ctx, m, nullptr, batch, LogitRows::all, logits);
  const double bound = 0.0;  // batch-invariant: bit-identical (see DecodeEqualsPrefill)
  EXPECT_LE(
      rel_max_diff(logits.view().slice_rows(0, int64_t(a.size())), prefill_logits(m, a, bf16)),
      bound);
  EXPECT_LE(rel_max_diff(logits.view().slice_rows(int64_t(a.size()), int64_t(a.size() + b.size())),
                         prefill_logits(m, b, bf16)),
            bound);

  // LogitRows::last gives each sequence's last row.
  KvCache ca2(pool, 64), cb2(pool, 64);
  SequenceInput batch2[2] = {{a, pa, &ca2}, {b, pb, &cb2}};
  Tensor last = Tensor::empty({2, v}, DType::f32);
  forward(ctx, m, nullptr, batch2, LogitRows::last, last);
  EXPECT_LE(rel_max_diff(last.view().slice_rows(0, 1),
                         logits.view().slice_rows(int64_t(a.size()) - 1, int64_t(a.size()))),
            bound);
  EXPECT_LE(rel_max_diff(last.view().slice_rows(1, 2),
                         logits.view().slice_rows(int64_t(a.size() + b.size()) - 1,
                                                  int64_t(a.size() + b.size()))),
            bound);
}

INSTANTIATE_TEST_SUITE_P(Activations, BatchOfSequences, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "bf16" : "f32"; });

// The CPU's emulation of CUDA's bf16 activations against the exact fp32 forward: close (the
// roundings kCudaBf16Logits counts, no more), not equal (the roundings happen), deterministic.
class Bf16Activations : public ::testing::TestWithParam<std::tuple<std::string, Fp8Scheme>> {};

TEST_P(Bf16Activations, CloseToF32AndDeterministic) {
  const auto& [arch, scheme] = GetParam();
  const Model m = load_model(golden_dir(arch), scheme);
  const std::string sname(scheme_name(scheme));
  const std::vector<int32_t> ids = golden_ids(arch, sname);
  const Tensor f32 = prefill_logits(m, ids);
  const Tensor bf16 = prefill_logits(m, ids, true);
  EXPECT_EQ(rel_max_diff(prefill_logits(m, ids, true), bf16), 0.0);  // deterministic
  double bound = kBf16EmulationLogits;
  if (scheme != Fp8Scheme::off)
    bound = cuda_fp8_logits_bound(
        rel_max_diff(f32, prefill_logits(load_model(golden_dir(arch), Fp8Scheme::off), ids)));
  const double err = rel_max_diff(bf16, f32);
  EXPECT_LE(err, bound) << arch << " " << sname;
  EXPECT_GT(err, 0.0) << "bf16_activations changed nothing";
  // FP8 top-1 may move with the flips (the CUDA-vs-CPU FP8 runs show 0.75..1 on these goldens).
  if (scheme == Fp8Scheme::off) {
    EXPECT_GE(top1_agreement(bf16, f32), 0.9);
  }
  std::printf("%s %s bf16-emulation vs f32 rel_max_diff %.3g (bound %.3g) top1 %.3f\n",
              arch.c_str(), sname.c_str(), err, bound, top1_agreement(bf16, f32));
}

INSTANTIATE_TEST_SUITE_P(Archs, Bf16Activations,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "mistral",
                                                              "gemma3"),
                                            ::testing::Values(Fp8Scheme::off, Fp8Scheme::tensor,
                                                              Fp8Scheme::row, Fp8Scheme::block)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::string(scheme_name(std::get<1>(info.param)));
                         });

TEST(Forward, RejectsBadInput) {
  const Model m = load_model(golden_dir("llama"), Fp8Scheme::off);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  KvCache cache(m.config(), 4);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5}, pos = positions_from(5);
  Tensor logits = Tensor::empty({5, m.config().vocab_size}, DType::f32);
  SequenceInput seq{ids, pos, &cache};
  try {
    forward(ctx, m, nullptr, {&seq, 1}, LogitRows::all, logits);
    FAIL() << "overflowing the KV cache must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit the KV cache"), std::string::npos);
  }
  KvCache big(m.config(), 8);
  const std::vector<int32_t> bad = {1, 100000};
  const std::vector<int32_t> pos2 = positions_from(2);
  SequenceInput seq2{bad, pos2, &big};
  Tensor l2 = Tensor::empty({2, m.config().vocab_size}, DType::f32);
  try {
    forward(ctx, m, nullptr, {&seq2, 1}, LogitRows::all, l2);
    FAIL() << "an id outside the vocabulary must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos);
  }
}

}  // namespace
