#include "rl/reward_loss.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace fp8rl {

namespace {

// -log sigmoid(x) and its derivative -sigmoid(-x), stable for either sign of x.
double neg_log_sigmoid(double x) {
  return x >= 0 ? std::log1p(std::exp(-x)) : -x + std::log1p(std::exp(x));
}
double sigmoid(double x) {
  return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
}

}  // namespace

RewardLossResult bradley_terry_loss(std::span<const double> chosen,
                                    std::span<const double> rejected,
                                    std::span<const double> margins, std::optional<double> center) {
  const size_t p = chosen.size();
  CHECK(p > 0 && rejected.size() == p && (margins.empty() || margins.size() == p),
        "reward loss: {} chosen, {} rejected scores and {} margins do not pair up", p,
        rejected.size(), margins.size());
  RewardLossResult r;
  r.dloss_dchosen.resize(p);
  r.dloss_drejected.resize(p);
  const double n = double(p);
  r.min_reward = INFINITY;
  r.max_reward = -INFINITY;
  for (size_t i = 0; i < p; ++i) {
    const double x = chosen[i] - rejected[i] - (margins.empty() ? 0.0 : margins[i]);
    r.loss += neg_log_sigmoid(x) / n;
    const double g = -sigmoid(-x) / n;
    r.dloss_dchosen[i] = g;
    r.dloss_drejected[i] = -g;
    if (center) {
      const double s = chosen[i] + rejected[i];
      r.loss += *center * s * s / n;
      r.dloss_dchosen[i] += 2.0 * *center * s / n;
      r.dloss_drejected[i] += 2.0 * *center * s / n;
    }
    r.accuracy += (chosen[i] > rejected[i] ? 1.0 : 0.0) / n;
    r.margin += (chosen[i] - rejected[i]) / n;
    r.mean_reward += (chosen[i] + rejected[i]) / (2 * n);
    r.min_reward = std::min({r.min_reward, chosen[i], rejected[i]});
    r.max_reward = std::max({r.max_reward, chosen[i], rejected[i]});
  }
  return r;
}

}  // namespace fp8rl
