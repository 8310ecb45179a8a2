#include "rl/dpo_loss.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace fp8rl {
namespace {

// log σ(x) = -log(1 + exp(-x)), written so that neither side overflows (torch's logsigmoid
// is min(x, 0) - log1p(exp(-|x|))).
double log_sigmoid(double x) {
  return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x)));
}

// σ(x) without overflow: 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below.
double sigmoid(double x) {
  if (x >= 0.0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

}  // namespace

DpoLossType parse_dpo_loss_type(std::string_view name) {
  if (name == "sigmoid") return DpoLossType::sigmoid;
  if (name == "hinge") return DpoLossType::hinge;
  if (name == "ipo") return DpoLossType::ipo;
  if (name == "robust") return DpoLossType::robust;
  RAISE("dpo loss_type '{}' is not supported (sigmoid, hinge, ipo, robust)", name);
}

std::string_view dpo_loss_type_name(DpoLossType type) {
  switch (type) {
    case DpoLossType::sigmoid:
      return "sigmoid";
    case DpoLossType::hinge:
      return "hinge";
    case DpoLossType::ipo:
      return "ipo";
    case DpoLossType::robust:
      return "robust";
  }
  RAISE("unknown DpoLossType {}", int(type));
}

DpoLossResult dpo_loss(const DpoPairs& p, const DpoLossConfig& c) {
  const size_t n = p.policy_chosen_logp.size();
  CHECK(n >= 1, "dpo loss: no pairs");
  CHECK(p.policy_rejected_logp.size() == n && p.ref_chosen_logp.size() == n &&
            p.ref_rejected_logp.size() == n,
        "dpo loss: the four log-probability arrays need one value per pair ({})", n);
  CHECK(std::isfinite(c.beta) && c.beta > 0.0, "dpo loss: beta must be > 0, got {}", c.beta);
  CHECK(c.label_smoothing >= 0.0 && c.label_smoothing <= 0.5,
        "dpo loss: label_smoothing must lie in [0, 0.5], got {}", c.label_smoothing);
  CHECK(c.label_smoothing == 0.0 || c.loss_type == DpoLossType::sigmoid ||
            c.loss_type == DpoLossType::robust,
        "dpo loss: label_smoothing applies to the sigmoid and robust losses, not '{}'",
        dpo_loss_type_name(c.loss_type));
  CHECK(c.loss_type != DpoLossType::robust || c.label_smoothing < 0.5,
        "dpo loss: robust needs label_smoothing in [0, 0.5), got {}", c.label_smoothing);
  if (c.loss_type == DpoLossType::ipo) {
    CHECK(p.chosen_length.size() == n && p.rejected_length.size() == n,
          "dpo loss: ipo needs the completion lengths of every pair");
  }

  DpoLossResult out;
  out.dloss_dchosen_logp.assign(n, 0.0);
  out.dloss_drejected_logp.assign(n, 0.0);
  const double beta = c.beta, eps = c.label_smoothing, inv_n = 1.0 / double(n);
  double loss = 0.0;
  DpoStats& s = out.stats;
  for (size_t i = 0; i < n; ++i) {
    const double h_c = p.policy_chosen_logp[i] - p.ref_chosen_logp[i];
    const double h_r = p.policy_rejected_logp[i] - p.ref_rejected_logp[i];
    CHECK(std::isfinite(h_c) && std::isfinite(h_r), "dpo loss: pair {} has a non-finite logp", i);
    const double delta = h_c - h_r;
    // The pair's loss, and its derivative in h_c (h_r's is its negative, except for ipo's
    // different length normalisations).
    double value = 0.0, d_chosen = 0.0, d_rejected = 0.0;
    switch (c.loss_type) {
      case DpoLossType::sigmoid: {
        const double x = beta * delta;
        value = -(1.0 - eps) * log_sigmoid(x) - eps * log_sigmoid(-x);
        // d/dx -log σ(x) = -σ(-x);  d/dx -log σ(-x) = σ(x)
        d_chosen = beta * (-(1.0 - eps) * sigmoid(-x) + eps * sigmoid(x));
        d_rejected = -d_chosen;
        break;
      }
      case DpoLossType::robust: {
        const double x = beta * delta;
        value = (-(1.0 - eps) * log_sigmoid(x) + eps * log_sigmoid(-x)) / (1.0 - 2.0 * eps);
        // d/dx log σ(-x) = -σ(x)
        d_chosen = beta * (-(1.0 - eps) * sigmoid(-x) - eps * sigmoid(x)) / (1.0 - 2.0 * eps);
        d_rejected = -d_chosen;
        break;
      }
      case DpoLossType::hinge: {
        const double x = 1.0 - beta * delta;
        value = std::max(x, 0.0);
        d_chosen = x > 0.0 ? -beta : 0.0;
        d_rejected = -d_chosen;
        break;
      }
      case DpoLossType::ipo: {
        const double len_c = double(std::max<int64_t>(1, p.chosen_length[i]));
        const double len_r = double(std::max<int64_t>(1, p.rejected_length[i]));
        const double x = h_c / len_c - h_r / len_r - 1.0 / (2.0 * beta);
        value = x * x;
        d_chosen = 2.0 * x / len_c;
        d_rejected = -2.0 * x / len_r;
        break;
      }
    }
    loss += value * inv_n;
    out.dloss_dchosen_logp[i] = d_chosen * inv_n;
    out.dloss_drejected_logp[i] = d_rejected * inv_n;
    const double reward_c = beta * h_c, reward_r = beta * h_r;
    s.rewards_chosen += reward_c * inv_n;
    s.rewards_rejected += reward_r * inv_n;
    s.rewards_accuracies += (reward_c > reward_r ? 1.0 : 0.0) * inv_n;
    s.rewards_margins += (reward_c - reward_r) * inv_n;
    s.logps_chosen += p.policy_chosen_logp[i] * inv_n;
    s.logps_rejected += p.policy_rejected_logp[i] * inv_n;
  }
  out.loss = loss;
  return out;
}

}  // namespace fp8rl
