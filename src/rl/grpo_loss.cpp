#include "rl/grpo_loss.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/nan.h"
#include "rl/ragged.h"

namespace fp8rl {
namespace {

// A loss term and its derivative with respect to one variable.
struct Term {
  double value = 0.0;
  double grad = 0.0;
};

// -min(r' A, clamp(r, 1 - lo, 1 + hi) A) and its derivative in r, with PyTorch's backward:
// clamp passes the gradient on the closed interval, minimum splits it evenly on a tie.
Term clipped_surrogate(double r, double a, double lo, double hi, std::optional<double> delta) {
  const double clipped = std::clamp(r, 1.0 - lo, 1.0 + hi);
  const double d_clipped = r >= 1.0 - lo && r <= 1.0 + hi ? 1.0 : 0.0;
  const double capped = delta ? std::min(r, *delta) : r;
  const double d_capped = !delta || r <= *delta ? 1.0 : 0.0;
  const double unclipped_term = capped * a, clipped_term = clipped * a;
  Term t;
  t.value = -std::min(unclipped_term, clipped_term);
  if (unclipped_term < clipped_term) {
    t.grad = -a * d_capped;
  } else if (unclipped_term > clipped_term) {
    t.grad = -a * d_clipped;
  } else {
    t.grad = -0.5 * a * (d_capped + d_clipped);
  }
  return t;
}

// sapo's soft gate -(4 / τ) σ(τ (r - 1)) A and its derivative in r, -4 σ (1 - σ) A. r >= 0,
// so the exponent stays above -τ and the logistic is finite.
Term soft_gate(double r, double a, double tau) {
  const double s = 1.0 / (1.0 + std::exp(-tau * (r - 1.0)));
  return {-4.0 / tau * s * a, -4.0 * s * (1.0 - s) * a};
}

// k3 = exp(ref - logp) - (ref - logp) - 1 and its derivative in logp (TRL's per-token KL estimate).
Term k3_kl(double logp, double ref) {
  const double d = ref - logp;
  return {std::exp(d) - d - 1.0, 1.0 - std::exp(d)};
}

void validate(const GrpoBatch& b, const GrpoLossConfig& c, int64_t n, int64_t num_sequences) {
  CHECK(num_sequences >= 1, "grpo loss: the micro-batch has no completions");
  CHECK(c.epsilon >= 0.0 && c.epsilon_high_value() >= 0.0,
        "grpo loss: epsilon ({}) and epsilon_high ({}) must be >= 0", c.epsilon,
        c.epsilon_high_value());
  CHECK(std::isfinite(c.beta) && c.beta >= 0.0, "grpo loss: beta must be >= 0, got {}", c.beta);
  CHECK(!c.delta || *c.delta > 0.0, "grpo loss: delta must be > 0");
  CHECK(c.sapo_temperature_neg > 0.0 && c.sapo_temperature_pos > 0.0,
        "grpo loss: sapo_temperature_neg ({}) and sapo_temperature_pos ({}) must be > 0",
        c.sapo_temperature_neg, c.sapo_temperature_pos);
  if (c.loss_type == GrpoLossType::luspo) {
    CHECK(c.importance_sampling_level == ImportanceSamplingLevel::sequence,
          "loss_type 'luspo' needs importance_sampling_level 'sequence'");
    CHECK(c.beta == 0.0, "loss_type 'luspo' takes no KL term (beta {})", c.beta);
    CHECK(b.entropy_mask.empty(), "loss_type 'luspo' takes no entropy mask");
  }
  if (c.loss_type == GrpoLossType::rloo) {
    // TRL's RLOOTrainer: the KL is in the reward, no delta, entropy mask or rollout weights.
    CHECK(c.beta == 0.0, "loss_type 'rloo' takes no KL term (beta {}): it is in the reward",
          c.beta);
    CHECK(!c.delta, "loss_type 'rloo' takes no delta");
    CHECK(b.entropy_mask.empty(), "loss_type 'rloo' takes no entropy mask");
    CHECK(b.is_weight.empty(), "loss_type 'rloo' takes no rollout correction weights");
  }
  CHECK(c.gradient_accumulation_steps >= 1, "grpo loss: gradient_accumulation_steps must be >= 1");
  CHECK(c.num_processes >= 1, "grpo loss: num_processes must be >= 1");
  if (c.loss_type == GrpoLossType::dr_grpo) {
    CHECK(c.max_completion_length >= 1, "dr_grpo needs max_completion_length >= 1");
  }
  if (c.loss_type == GrpoLossType::dapo || c.loss_type == GrpoLossType::cispo) {
    CHECK(c.num_items_in_batch >= 0,
          "loss_type '{}' needs num_items_in_batch: the generation batch's active-token count",
          grpo_loss_type_name(c.loss_type));
  }
  CHECK(int64_t(b.logp.size()) == n, "grpo loss: logp has {} values for {} tokens", b.logp.size(),
        n);
  CHECK(b.old_logp.empty() || int64_t(b.old_logp.size()) == n,
        "grpo loss: old_logp has {} values for {} tokens", b.old_logp.size(), n);
  CHECK(c.beta == 0.0 || int64_t(b.ref_logp.size()) == n,
        "grpo loss: beta != 0 needs ref_logp for {} tokens, got {}", n, b.ref_logp.size());
  CHECK(b.is_weight.empty() || int64_t(b.is_weight.size()) == n,
        "grpo loss: is_weight has {} values for {} tokens", b.is_weight.size(), n);
  CHECK(b.entropy_mask.empty() || int64_t(b.entropy_mask.size()) == n,
        "grpo loss: entropy_mask has {} values for {} tokens", b.entropy_mask.size(), n);
  CHECK(int64_t(b.advantages.size()) == num_sequences,
        "grpo loss: {} advantages for {} completions", b.advantages.size(), num_sequences);
  for (int64_t t = 0; t < n; ++t) {
    if (!b.mask[size_t(t)]) continue;
    CHECK(std::isfinite(b.logp[size_t(t)]) &&
              (b.old_logp.empty() || std::isfinite(b.old_logp[size_t(t)])) &&
              (c.beta == 0.0 || std::isfinite(b.ref_logp[size_t(t)])) &&
              (b.is_weight.empty() || std::isfinite(b.is_weight[size_t(t)])),
          "grpo loss: a log-probability or weight of active token {} is not finite", t);
  }
  for (double a : b.advantages) CHECK(std::isfinite(a), "grpo loss: an advantage is not finite");
  if (c.loss_type == GrpoLossType::luspo && !b.is_weight.empty()) {
    for (int64_t i = 0; i < num_sequences; ++i) {
      std::optional<double> first;
      for (int64_t t = b.offsets[size_t(i)]; t < b.offsets[size_t(i + 1)]; ++t) {
        if (!b.mask[size_t(t)]) continue;
        if (!first) first = b.is_weight[size_t(t)];
        CHECK(b.is_weight[size_t(t)] == *first,
              "loss_type 'luspo' needs one rollout weight per completion (a sequence_* "
              "vllm_importance_sampling_mode); completion {} has {} and {}",
              i, *first, b.is_weight[size_t(t)]);
      }
    }
  }
}

// Clip indicators of one ratio value (TRL's is_low_clipped / is_high_clipped).
struct ClipFlags {
  bool low = false;
  bool high = false;
};

}  // namespace

GrpoLossType parse_grpo_loss_type(std::string_view name) {
  if (name == "grpo") return GrpoLossType::grpo;
  if (name == "bnpo") return GrpoLossType::bnpo;
  if (name == "dr_grpo") return GrpoLossType::dr_grpo;
  if (name == "dapo") return GrpoLossType::dapo;
  if (name == "cispo") return GrpoLossType::cispo;
  if (name == "sapo") return GrpoLossType::sapo;
  if (name == "luspo") return GrpoLossType::luspo;
  if (name == "rloo") return GrpoLossType::rloo;
  RAISE("loss_type '{}' is not supported (grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, rloo)",
        name);
}

std::string_view grpo_loss_type_name(GrpoLossType type) {
  switch (type) {
    case GrpoLossType::grpo:
      return "grpo";
    case GrpoLossType::bnpo:
      return "bnpo";
    case GrpoLossType::dr_grpo:
      return "dr_grpo";
    case GrpoLossType::dapo:
      return "dapo";
    case GrpoLossType::cispo:
      return "cispo";
    case GrpoLossType::sapo:
      return "sapo";
    case GrpoLossType::luspo:
      return "luspo";
    case GrpoLossType::rloo:
      return "rloo";
  }
  RAISE("unknown GrpoLossType {}", int(type));
}

ImportanceSamplingLevel parse_importance_sampling_level(std::string_view name) {
  if (name == "token") return ImportanceSamplingLevel::token;
  if (name == "sequence") return ImportanceSamplingLevel::sequence;
  RAISE("importance_sampling_level '{}' is not supported (token, sequence)", name);
}

std::string_view importance_sampling_level_name(ImportanceSamplingLevel level) {
  switch (level) {
    case ImportanceSamplingLevel::token:
      return "token";
    case ImportanceSamplingLevel::sequence:
      return "sequence";
  }
  RAISE("unknown ImportanceSamplingLevel {}", int(level));
}

std::vector<uint8_t> top_entropy_mask(std::span<const double> entropies,
                                      std::span<const uint8_t> mask, double quantile) {
  CHECK(entropies.size() == mask.size(), "top_entropy_mask: {} entropies for {} tokens",
        entropies.size(), mask.size());
  CHECK(quantile >= 0.0 && quantile <= 1.0, "top_entropy_quantile must be in [0, 1], got {}",
        quantile);
  std::vector<double> active;
  for (size_t t = 0; t < mask.size(); ++t)
    if (mask[t]) active.push_back(entropies[t]);
  std::vector<uint8_t> out(mask.size(), 0);
  if (active.empty()) return out;
  std::sort(active.begin(), active.end());
  // torch.quantile at q = 1 - quantile: linear interpolation between the order statistics
  // around q (n - 1), with torch.lerp's two-sided form.
  const double rank = (1.0 - quantile) * double(active.size() - 1);
  const size_t below = size_t(rank);
  const size_t above = std::min(below + 1, active.size() - 1);
  const double w = rank - double(below), x0 = active[below], x1 = active[above];
  const double threshold = w < 0.5 ? x0 + w * (x1 - x0) : x1 - (x1 - x0) * (1.0 - w);
  for (size_t t = 0; t < mask.size(); ++t) out[t] = mask[t] && entropies[t] >= threshold;
  return out;
}

GrpoLossResult grpo_loss(const GrpoBatch& b, const GrpoLossConfig& c) {
  const int64_t n = check_ragged(b.offsets, b.mask, "grpo loss");
  const int64_t num_sequences = int64_t(b.offsets.size()) - 1;
  validate(b, c, n, num_sequences);
  const double lo = c.epsilon_low(), hi = c.epsilon_high_value();
  const bool cispo = c.loss_type == GrpoLossType::cispo;
  const bool sapo = c.loss_type == GrpoLossType::sapo;
  // cispo and sapo have no hard clip, so TRL logs no clip_ratio metrics for them.
  const bool clips = !cispo && !sapo;
  const bool rloo = c.loss_type == GrpoLossType::rloo;
  // rloo's ratio is the whole sequence's probability ratio (its log ratios summed); GSPO's the
  // geometric mean per token (averaged).
  const bool sequence_level =
      rloo || c.importance_sampling_level == ImportanceSamplingLevel::sequence;
  const double ga = double(c.gradient_accumulation_steps);
  const double seqs = double(num_sequences);

  int64_t total_active = 0;
  for (uint8_t m : b.mask) total_active += m;
  // The weight of one active token's L in the loss (the loss_type's aggregation); grpo's depends on
  // its completion.
  const auto aggregation = [&](int64_t active_in_sequence) {
    switch (c.loss_type) {
      case GrpoLossType::grpo:
      case GrpoLossType::sapo:
      case GrpoLossType::rloo:  // mean_i L_i, L_i spread over the completion's tokens
        return 1.0 / (seqs * double(std::max<int64_t>(1, active_in_sequence)) * ga);
      case GrpoLossType::luspo:  // mean_i(M_i L_i): the token sum of L_i / B
        return 1.0 / (seqs * ga);
      case GrpoLossType::bnpo:
        return 1.0 / (double(std::max<int64_t>(1, total_active)) * ga);
      case GrpoLossType::dr_grpo:
        return 1.0 / (seqs * double(c.max_completion_length) * ga);
      case GrpoLossType::dapo:
      case GrpoLossType::cispo:
        return 1.0 / (double(std::max<int64_t>(1, c.num_items_in_batch)) / double(c.num_processes));
    }
    RAISE("unknown GrpoLossType {}", int(c.loss_type));
  };
  const auto old_of = [&](int64_t t) {
    return b.old_logp.empty() ? b.logp[size_t(t)] : b.old_logp[size_t(t)];
  };
  const auto rho_of = [&](int64_t t) { return b.is_weight.empty() ? 1.0 : b.is_weight[size_t(t)]; };
  const auto gate_of = [&](int64_t t) {
    return b.entropy_mask.empty() || b.entropy_mask[size_t(t)] ? 1.0 : 0.0;
  };
  // The policy term of one ratio and its derivative in the ratio (cispo's is per token, below).
  const auto policy_term = [&](double r, double a) {
    if (sapo) return soft_gate(r, a, a > 0.0 ? c.sapo_temperature_pos : c.sapo_temperature_neg);
    return clipped_surrogate(r, a, lo, hi, c.delta);
  };
  // TRL's clip metrics of one ratio: the capped ratio for the clip types, the raw one for cispo.
  const auto classify = [&](double r, double a) {
    const double capped = c.delta ? std::min(r, *c.delta) : r;
    ClipFlags f;
    f.low = capped < 1.0 - lo && a < 0.0;
    f.high = cispo ? (r > hi && a > 0.0) : (capped > 1.0 + hi && a > 0.0);
    return f;
  };

  GrpoLossResult out;
  out.dloss_dlogp.assign(size_t(n), 0.0);
  double loss = 0.0, kl_sum = 0.0;
  double low_count = 0.0, high_count = 0.0, region_count = 0.0;
  double low_min = kNaN, high_max = kNaN;
  const auto track_sequence_fractions = [&](double low_fraction, double high_fraction) {
    if (std::isnan(low_fraction)) return;  // nanmin / nanmax skip empty completions
    low_min = std::isnan(low_min) ? low_fraction : std::min(low_min, low_fraction);
    high_max = std::isnan(high_max) ? high_fraction : std::max(high_max, high_fraction);
  };

  for (int64_t i = 0; i < num_sequences; ++i) {
    const int64_t begin = b.offsets[size_t(i)], end = b.offsets[size_t(i + 1)];
    const double a = b.advantages[size_t(i)];
    int64_t active = 0;
    double log_ratio_sum = 0.0;
    for (int64_t t = begin; t < end; ++t) {
      if (!b.mask[size_t(t)]) continue;
      ++active;
      log_ratio_sum += b.logp[size_t(t)] - old_of(t);
    }
    const double agg = aggregation(active);
    const double inv_active = rloo ? 1.0 : 1.0 / double(std::max<int64_t>(1, active));
    // GSPO: s_i = exp(mean_t log ratio), one ratio for the whole completion; rloo: exp(sum).
    const double s = std::exp(log_ratio_sum * inv_active);
    const Term seq_term = cispo ? Term{} : policy_term(s, a);
    // TRL's RLOO loss counts a completion without active tokens (ratio 1) in its mean too; it
    // has no gradient.
    if (rloo && active == 0) loss += seq_term.value / (seqs * ga);
    double seq_weight = 0.0;  // sum over the completion's tokens of agg * rho
    int64_t seq_low = 0, seq_high = 0;

    for (int64_t t = begin; t < end; ++t) {
      if (!b.mask[size_t(t)]) continue;
      const double logp = b.logp[size_t(t)];
      const double rho = rho_of(t) * gate_of(t);  // both scale the policy term only
      const double r = sequence_level ? s : std::exp(logp - old_of(t));
      double value = 0.0, grad = 0.0;  // of this token's L, grad in its own logp
      if (cispo) {
        const double weight = std::min(r, hi);  // torch.clamp(r, max=ε_high).detach()
        value = -weight * a * logp * rho;
        grad = -weight * a * rho;
      } else if (sequence_level) {
        value = seq_term.value * rho;
        seq_weight += agg * rho;  // its gradient goes through s_i, added below
      } else {
        const Term term = policy_term(r, a);
        value = term.value * rho;
        grad = term.grad * r * rho;  // dr/dlogp = r
      }
      if (c.beta != 0.0) {
        const Term kl = k3_kl(logp, b.ref_logp[size_t(t)]);
        value += c.beta * kl.value;
        grad += c.beta * kl.grad;
        kl_sum += kl.value;
      }
      loss += agg * value;
      out.dloss_dlogp[size_t(t)] = agg * grad;
      if (!sequence_level) {
        const ClipFlags f = classify(r, a);
        seq_low += f.low;
        seq_high += f.high;
        low_count += f.low;
        high_count += f.high;
        region_count += f.low || f.high;
      }
    }

    if (sequence_level && !cispo) {
      // d s_i / d logp_u = s_i m_u / max(1, M_i) (rloo: s_i m_u), the same for every active u.
      const double grad = seq_weight * seq_term.grad * s * inv_active;
      for (int64_t t = begin; t < end; ++t) {
        if (b.mask[size_t(t)]) out.dloss_dlogp[size_t(t)] += grad;
      }
    }
    if (sequence_level) {
      const ClipFlags f = classify(s, a);
      low_count += f.low;
      high_count += f.high;
      region_count += f.low || f.high;
      track_sequence_fractions(f.low, f.high);
    } else {
      track_sequence_fractions(active > 0 ? double(seq_low) / double(active) : kNaN,
                               active > 0 ? double(seq_high) / double(active) : kNaN);
    }
  }

  out.loss = loss;
  GrpoLossStats& st = out.stats;
  st.num_active_tokens = total_active;
  const bool divides_by_ga = c.loss_type != GrpoLossType::dapo && !cispo;
  st.policy_loss = divides_by_ga ? loss * ga : loss;
  const double active_count = double(std::max<int64_t>(1, total_active));
  if (c.beta != 0.0) st.kl = kl_sum / active_count;
  // TRL's global_masked_mean: over active tokens, or over completions for a (B, 1) ratio.
  const double clip_count = sequence_level ? seqs : active_count;
  if (!clips) {
    st.clip_ratio_low_mean = st.clip_ratio_high_mean = st.clip_ratio_region_mean = kNaN;
    st.clip_ratio_low_min = st.clip_ratio_high_max = kNaN;
    st.cispo_clip_ratio = cispo ? high_count / clip_count : kNaN;
  } else {
    st.clip_ratio_low_mean = low_count / clip_count;
    st.clip_ratio_high_mean = high_count / clip_count;
    st.clip_ratio_region_mean = region_count / clip_count;
    st.clip_ratio_low_min = low_min;
    st.clip_ratio_high_max = high_max;
    st.cispo_clip_ratio = kNaN;
  }
  return out;
}

}  // namespace fp8rl
