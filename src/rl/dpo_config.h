// `fp8rl dpo`'s configuration: TRL's DPOConfig keys fp8rl implements, by TRL's names, with
// TRL's meanings and defaults (trl/trainer/dpo_config.py), on top of the shared
// TrainingArguments and model/LoRA keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "rl/dpo_loss.h"
#include "rl/reference_model.h"
#include "train/model_arguments.h"
#include "train/training_arguments.h"

namespace fp8rl {

// With Δ = (logπ(y_c) − logπ_ref(y_c)) − (logπ(y_r) − logπ_ref(y_r)):
// sigmoid −log σ(βΔ) (with label_smoothing ε: cDPO, −(1−ε) log σ(βΔ) − ε log σ(−βΔ)),
// ipo (Δ̄ − 1/(2β))² on length-normalised log-ratios, hinge relu(1 − βΔ), and TRL's other
// loss types (rl/dpo_loss.h).

struct DpoConfig : TrainingArguments, ModelArguments {
  DpoConfig() {  // DPOConfig's overrides
    learning_rate = 1e-6;
    disable_dropout = true;
  }

  double beta = 0.1;
  ReferenceModel reference_model = ReferenceModel::start;  // the reference's log-probs
  DpoLossType loss_type = DpoLossType::sigmoid;
  // cDPO's ε, the probability that a preference label is flipped: sigmoid (as in TRL before
  // the `robust` loss took it over), robust, aot, aot_unpaired; exo_pair's ε (must be > 0).
  double label_smoothing = 0.0;
  double discopop_tau = 0.05;  // DiscoPOP's τ (loss_type discopop), TRL's default
  // LD-DPO: tokens beyond the shorter completion's length count ld_alpha times in both
  // completions' log-probabilities, the policy's and the reference's (dpo_loss.h ld_logp);
  // null: off (the plain sums). In [0, 1].
  std::optional<double> ld_alpha;
  int64_t max_length = 1024;  // tokens of prompt + completion
  // TRL up to 0.2x (keeping the prompt's last tokens); removed since. fp8rl keeps it as a
  // limit: null: none.
  std::optional<int64_t> max_prompt_length = 512;
  // TRL truncates silently; fp8rl makes a row over a limit an error unless this is set
  // (prompt: keeps its last tokens; prompt + completion: the first max_length tokens).
  bool truncation = false;

  // Throws fp8rl::Error naming the key, its value and the allowed range.
  void validate() const;
};

}  // namespace fp8rl
