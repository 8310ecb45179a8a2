#include "rl/online_dpo.h"

#include <cmath>
#include <limits>

#include "core/check.h"

namespace fp8rl {

double OnlineDpoOptions::beta_at(double epoch) const {
  CHECK(!beta.empty(), "online dpo: beta is an empty list");
  const double e = std::floor(std::max(epoch, 0.0));
  return e < double(beta.size()) ? beta[size_t(e)] : beta.back();
}

std::vector<double> apply_missing_eos_penalty(std::span<const double> rewards,
                                              std::span<const uint8_t> contain_eos,
                                              std::optional<double> penalty) {
  CHECK(rewards.size() == contain_eos.size(),
        "online dpo: {} rewards and {} end-of-sequence flags (one each per completion)",
        rewards.size(), contain_eos.size());
  std::vector<double> out(rewards.begin(), rewards.end());
  if (penalty)
    for (size_t c = 0; c < out.size(); ++c)
      if (!contain_eos[c]) out[c] -= *penalty;
  return out;
}

std::vector<std::pair<std::string, double>> OnlineDpoStats::named() const {
  return {{"objective/kl", kl},
          {"objective/entropy", entropy},
          {"objective/non_score_reward", non_score_reward},
          {"objective/rlhf_reward", rlhf_reward},
          {"objective/scores", scores},
          {"objective/scores_margin", scores_margin},
          {"rewards/chosen", dpo.rewards_chosen},
          {"rewards/rejected", dpo.rewards_rejected},
          {"rewards/accuracies", dpo.rewards_accuracies},
          {"rewards/margins", dpo.rewards_margins},
          {"logps/chosen", dpo.logps_chosen},
          {"logps/rejected", dpo.logps_rejected},
          {"val/contain_eos_token", contain_eos_token},
          {"beta", beta}};
}

OnlineDpoLossResult online_dpo_loss(const OnlineDpoBatch& b, DpoLossType loss_type, double beta,
                                    int64_t gradient_accumulation_steps) {
  CHECK(loss_type == DpoLossType::sigmoid || loss_type == DpoLossType::ipo,
        "online dpo: loss_type must be sigmoid or ipo, got {}", dpo_loss_type_name(loss_type));
  CHECK(gradient_accumulation_steps >= 1, "online dpo: gradient_accumulation_steps must be >= 1");
  const size_t completions = b.rewards.size();
  CHECK(completions % 2 == 0 && completions > 0 && b.offsets.size() == completions + 1 &&
            b.contain_eos.size() == completions,
        "online dpo: a batch holds two completions per prompt ({} rewards, {} offsets)",
        completions, b.offsets.size());
  const size_t n = size_t(b.offsets.back());
  CHECK(b.logp.size() == n && b.ref_logp.size() == n,
        "online dpo: {} tokens, {} policy and {} reference log-probabilities", n, b.logp.size(),
        b.ref_logp.size());
  OnlineDpoLossResult out;
  out.dloss_dlogp.assign(n, 0.0);
  OnlineDpoStats& s = out.stats;
  s.beta = beta;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Per completion: the summed log-probabilities of the policy and the reference.
  std::vector<double> sum(completions, 0.0), ref_sum(completions, 0.0);
  double finite_rewards = 0;
  for (size_t c = 0; c < completions; ++c) {
    for (int64_t k = b.offsets[c]; k < b.offsets[c + 1]; ++k) {
      sum[c] += b.logp[size_t(k)];
      ref_sum[c] += b.ref_logp[size_t(k)];
    }
    const double kl = sum[c] - ref_sum[c];
    s.kl += kl;
    s.entropy -= sum[c];
    s.non_score_reward -= beta * kl;
    s.contain_eos_token += b.contain_eos[c];
    if (std::isfinite(b.rewards[c])) {
      s.scores += b.rewards[c];
      s.rlhf_reward += b.rewards[c] - beta * kl;
      ++finite_rewards;
    }
  }
  const double inv_c = 1.0 / double(completions);
  s.kl *= inv_c;
  s.entropy *= inv_c;
  s.non_score_reward *= inv_c;
  s.contain_eos_token *= inv_c;
  s.scores = finite_rewards > 0 ? s.scores / finite_rewards : nan;
  s.rlhf_reward = finite_rewards > 0 ? s.rlhf_reward / finite_rewards : nan;

  // TRL's mask = first_half >= second_half: the first completion is chosen unless the second
  // scores higher.
  std::vector<double> pc, pr, rc, rr;
  double margin = 0;
  for (size_t i = 0; i < completions / 2; ++i) {
    const size_t a = 2 * i, z = 2 * i + 1;
    if (!std::isfinite(b.rewards[a]) || !std::isfinite(b.rewards[z])) continue;
    const bool first = b.rewards[a] >= b.rewards[z];
    out.chosen.push_back(first ? a : z);
    out.rejected.push_back(first ? z : a);
    margin += b.rewards[out.chosen.back()] - b.rewards[out.rejected.back()];
    pc.push_back(sum[out.chosen.back()]);
    pr.push_back(sum[out.rejected.back()]);
    rc.push_back(ref_sum[out.chosen.back()]);
    rr.push_back(ref_sum[out.rejected.back()]);
  }
  s.pairs = int64_t(out.chosen.size());
  if (s.pairs == 0) {
    s.scores_margin = nan;
    s.dpo = {nan, nan, nan, nan, nan, nan};
    return out;
  }
  s.scores_margin = margin / double(s.pairs);
  // IPO on summed log-probabilities: dpo_loss's length normalisation with every length 1.
  const std::vector<int64_t> ones(pc.size(), 1);
  DpoLossConfig dc;
  dc.loss_type = loss_type;
  dc.beta = beta;
  const DpoLossResult d = dpo_loss({pc, pr, rc, rr, ones, ones}, dc);
  s.dpo = d.stats;
  const double scale = 1.0 / double(gradient_accumulation_steps);
  out.loss = d.loss * scale;
  // A completion's summed log-probability has derivative 1 in each of its tokens.
  for (size_t p = 0; p < out.chosen.size(); ++p) {
    for (int64_t k = b.offsets[out.chosen[p]]; k < b.offsets[out.chosen[p] + 1]; ++k)
      out.dloss_dlogp[size_t(k)] = d.dloss_dchosen_logp[p] * scale;
    for (int64_t k = b.offsets[out.rejected[p]]; k < b.offsets[out.rejected[p] + 1]; ++k)
      out.dloss_dlogp[size_t(k)] = d.dloss_drejected_logp[p] * scale;
  }
  return out;
}

}  // namespace fp8rl
