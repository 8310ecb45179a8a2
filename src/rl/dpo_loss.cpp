#include "rl/dpo_loss.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

namespace {

struct LossName {
  DpoLossType type;
  std::string_view name;
};
constexpr LossName kLossNames[] = {
    {DpoLossType::sigmoid, "sigmoid"},   {DpoLossType::hinge, "hinge"},
    {DpoLossType::ipo, "ipo"},           {DpoLossType::robust, "robust"},
    {DpoLossType::exo_pair, "exo_pair"}, {DpoLossType::nca_pair, "nca_pair"},
    {DpoLossType::bco_pair, "bco_pair"}, {DpoLossType::sppo_hard, "sppo_hard"},
    {DpoLossType::aot, "aot"},           {DpoLossType::aot_unpaired, "aot_unpaired"},
    {DpoLossType::apo_zero, "apo_zero"}, {DpoLossType::apo_down, "apo_down"},
    {DpoLossType::discopop, "discopop"}, {DpoLossType::sft, "sft"},
};

// The conservative sigmoid loss of x = βδ and its derivative in δ (sigmoid, aot).
void smoothed_sigmoid(double beta, double eps, double delta, double& value, double& d_delta) {
  const double x = beta * delta;
  value = -(1.0 - eps) * log_sigmoid(x) - eps * log_sigmoid(-x);
  // d/dx -log σ(x) = -σ(-x);  d/dx -log σ(-x) = σ(x)
  d_delta = beta * (-(1.0 - eps) * sigmoid(-x) + eps * sigmoid(x));
}

// The indices that sort v ascending, ties in index order.
std::vector<size_t> sorting_order(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  return order;
}

}  // namespace

bool dpo_loss_takes_label_smoothing(DpoLossType t) {
  return t == DpoLossType::sigmoid || t == DpoLossType::robust || t == DpoLossType::exo_pair ||
         t == DpoLossType::aot || t == DpoLossType::aot_unpaired;
}

std::vector<DpoLossType> dpo_loss_types() {
  std::vector<DpoLossType> types;
  for (const LossName& l : kLossNames) types.push_back(l.type);
  return types;
}

DpoLossType parse_dpo_loss_type(std::string_view name) {
  if (name == "aot_pair") return DpoLossType::aot_unpaired;
  std::string names;
  for (const LossName& l : kLossNames) {
    if (l.name == name) return l.type;
    names += (names.empty() ? "" : ", ") + std::string(l.name);
  }
  RAISE("dpo loss_type '{}' is not supported ({})", name, names);
}

std::string_view dpo_loss_type_name(DpoLossType type) {
  for (const LossName& l : kLossNames)
    if (l.type == type) return l.name;
  RAISE("unknown DpoLossType {}", int(type));
}

double ld_logp(std::span<const double> token_logp, int64_t shared, double ld_alpha) {
  double shared_sum = 0.0, tail_sum = 0.0;
  for (size_t t = 0; t < token_logp.size(); ++t)
    (int64_t(t) < shared ? shared_sum : tail_sum) += token_logp[t];
  return shared_sum + ld_alpha * tail_sum;
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
  CHECK(c.label_smoothing == 0.0 || dpo_loss_takes_label_smoothing(c.loss_type),
        "dpo loss: label_smoothing applies to the sigmoid, robust, exo_pair, aot and aot_unpaired "
        "losses, not '{}'",
        dpo_loss_type_name(c.loss_type));
  CHECK(c.loss_type != DpoLossType::robust || c.label_smoothing < 0.5,
        "dpo loss: robust needs label_smoothing in [0, 0.5), got {}", c.label_smoothing);
  CHECK(c.loss_type != DpoLossType::exo_pair || c.label_smoothing > 0.0,
        "dpo loss: exo_pair needs label_smoothing > 0 (the EXO paper's ε, e.g. 1e-3)");
  CHECK(
      c.loss_type != DpoLossType::discopop || (std::isfinite(c.discopop_tau) && c.discopop_tau > 0),
      "dpo loss: discopop_tau must be > 0, got {}", c.discopop_tau);
  if (c.loss_type == DpoLossType::ipo || c.loss_type == DpoLossType::sft) {
    CHECK(p.chosen_length.size() == n && p.rejected_length.size() == n,
          "dpo loss: {} needs the completion lengths of every pair",
          dpo_loss_type_name(c.loss_type));
  }

  DpoLossResult out;
  out.dloss_dchosen_logp.assign(n, 0.0);
  out.dloss_drejected_logp.assign(n, 0.0);
  const double beta = c.beta, eps = c.label_smoothing, inv_n = 1.0 / double(n);
  std::vector<double> h_c(n), h_r(n);
  DpoStats& s = out.stats;
  for (size_t i = 0; i < n; ++i) {
    h_c[i] = p.policy_chosen_logp[i] - p.ref_chosen_logp[i];
    h_r[i] = p.policy_rejected_logp[i] - p.ref_rejected_logp[i];
    CHECK(std::isfinite(h_c[i]) && std::isfinite(h_r[i]) && std::isfinite(p.policy_chosen_logp[i]),
          "dpo loss: pair {} has a non-finite logp", i);
    const double reward_c = beta * h_c[i], reward_r = beta * h_r[i];
    s.rewards_chosen += reward_c * inv_n;
    s.rewards_rejected += reward_r * inv_n;
    s.rewards_accuracies += (reward_c > reward_r ? 1.0 : 0.0) * inv_n;
    s.rewards_margins += (reward_c - reward_r) * inv_n;
    s.logps_chosen += p.policy_chosen_logp[i] * inv_n;
    s.logps_rejected += p.policy_rejected_logp[i] * inv_n;
  }

  // The losses that couple the pairs: aot's sorted differences, sft's token mean.
  if (c.loss_type == DpoLossType::aot || c.loss_type == DpoLossType::aot_unpaired) {
    const bool paired = c.loss_type == DpoLossType::aot;
    std::vector<double> chosen(n), rejected(n);  // aot: policy and reference log-ratio gaps
    for (size_t i = 0; i < n; ++i) {
      chosen[i] = paired ? p.policy_chosen_logp[i] - p.policy_rejected_logp[i] : h_c[i];
      rejected[i] = paired ? p.ref_chosen_logp[i] - p.ref_rejected_logp[i] : h_r[i];
    }
    const std::vector<size_t> oc = sorting_order(chosen), orr = sorting_order(rejected);
    for (size_t k = 0; k < n; ++k) {
      double value = 0.0, d_delta = 0.0;
      smoothed_sigmoid(beta, eps, chosen[oc[k]] - rejected[orr[k]], value, d_delta);
      out.loss += value * inv_n;
      // δ_k rises with pair oc[k]'s policy chosen logp and falls with its rejected one (aot:
      // the reference side has no gradient); aot_unpaired: with pair orr[k]'s rejected one.
      out.dloss_dchosen_logp[oc[k]] += d_delta * inv_n;
      (paired ? out.dloss_drejected_logp[oc[k]] : out.dloss_drejected_logp[orr[k]]) -=
          d_delta * inv_n;
    }
    return out;
  }
  if (c.loss_type == DpoLossType::sft) {
    double logp = 0.0;
    int64_t tokens = 0;
    for (size_t i = 0; i < n; ++i) {
      logp += p.policy_chosen_logp[i];
      tokens += p.chosen_length[i];
    }
    CHECK(tokens > 0, "dpo loss: sft needs chosen completions with tokens");
    out.loss = -logp / double(tokens);
    for (size_t i = 0; i < n; ++i) out.dloss_dchosen_logp[i] = -1.0 / double(tokens);
    return out;
  }

  for (size_t i = 0; i < n; ++i) {
    const double delta = h_c[i] - h_r[i], x = beta * delta;
    const double a = beta * h_c[i], b = beta * h_r[i];
    // The pair's loss, and its derivatives in h_c and h_r.
    double value = 0.0, d_chosen = 0.0, d_rejected = 0.0;
    switch (c.loss_type) {
      case DpoLossType::sigmoid:
        smoothed_sigmoid(beta, eps, delta, value, d_chosen);
        d_rejected = -d_chosen;
        break;
      case DpoLossType::robust:
        value = (-(1.0 - eps) * log_sigmoid(x) + eps * log_sigmoid(-x)) / (1.0 - 2.0 * eps);
        // d/dx log σ(-x) = -σ(x)
        d_chosen = beta * (-(1.0 - eps) * sigmoid(-x) - eps * sigmoid(x)) / (1.0 - 2.0 * eps);
        d_rejected = -d_chosen;
        break;
      case DpoLossType::hinge: {
        const double m = 1.0 - x;
        value = std::max(m, 0.0);
        d_chosen = m > 0.0 ? -beta : 0.0;
        d_rejected = -d_chosen;
        break;
      }
      case DpoLossType::ipo: {
        const double len_c = double(std::max<int64_t>(1, p.chosen_length[i]));
        const double len_r = double(std::max<int64_t>(1, p.rejected_length[i]));
        const double m = h_c[i] / len_c - h_r[i] / len_r - 1.0 / (2.0 * beta);
        value = m * m;
        d_chosen = 2.0 * m / len_c;
        d_rejected = -2.0 * m / len_r;
        break;
      }
      case DpoLossType::exo_pair: {
        const double qw = sigmoid(x), ql = sigmoid(-x);
        value = qw * (log_sigmoid(x) - std::log1p(-eps)) + ql * (log_sigmoid(-x) - std::log(eps));
        // d/dx = qw ql (log qw - log(1 - ε) - log ql + log ε), and log qw - log ql = x.
        d_chosen = beta * qw * ql * (x - std::log1p(-eps) + std::log(eps));
        d_rejected = -d_chosen;
        break;
      }
      case DpoLossType::nca_pair:
        value = -log_sigmoid(a) - 0.5 * log_sigmoid(-a) - 0.5 * log_sigmoid(-b);
        d_chosen = beta * (-sigmoid(-a) + 0.5 * sigmoid(a));
        d_rejected = 0.5 * beta * sigmoid(b);
        break;
      case DpoLossType::bco_pair:
        value = -log_sigmoid(a) - log_sigmoid(-b);
        d_chosen = -beta * sigmoid(-a);
        d_rejected = beta * sigmoid(b);
        break;
      case DpoLossType::sppo_hard: {
        const double w = h_c[i] - 0.5 / beta, l = h_r[i] + 0.5 / beta;
        value = w * w + l * l;
        d_chosen = 2.0 * w;
        d_rejected = 2.0 * l;
        break;
      }
      case DpoLossType::apo_zero:
        value = 1.0 - sigmoid(a) + sigmoid(b);
        d_chosen = -beta * sigmoid(a) * sigmoid(-a);
        d_rejected = beta * sigmoid(b) * sigmoid(-b);
        break;
      case DpoLossType::apo_down: {
        const double gx = beta * sigmoid(x) * sigmoid(-x);
        value = sigmoid(a) + 1.0 - sigmoid(x);
        d_chosen = beta * sigmoid(a) * sigmoid(-a) - gx;
        d_rejected = gx;
        break;
      }
      case DpoLossType::discopop: {
        const double tau = c.discopop_tau, m = sigmoid(x / tau);
        const double dm = m * (1.0 - m) / tau;  // dm/dx
        // e^-x m and e^-x dm/dx as exponentials of sums: at very negative x, e^-x overflows
        // while m vanishes faster (TRL's product is then inf * 0 = NaN; the limit is 0).
        const double em = std::exp(-x + log_sigmoid(x / tau));
        const double edm = std::exp(-x + log_sigmoid(x / tau) + log_sigmoid(-x / tau)) / tau;
        value = -log_sigmoid(x) * (1.0 - m) + em;
        const double dx = -sigmoid(-x) * (1.0 - m) + log_sigmoid(x) * dm - em + edm;
        d_chosen = beta * dx;
        d_rejected = -d_chosen;
        break;
      }
      case DpoLossType::aot:
      case DpoLossType::aot_unpaired:
      case DpoLossType::sft:
        break;  // above
    }
    out.loss += value * inv_n;
    out.dloss_dchosen_logp[i] = d_chosen * inv_n;
    out.dloss_drejected_logp[i] = d_rejected * inv_n;
  }
  return out;
}

}  // namespace fp8rl
