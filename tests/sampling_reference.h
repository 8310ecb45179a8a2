// An fp64 statement of the sampler's distribution (ops/sampling.h (a)-(d)), written from the
// formulas with sorts and cumulative sums, independently of both implementations: the
// probability of each token after penalty, ban, temperature, top-k, top-p and min-p.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "ops/sampling.h"

namespace fp8rl::test {

struct SampleReference {
  std::vector<double> p;  // [V], sums to 1 (greedy: one-hot)
  // Distance of the decisions from their boundaries: |cum mass before the top-p boundary
  // group - top_p| style margins; a token's fate may differ between fp32 and fp64 when small.
  double top_p_margin = INFINITY;
  double min_p_margin = INFINITY;
};

inline SampleReference sample_reference(const float* logits, int64_t v, const ops::SampleRow& r,
                                        const std::vector<int32_t>& history) {
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> x(logits, logits + v);
  const std::set<int32_t> seen(history.begin() + r.history_begin, history.begin() + r.history_end);
  for (int32_t id : seen) {
    const double p = r.repetition_penalty;
    x[size_t(id)] = x[size_t(id)] > 0 ? x[size_t(id)] / p : x[size_t(id)] * p;
  }
  for (int32_t j = r.banned_begin; j < r.banned_end; ++j) x[size_t(history[size_t(j)])] = ninf;
  SampleReference out;
  out.p.assign(size_t(v), 0.0);
  if (r.temperature == 0.0f) {
    out.p[size_t(std::max_element(x.begin(), x.end()) - x.begin())] = 1.0;
    return out;
  }
  for (double& e : x) e /= double(r.temperature);
  std::vector<double> sorted;
  for (double e : x)
    if (e > ninf) sorted.push_back(e);
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  double floor_l = ninf;
  if (r.top_k > 0 && size_t(r.top_k) < sorted.size()) {
    floor_l = sorted[size_t(r.top_k) - 1];
    while (!sorted.empty() && sorted.back() < floor_l) sorted.pop_back();
  }
  const double m = sorted.front();
  if (r.top_p < 1.0f) {
    double z = 0;
    for (double e : sorted) z += std::exp(e - m);
    double cum = 0;
    for (size_t j = 0; j < sorted.size(); ++j) {
      const double before = cum;
      cum += std::exp(sorted[j] - m) / z;
      if (cum >= double(r.top_p)) {
        floor_l = std::max(floor_l, sorted[j]);
        out.top_p_margin = std::min(double(r.top_p) - before, cum - double(r.top_p));
        break;
      }
    }
  }
  double z = 0;
  for (int64_t i = 0; i < v; ++i) {
    const double e = x[size_t(i)];
    if (!(e > ninf) || e < floor_l) continue;
    const double ratio = std::exp(e - m);  // p_i / p_max
    if (r.min_p > 0.0f) {
      out.min_p_margin = std::min(out.min_p_margin, std::fabs(ratio - double(r.min_p)));
      if (ratio < double(r.min_p)) continue;
    }
    out.p[size_t(i)] = ratio;
    z += ratio;
  }
  for (double& p : out.p) p /= z;
  return out;
}

// fp64 log_softmax(x / t)[i].
inline double log_softmax_ref(const float* x, int64_t v, double t, int64_t i) {
  double m = -INFINITY;
  for (int64_t j = 0; j < v; ++j) m = std::max(m, double(x[j]) / t);
  double s = 0;
  for (int64_t j = 0; j < v; ++j) s += std::exp(double(x[j]) / t - m);
  return double(x[i]) / t - m - std::log(s);
}

}  // namespace fp8rl::test
