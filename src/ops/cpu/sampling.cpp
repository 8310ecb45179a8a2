// CPU reference of ops::sample (semantics in ops/sampling.h): each row on its own thread, the
// filters by a sort of the row (the CUDA kernel finds the same thresholds by radix selection).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "core/rng.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/log_softmax.h"
#include "ops/sampling.h"

namespace fp8rl::ops::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Index of the largest value, the lowest on ties (a row of -inf gives 0).
int32_t argmax(const float* x, int64_t v) {
  int64_t best = 0;
  for (int64_t i = 1; i < v; ++i)
    if (x[i] > x[best]) best = i;
  return int32_t(best);
}

// The kept set's thresholds on l (see the header), by sorting the candidate values.
// l [V]: the tempered logits, -inf for tokens never kept. order: V ints of scratch.
float top_k_threshold(const float* l, int64_t v, int32_t k, int32_t* order) {
  int64_t n = 0;
  for (int64_t i = 0; i < v; ++i)
    if (l[i] > kNegInf) order[n++] = int32_t(i);
  if (k <= 0 || k >= n) return kNegInf;
  std::nth_element(order, order + (k - 1), order + n,
                   [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  return l[order[k - 1]];
}

float top_p_threshold(const float* l, const uint64_t* w, int64_t v, float floor_l, float top_p,
                      int32_t* order) {
  int64_t n = 0;
  uint64_t total = 0;
  for (int64_t i = 0; i < v; ++i)
    if (l[i] > kNegInf && l[i] >= floor_l) {
      order[n++] = int32_t(i);
      total += w[i];
    }
  if (n == 0) return floor_l;
  std::sort(order, order + n, [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  uint64_t target = uint64_t(std::ceil(double(top_p) * double(total)));
  target = std::clamp<uint64_t>(target, 1, total);
  uint64_t cum = 0;
  for (int64_t j = 0; j < n; ++j) {
    cum += w[order[j]];
    if (cum >= target) return l[order[j]];
  }
  return l[order[n - 1]];
}

int32_t sample_row(const float* raw, int64_t v, const SampleRow& row, const int32_t* history,
                   float* work, int32_t* order, uint64_t* weights) {
  std::copy(raw, raw + v, work);
  if (row.repetition_penalty != 1.0f)
    for (int32_t j = row.history_begin; j < row.history_end; ++j) {
      const float x = raw[history[j]];  // from the raw logit: a repeated id is penalized once
      work[history[j]] = x > 0 ? x / row.repetition_penalty : x * row.repetition_penalty;
    }
  for (int32_t j = row.banned_begin; j < row.banned_end; ++j) work[history[j]] = kNegInf;
  const int32_t greedy = argmax(work, v);
  if (row.temperature == 0.0f) return greedy;

  float* l = work;  // tempered in place
  float m = kNegInf;
  for (int64_t i = 0; i < v; ++i) {
    l[i] = l[i] / row.temperature;
    m = std::max(m, l[i]);
  }
  if (m == kNegInf) return greedy;
  float floor_l = top_k_threshold(l, v, row.top_k, order);
  // e_i = exp(l_i - M) as fp32 (the CUDA kernel's expf of the same argument), and its
  // fixed-point mass.
  for (int64_t i = 0; i < v; ++i) {
    const float e = l[i] > kNegInf ? std::exp(l[i] - m) : 0.0f;
    weights[i] = uint64_t(e * kSampleMassScale);
  }
  if (row.top_p < 1.0f)
    floor_l = std::max(floor_l, top_p_threshold(l, weights, v, floor_l, row.top_p, order));
  const uint64_t key = rng_key(row.stream, uint64_t(row.position));
  int64_t best = -1;
  float best_score = kNegInf;
  for (int64_t i = 0; i < v; ++i) {
    if (!(l[i] > kNegInf) || l[i] < floor_l) continue;
    if (row.min_p > 0.0f && !(std::exp(l[i] - m) >= row.min_p)) continue;
    const float g = -std::log(-std::log(uniform01(key, uint64_t(i))));
    const float s = l[i] + g;
    if (best < 0 || s > best_score) {
      best = i;
      best_score = s;
    }
  }
  return best < 0 ? greedy : int32_t(best);
}

}  // namespace

void sample(Arena& scratch, const TensorView& logits, const TensorView& rows,
            const TensorView& history, int k, const SampleOutput& out) {
  const int64_t r = rows.dim(0), v = logits.dim(1);
  ArenaScope scope(scratch);
  // Working rows per thread, not per row: the reference needs V floats, ids and masses each.
  const int64_t nt = num_threads();
  TensorView work = scratch.alloc({nt, v}, DType::f32);
  TensorView order = scratch.alloc({nt, v}, DType::i32);
  TensorView weights = scratch.alloc({nt, v}, DType::i64);
  const auto* rs = reinterpret_cast<const SampleRow*>(rows.data);
  const int32_t* hist = history.empty() ? nullptr : history.ptr<const int32_t>();
  parallel_for(0, r, [&](int64_t i) {
    const int64_t th = thread_index();
    const SampleRow& row = rs[i];
    const float* raw = logits.ptr<const float>() + int64_t(row.logit_row) * v;
    const int32_t tok =
        sample_row(raw, v, row, hist, work.ptr<float>() + th * v, order.ptr<int32_t>() + th * v,
                   reinterpret_cast<uint64_t*>(weights.ptr<int64_t>()) + th * v);
    out.tokens.ptr<int32_t>()[i] = tok;
    const LogSoftmaxRow raw_ls = log_softmax_row(raw, v, 1.0f);
    out.logprobs.ptr<float>()[i] = raw_ls.at(raw[tok]);
    if (!out.processed_logprobs.empty()) {
      const float t = row.temperature == 0.0f ? 1.0f : row.temperature;
      out.processed_logprobs.ptr<float>()[i] = log_softmax_row(raw, v, t).at(raw[tok]);
    }
    if (k > 0) {
      int32_t* ids = out.top_ids.ptr<int32_t>() + i * k;
      int32_t* ord = order.ptr<int32_t>() + th * v;
      for (int64_t j = 0; j < v; ++j) ord[j] = int32_t(j);
      std::partial_sort(ord, ord + k, ord + v, [&](int32_t a, int32_t b) {
        return raw[a] > raw[b] || (raw[a] == raw[b] && a < b);
      });
      for (int j = 0; j < k; ++j) {
        ids[j] = ord[j];
        out.top_logprobs.ptr<float>()[i * k + j] = raw_ls.at(raw[ord[j]]);
      }
    }
  });
}

size_t sample_scratch_bytes(int64_t /*r*/, int64_t v) {
  return size_t(num_threads() * v) * (4 + 4 + 8) + 3 * 64;
}

}  // namespace fp8rl::ops::cpu
