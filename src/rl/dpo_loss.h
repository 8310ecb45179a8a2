// DPO's loss over a batch of preference pairs from their summed completion log-probabilities,
// with its derivative with respect to the policy's, and TRL's metrics: DPOTrainer's
// _compute_loss (TRL main 1.10.dev, f2cd5771; the loss types beyond sigmoid, hinge, ipo and
// robust as TRL main writes them with f_divergence_type, aot_unpaired and discopop_tau).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fp8rl {

// DPOConfig.loss_type (one type; TRL's lists with loss_weights are not supported).
enum class DpoLossType {
  sigmoid,
  hinge,
  ipo,
  robust,
  exo_pair,
  nca_pair,
  bco_pair,
  sppo_hard,
  aot,
  aot_unpaired,  // TRL's earlier name: aot_pair
  apo_zero,
  apo_down,
  discopop,
  sft,
};

// Every loss type, in TRL's order.
std::vector<DpoLossType> dpo_loss_types();
// Whether the type reads label_smoothing (DpoLossConfig::label_smoothing says how).
bool dpo_loss_takes_label_smoothing(DpoLossType type);
DpoLossType parse_dpo_loss_type(std::string_view name);
std::string_view dpo_loss_type_name(DpoLossType type);

struct DpoLossConfig {
  DpoLossType loss_type = DpoLossType::sigmoid;
  double beta = 0.1;
  // sigmoid: conservative DPO, -(1 - ε) log σ(βΔ) - ε log σ(-βΔ), as TRL up to 0.28 applied it
  // (TRL >= 0.29 ignores it for sigmoid and uses it in "robust"; the default 0 is the same in
  // both). robust: the flip probability, in [0, 0.5); aot, aot_unpaired: as sigmoid's; exo_pair:
  // the EXO paper's ε, which must be > 0 (TRL's loss is infinite at 0). Rejected (when non-zero)
  // for the other types, which TRL ignores it for.
  double label_smoothing = 0.0;
  double discopop_tau = 0.05;  // DiscoPOP's τ (TRL's default)
};

// One value per pair [P]: log π(y|x) summed over the completion's tokens (no length averaging),
// for the policy and the reference (ReferenceModel). The lengths (completion
// token counts) are read by ipo and sft only.
struct DpoPairs {
  std::span<const double> policy_chosen_logp;
  std::span<const double> policy_rejected_logp;
  std::span<const double> ref_chosen_logp;
  std::span<const double> ref_rejected_logp;
  std::span<const int64_t> chosen_length;
  std::span<const int64_t> rejected_length;
};

// LD-DPO (DPOConfig.ld_alpha): one completion's log-probability with the tokens beyond the
// pair's shared length (the shorter completion's token count) weighted by ld_alpha, the same
// for the policy and the reference: sum_{t < shared} logp_t + ld_alpha sum_{t >= shared} logp_t.
// Its derivative in logp_t is ld_token_weight(t, ...). ld_alpha 1 is the plain sum.
double ld_logp(std::span<const double> token_logp, int64_t shared, double ld_alpha);
inline double ld_token_weight(int64_t t, int64_t shared, double ld_alpha) {
  return t < shared ? 1.0 : ld_alpha;
}

// TRL's logged values (keys "rewards/chosen" etc.): means over the pairs of
// β (policy - ref) for chosen and rejected, of [chosen reward > rejected reward] and of their
// difference; "logps/chosen" and "logps/rejected" are the policy's mean summed logps.
struct DpoStats {
  double rewards_chosen = 0.0;
  double rewards_rejected = 0.0;
  double rewards_accuracies = 0.0;
  double rewards_margins = 0.0;
  double logps_chosen = 0.0;
  double logps_rejected = 0.0;
};

struct DpoLossResult {
  double loss = 0.0;                         // mean over the pairs
  std::vector<double> dloss_dchosen_logp;    // [P] d loss / d policy_chosen_logp
  std::vector<double> dloss_drejected_logp;  // [P] d loss / d policy_rejected_logp
  DpoStats stats;
};

// With h_c = policy_chosen - ref_chosen, h_r likewise, Δ = h_c - h_r:
//   sigmoid: -log σ(βΔ)      (with label smoothing ε: -(1 - ε) log σ(βΔ) - ε log σ(-βΔ))
//   hinge:   relu(1 - βΔ)    (SLiC; its derivative is 0 where 1 - βΔ <= 0, as torch.relu's)
//   robust:  (-(1 - ε) log σ(βΔ) + ε log σ(-βΔ)) / (1 - 2ε)   (Robust DPO, TRL's current home
//            of label_smoothing)
//   ipo:     (h_c / |y_c| - h_r / |y_r| - 1 / (2β))^2, lengths clamped to >= 1 (TRL
//            normalises IPO by the completion lengths; the metrics still use the summed h)
//   exo_pair:  σ(βΔ) (log σ(βΔ) - log(1 - ε)) + σ(-βΔ) (log σ(-βΔ) - log ε)   (EXO)
//   nca_pair:  -log σ(β h_c) - log σ(-β h_c) / 2 - log σ(-β h_r) / 2
//   bco_pair:  -log σ(β h_c) - log σ(-β h_r)
//   sppo_hard: (h_c - 1 / (2β))^2 + (h_r + 1 / (2β))^2
//   aot:       sigmoid's loss (with ε) of δ_k = sort(π_c - π_r)_k - sort(ref_c - ref_r)_k, the
//              policy's and the reference's log-ratio differences each sorted over the batch
//   aot_unpaired: the same with δ_k = sort(h_c)_k - sort(h_r)_k
//   apo_zero:  1 - σ(β h_c) + σ(β h_r);   apo_down: σ(β h_c) + 1 - σ(βΔ)
//   discopop:  -log σ(βΔ) (1 - m) + exp(-βΔ) m with m = σ(βΔ / τ) (exp(-βΔ) m as one
//              exponential: finite far below the margin, where TRL's product is inf * 0)
//   sft:       the chosen completions' token-mean negative log-likelihood, -Σ π_c / Σ |y_c|
// (TRL main's DPOTrainer._compute_loss with f_divergence_type reverse_kl). loss = mean over
// pairs. The sorts of aot are stable, so tied values keep their pairs' order. The reward
// metrics are β h_c and β h_r for every loss type.
DpoLossResult dpo_loss(const DpoPairs& pairs, const DpoLossConfig& config);

}  // namespace fp8rl
