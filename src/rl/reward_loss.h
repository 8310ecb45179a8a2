// The reward model's loss, TRL's RewardTrainer (Bradley-Terry): for P pairs of scores
// (chosen c_i, rejected r_i) and optional margins m_i,
//   loss = mean_i -log sigmoid(c_i - r_i - m_i) + center * mean_i (c_i + r_i)^2
// (the second term only with center_rewards_coefficient set), with its derivatives and TRL's
// metrics of the batch.
#pragma once

#include <optional>
#include <span>
#include <vector>

namespace fp8rl {

struct RewardLossResult {
  double loss = 0;
  std::vector<double> dloss_dchosen, dloss_drejected;      // [P]
  double accuracy = 0;                                     // mean of [c_i > r_i]
  double margin = 0;                                       // mean of c_i - r_i
  double min_reward = 0, mean_reward = 0, max_reward = 0;  // over all 2P scores
};

// margins: [P] or empty (0); center_rewards_coefficient: nullopt is TRL's None (no term).
RewardLossResult bradley_terry_loss(std::span<const double> chosen,
                                    std::span<const double> rejected,
                                    std::span<const double> margins,
                                    std::optional<double> center_rewards_coefficient);

}  // namespace fp8rl
