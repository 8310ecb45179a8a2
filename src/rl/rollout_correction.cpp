#include "rl/rollout_correction.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "rl/ragged.h"

namespace fp8rl {

RolloutCorrectionMode parse_rollout_correction_mode(std::string_view name) {
  if (name == "token_truncate") return RolloutCorrectionMode::token_truncate;
  if (name == "token_mask") return RolloutCorrectionMode::token_mask;
  if (name == "sequence_truncate") return RolloutCorrectionMode::sequence_truncate;
  if (name == "sequence_mask") return RolloutCorrectionMode::sequence_mask;
  RAISE(
      "vllm_importance_sampling_mode '{}' is not supported (token_truncate, token_mask, "
      "sequence_truncate, sequence_mask)",
      name);
}

std::string_view rollout_correction_mode_name(RolloutCorrectionMode mode) {
  switch (mode) {
    case RolloutCorrectionMode::token_truncate:
      return "token_truncate";
    case RolloutCorrectionMode::token_mask:
      return "token_mask";
    case RolloutCorrectionMode::sequence_truncate:
      return "sequence_truncate";
    case RolloutCorrectionMode::sequence_mask:
      return "sequence_mask";
  }
  RAISE("unknown RolloutCorrectionMode {}", int(mode));
}

RolloutCorrection compute_rollout_correction(std::span<const int64_t> offsets,
                                             std::span<const double> old_logp,
                                             std::span<const double> engine_logp,
                                             std::span<const uint8_t> mask,
                                             const RolloutCorrectionConfig& config) {
  const int64_t n = check_ragged(offsets, mask, "rollout correction");
  CHECK(int64_t(old_logp.size()) == n && int64_t(engine_logp.size()) == n,
        "rollout correction: old_logp ({}) and engine_logp ({}) need one value per token ({})",
        old_logp.size(), engine_logp.size(), n);
  const bool truncate = config.mode == RolloutCorrectionMode::token_truncate ||
                        config.mode == RolloutCorrectionMode::sequence_truncate;
  const bool per_sequence = config.mode == RolloutCorrectionMode::sequence_truncate ||
                            config.mode == RolloutCorrectionMode::sequence_mask;
  CHECK(!truncate || config.clip_min || config.clip_max,
        "vllm_importance_sampling_mode '{}' needs clip_min or clip_max",
        rollout_correction_mode_name(config.mode));
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double lo = config.clip_min.value_or(-kInf);
  const double hi = config.clip_max.value_or(kInf);
  CHECK(lo <= hi, "importance sampling clip_min {} > clip_max {}", lo, hi);
  // torch.clamp(x, min, max) is min(max(x, lo), hi); masking zeroes what lies outside.
  const auto bound = [&](double rho) {
    if (truncate) return std::min(std::max(rho, lo), hi);
    return rho < lo || rho > hi ? 0.0 : rho;
  };

  RolloutCorrection out;
  out.weight.assign(size_t(n), 1.0);
  RolloutCorrectionStats& s = out.stats;
  double diff_sum = 0.0, prob_error_sum = 0.0, ratio_sum = 0.0;
  int64_t active = 0, ratios = 0;
  s.ratio_min = kInf;
  s.ratio_max = -kInf;
  const auto add_ratio = [&](double rho) {
    s.ratio_min = std::min(s.ratio_min, rho);
    s.ratio_max = std::max(s.ratio_max, rho);
    ratio_sum += rho;
    ++ratios;
  };
  const int64_t num_sequences = int64_t(offsets.size()) - 1;
  for (int64_t i = 0; i < num_sequences; ++i) {
    double d_sum = 0.0;
    for (int64_t t = offsets[size_t(i)]; t < offsets[size_t(i + 1)]; ++t) {
      const double d = mask[size_t(t)] ? old_logp[size_t(t)] - engine_logp[size_t(t)] : 0.0;
      if (mask[size_t(t)]) {
        s.logp_difference_max = std::max(s.logp_difference_max, std::fabs(d));
        diff_sum += std::fabs(d);
        prob_error_sum += std::exp(std::fabs(d));
        ++active;
      }
      if (per_sequence) {
        d_sum += d;
      } else {
        out.weight[size_t(t)] = bound(std::exp(d));
        if (mask[size_t(t)]) add_ratio(out.weight[size_t(t)]);
      }
    }
    if (per_sequence) {
      const double rho = bound(std::exp(d_sum));
      std::fill(out.weight.begin() + offsets[size_t(i)],
                out.weight.begin() + offsets[size_t(i + 1)], rho);
      add_ratio(rho);
    }
  }
  s.logp_difference_mean = active > 0 ? diff_sum / double(active) : 0.0;
  s.token_prob_error_mean = active > 0 ? prob_error_sum / double(active) : 0.0;
  if (ratios > 0) {
    s.ratio_mean = ratio_sum / double(ratios);
  } else {
    s.ratio_min = s.ratio_max = 0.0;
  }
  return out;
}

}  // namespace fp8rl
