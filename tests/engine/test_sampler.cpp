// The sampler op on the CPU (ops/sampling.h): each filter's distribution against an fp64
// statement of it (tests/sampling_reference.h) by a chi-square test over many draws, each with
// a negative control against the distribution without that filter; greedy ties, logprob
// values, top logprobs, batch independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/arena.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "ops/sampling.h"
#include "sampling_reference.h"
#include "tolerances.h"

namespace fp8rl {
namespace {

using ops::SampleRow;

struct Result {
  std::vector<int32_t> tokens, top_ids;
  std::vector<float> logprobs, processed, top_logprobs;
};

// logits [L, V] f32 host values.
Result run(const Tensor& logits, const std::vector<SampleRow>& rows,
           const std::vector<int32_t>& history, int k = 0) {
  const int64_t r = int64_t(rows.size());
  Arena arena(ops::sample_scratch_bytes(Context{}, r, logits.shape()[1]));
  Context ctx{Device::cpu, &arena};
  std::vector<SampleRow> rs = rows;
  const TensorView rows_v(rs.data(), DType::i32, {r, ops::kSampleRowWords});
  std::vector<int32_t> hist = history;
  const TensorView hist_v =
      hist.empty() ? TensorView() : TensorView(hist.data(), DType::i32, {int64_t(hist.size())});
  Result res;
  res.tokens.resize(size_t(r));
  res.logprobs.resize(size_t(r));
  res.processed.resize(size_t(r));
  res.top_ids.resize(size_t(r * k));
  res.top_logprobs.resize(size_t(r * k));
  ops::SampleOutput out;
  out.tokens = TensorView(res.tokens.data(), DType::i32, {r});
  out.logprobs = TensorView(res.logprobs.data(), DType::f32, {r});
  out.processed_logprobs = TensorView(res.processed.data(), DType::f32, {r});
  if (k > 0) {
    out.top_ids = TensorView(res.top_ids.data(), DType::i32, {r, k});
    out.top_logprobs = TensorView(res.top_logprobs.data(), DType::f32, {r, k});
  }
  ops::sample(ctx, logits, rows_v, hist_v, k, out);
  return res;
}

// Values of an integer hash of (seed, index), uniform in [-bound, bound].
Tensor random_logits(int64_t rows, int64_t v, uint64_t seed, float bound) {
  Tensor t = Tensor::empty({rows, v}, DType::f32);
  for (int64_t i = 0; i < rows * v; ++i) {
    uint64_t z = splitmix64(seed * 0x9E3779B97F4A7C15ull + uint64_t(i));
    t.ptr<float>()[i] = bound * (2.0f * float(z >> 40) / 16777216.0f - 1.0f);
  }
  return t;
}

// n draws of one row: positions 0..n-1 of one stream, all in one call.
std::vector<int64_t> draw_counts(const Tensor& logits, SampleRow row,
                                 const std::vector<int32_t>& history, int64_t n) {
  std::vector<SampleRow> rows(size_t(n), row);
  for (int64_t i = 0; i < n; ++i) rows[size_t(i)].position = row.position + i;
  const Result r = run(logits, rows, history);
  std::vector<int64_t> counts(size_t(logits.shape()[1]), 0);
  for (int32_t t : r.tokens) ++counts[size_t(t)];
  return counts;
}

// Pearson's statistic against p, with tokens merged (smallest first) into bins of expected
// count >= 5; a draw of a token of probability 0 makes it infinite.
struct Fit {
  double stat = 0;
  int dof = 0;
  bool fits() const { return stat <= test::chi_square_bound(dof); }
};
Fit chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  Fit f;
  std::vector<std::pair<double, double>> bins;  // expected, observed
  double e = 0, o = 0;
  for (size_t i : order) {
    if (p[i] == 0.0) {
      if (counts[i] > 0) f.stat = INFINITY;
      continue;
    }
    e += p[i] * double(n);
    o += double(counts[i]);
    if (e >= 5) {
      bins.push_back({e, o});
      e = o = 0;
    }
  }
  if (e > 0 || o > 0) {
    if (bins.empty()) bins.push_back({0, 0});
    bins.back().first += e;
    bins.back().second += o;
  }
  for (auto [be, bo] : bins) f.stat += (bo - be) * (bo - be) / be;
  f.dof = std::max(1, int(bins.size()) - 1);
  return f;
}

constexpr int64_t kDraws = 20000;
constexpr int64_t kVocab = 40;

// The draws of `row` fit its fp64 distribution, and do not fit the one of `control` (the
// same row without the feature under test).
void expect_distribution(const Tensor& logits, const SampleRow& row, const SampleRow& control,
                         const std::vector<int32_t>& history) {
  const float* x = logits.ptr<float>();
  const test::SampleReference ref = test::sample_reference(x, kVocab, row, history);
  // The fp32 implementation and the fp64 statement decide every boundary alike.
  ASSERT_GT(ref.top_p_margin, 1e-3);
  ASSERT_GT(ref.min_p_margin, 1e-3);
  const std::vector<int64_t> counts = draw_counts(logits, row, history, kDraws);
  const Fit fit = chi_square(counts, ref.p);
  EXPECT_TRUE(fit.fits()) << "chi2 " << fit.stat << " dof " << fit.dof << " bound "
                          << test::chi_square_bound(fit.dof);
  const Fit neg = chi_square(counts, test::sample_reference(x, kVocab, control, history).p);
  EXPECT_FALSE(neg.fits()) << "negative control fits: chi2 " << neg.stat << " dof " << neg.dof;
}

SampleRow base_row() {
  SampleRow r;
  r.stream = 0x1234abcdull;
  r.position = 1000;
  return r;
}

TEST(Sampler, TemperatureDistribution) {
  const Tensor logits = random_logits(1, kVocab, 1, 3.0f);
  SampleRow row = base_row(), control = base_row();
  row.temperature = 0.6f;
  expect_distribution(logits, row, control, {});
  // T = 1 as a distribution of its own.
  control.temperature = 1.7f;
  expect_distribution(logits, base_row(), control, {});
}

TEST(Sampler, TopKDistribution) {
  Tensor logits = random_logits(1, kVocab, 2, 1.5f);
  logits.ptr<float>()[2] = 1.8f;
  logits.ptr<float>()[7] = logits.ptr<float>()[11] = 1.6f;  // a tie at the 2nd / 3rd place
  SampleRow row = base_row(), control = base_row();
  row.top_k = 6;
  expect_distribution(logits, row, control, {});
  row.top_k = 2;  // the tie with the k-th value is kept: three tokens
  int kept = 0;
  for (double p : test::sample_reference(logits.ptr<float>(), kVocab, row, {}).p) kept += p > 0;
  EXPECT_EQ(kept, 3);
  expect_distribution(logits, row, control, {});
}

TEST(Sampler, TopPDistribution) {
  const Tensor logits = random_logits(1, kVocab, 3, 3.0f);
  SampleRow row = base_row(), control = base_row();
  row.top_p = 0.7f;
  expect_distribution(logits, row, control, {});
  row.top_p = 0.3f;
  row.temperature = 0.8f;
  control.temperature = 0.8f;
  expect_distribution(logits, row, control, {});
}

TEST(Sampler, MinPDistribution) {
  const Tensor logits = random_logits(1, kVocab, 4, 3.0f);
  SampleRow row = base_row(), control = base_row();
  row.min_p = 0.1f;
  expect_distribution(logits, row, control, {});
}

TEST(Sampler, RepetitionPenaltyDistribution) {
  Tensor logits = random_logits(1, kVocab, 5, 2.0f);
  float* x = logits.ptr<float>();
  x[3] = 2.5f;   // the most likely token, positive: divided
  x[9] = -0.5f;  // negative: multiplied
  x[20] = 1.0f;
  const std::vector<int32_t> history = {3, 9, 3, 20, 3};  // 3 repeated: penalized once
  SampleRow row = base_row(), control = base_row();
  row.repetition_penalty = 1.8f;
  row.history_end = control.history_end = int32_t(history.size());
  control.repetition_penalty = 1.0f;
  expect_distribution(logits, row, control, history);
  // Penalizing the repeated id once per occurrence is a different distribution.
  Tensor twice = Tensor::empty(logits.shape(), DType::f32);
  std::memcpy(twice.ptr<float>(), x, logits.nbytes());
  twice.ptr<float>()[3] = 2.5f / 1.8f / 1.8f;
  const std::vector<int32_t> once = {3, 9, 20};
  SampleRow twice_row = row;
  twice_row.history_end = int32_t(once.size());
  const std::vector<int64_t> counts = draw_counts(logits, row, history, kDraws);
  EXPECT_FALSE(
      chi_square(counts, test::sample_reference(twice.ptr<float>(), kVocab, twice_row, once).p)
          .fits());
}

TEST(Sampler, CombinedDistribution) {
  const Tensor logits = random_logits(1, kVocab, 6, 4.0f);
  const std::vector<int32_t> history = {1, 2, 3, 4, 5, 6};
  SampleRow row = base_row(), control = base_row();
  row.temperature = 0.8f;
  row.top_k = 12;
  row.top_p = 0.9f;
  row.min_p = 0.05f;
  row.repetition_penalty = 1.3f;
  row.history_end = int32_t(history.size());
  control.temperature = 0.8f;
  expect_distribution(logits, row, control, history);
}

TEST(Sampler, BannedIdsDistribution) {
  Tensor logits = random_logits(1, kVocab, 7, 2.0f);
  logits.ptr<float>()[0] = 3.0f;                      // eos, the likeliest
  logits.ptr<float>()[5] = 2.9f;                      // a stop id
  const std::vector<int32_t> history = {8, 9, 0, 5};  // prompt 8 9, banned 0 5
  SampleRow row = base_row(), control = base_row();
  row.banned_begin = 2;
  row.banned_end = 4;
  row.top_k = 3;  // the ban comes first: top-3 of what is left
  control.top_k = 3;
  expect_distribution(logits, row, control, history);
  const std::vector<int64_t> counts = draw_counts(logits, row, history, 2000);
  EXPECT_EQ(counts[0] + counts[5], 0);
}

TEST(Sampler, GreedyLowestIndexOnTies) {
  Tensor logits = random_logits(2, 64, 8, 1.0f);
  float* x = logits.ptr<float>();
  x[17] = x[41] = x[63] = 5.0f;
  x[64 + 30] = 2.0f;
  x[64 + 12] = 4.0f;
  std::vector<SampleRow> rows(4);
  for (SampleRow& r : rows) {
    r.temperature = 0.0f;
    r.top_k = 1;  // filters do not matter when greedy
    r.top_p = 0.1f;
  }
  const std::vector<int32_t> history = {17, 12};
  rows[1].banned_begin = 0;  // 17 banned: the next of the tie
  rows[1].banned_end = 1;
  rows[2].logit_row = 1;
  rows[3].logit_row = 1;  // penalty 2.5 on 12: 4 / 2.5 < 2, so 30 wins
  rows[3].repetition_penalty = 2.5f;
  rows[3].history_begin = 1;
  rows[3].history_end = 2;
  const Result r = run(logits, rows, history);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{17, 41, 12, 30}));
}

TEST(Sampler, LogprobsAgainstFp64) {
  constexpr int64_t v = 1000;
  const Tensor logits = random_logits(3, v, 9, 8.0f);
  const float temps[] = {0.0f, 0.7f, 1.0f, 1.5f};
  std::vector<SampleRow> rows;
  for (int l = 0; l < 3; ++l)
    for (float t : temps) {
      SampleRow r = base_row();
      r.logit_row = l;
      r.temperature = t;
      r.top_k = 50;
      r.repetition_penalty = 1.2f;  // neither affects the reported logprobs
      r.history_end = 3;
      r.position = int64_t(rows.size());
      rows.push_back(r);
    }
  const Result res = run(logits, rows, {1, 2, 3});
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* x = logits.ptr<float>() + rows[i].logit_row * v;
    const int64_t tok = res.tokens[i];
    const double t = rows[i].temperature == 0.0f ? 1.0 : rows[i].temperature;
    const double raw = test::log_softmax_ref(x, v, 1.0, tok);
    const double processed = test::log_softmax_ref(x, v, t, tok);
    const double bound_raw = test::sample_logprob_bound(8.0, std::fabs(raw), v);
    const double bound_proc = test::sample_logprob_bound(8.0 / t, std::fabs(processed), v);
    EXPECT_NEAR(res.logprobs[i], raw, bound_raw) << i;
    EXPECT_NEAR(res.processed[i], processed, bound_proc) << i;
    if (t != 1.0) {  // the two are different quantities when T != 1 (negative control)
      EXPECT_GT(std::fabs(double(res.processed[i]) - raw), 10 * bound_raw) << i;
    } else {
      EXPECT_NEAR(res.processed[i], res.logprobs[i], bound_raw) << i;
    }
  }
}

TEST(Sampler, TopLogprobsOrderAndValues) {
  constexpr int64_t v = 500;
  Tensor logits = random_logits(2, v, 10, 3.0f);
  float* x = logits.ptr<float>();
  x[200] = x[20] = 6.0f;  // tie at the top: 20 first
  x[7] = 5.0f;
  x[300] = x[30] = x[3] = 4.0f;
  constexpr int k = 6;
  std::vector<SampleRow> rows(2);
  rows[1].logit_row = 1;
  const Result res = run(logits, rows, {}, k);
  EXPECT_EQ(std::vector<int32_t>(res.top_ids.begin(), res.top_ids.begin() + k),
            (std::vector<int32_t>{20, 200, 7, 3, 30, 300}));
  for (int64_t r = 0; r < 2; ++r) {
    const float* xr = x + r * v;
    std::vector<int32_t> order(v);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return xr[a] > xr[b]; });
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(res.top_ids[size_t(r * k + j)], order[size_t(j)]);
      const double ref = test::log_softmax_ref(xr, v, 1.0, order[size_t(j)]);
      EXPECT_NEAR(res.top_logprobs[size_t(r * k + j)], ref,
                  test::sample_logprob_bound(6.0, std::fabs(ref), v));
      if (j > 0) {
        EXPECT_LE(res.top_logprobs[size_t(r * k + j)], res.top_logprobs[size_t(r * k + j - 1)]);
      }
    }
  }
}

// A row's token and logprobs do not depend on the other rows of the call, their order or the
// thread count.
TEST(Sampler, BatchIndependence) {
  constexpr int64_t v = 300;
  const Tensor logits = random_logits(3, v, 11, 5.0f);
  const std::vector<int32_t> history = {4, 5, 6, 7, 8, 9, 1, 2};
  std::vector<SampleRow> rows;
  for (int i = 0; i < 12; ++i) {
    SampleRow r = base_row();
    r.logit_row = i % 3;
    r.stream = 77 + uint64_t(i / 3);
    r.position = 10 + i;
    r.temperature = i % 4 == 0 ? 0.0f : 0.5f + 0.1f * float(i);
    r.top_k = i % 3 == 1 ? 20 : 0;
    r.top_p = i % 2 ? 0.8f : 1.0f;
    r.min_p = i % 5 == 2 ? 0.1f : 0.0f;
    r.repetition_penalty = i % 3 == 2 ? 1.5f : 1.0f;
    r.history_end = 6;
    r.banned_begin = 6;
    r.banned_end = i % 2 ? 8 : 6;
    rows.push_back(r);
  }
  const Result all = run(logits, rows, history, 3);
  std::vector<SampleRow> reversed(rows.rbegin(), rows.rend());
  reversed.insert(reversed.begin() + 5, rows[0]);  // an extra row in the middle
  set_num_threads(1);
  const Result rev = run(logits, reversed, history, 3);
  set_num_threads(0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Result one = run(logits, {rows[i]}, history, 3);
    const size_t j = rows.size() - 1 - i + (rows.size() - 1 - i >= 5 ? 1 : 0);
    for (const Result* o : {&one, &rev}) {
      const size_t at = o == &one ? 0 : j;
      EXPECT_EQ(o->tokens[at], all.tokens[i]) << i;
      EXPECT_EQ(o->logprobs[at], all.logprobs[i]) << i;
      EXPECT_EQ(o->processed[at], all.processed[i]) << i;
      for (int q = 0; q < 3; ++q) EXPECT_EQ(o->top_ids[at * 3 + q], all.top_ids[i * 3 + q]);
    }
  }
  // The noise does depend on the position: moving every position changes some draws.
  std::vector<SampleRow> moved = rows;
  for (SampleRow& r : moved) r.position += 1;
  const Result m = run(logits, moved, history, 3);
  int changed = 0;
  for (size_t i = 0; i < rows.size(); ++i) changed += m.tokens[i] != all.tokens[i];
  EXPECT_GT(changed, 0);
}

TEST(Sampler, RejectsBadOperands) {
  const Tensor logits = random_logits(1, 10, 12, 1.0f);
  std::vector<SampleRow> rows(1);
  rows[0].logit_row = 1;
  EXPECT_THROW(run(logits, rows, {}), Error);
  rows[0].logit_row = 0;
  rows[0].history_end = 2;
  EXPECT_THROW(run(logits, rows, {1}), Error);      // range past the history
  EXPECT_THROW(run(logits, rows, {1, 10}), Error);  // id outside the vocabulary
  rows[0].history_end = 0;
  EXPECT_THROW(run(logits, rows, {}, 21), Error);
  EXPECT_NO_THROW(run(logits, rows, {}, 10));
}

}  // namespace
}  // namespace fp8rl
