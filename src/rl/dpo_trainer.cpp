#include "rl/dpo_trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "core/wall_clock.h"
#include "ops/backward.h"
#include "ops/memory.h"
#include "rl/dpo_loss.h"
#include "train/batch_loop.h"
#include "train/logprob_pass.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"
#include "train/train_step.h"
#include "train/training_arguments.h"

namespace fp8rl {

namespace {

// Pairs [i...] packed as 2 sequences each (chosen, then rejected); targets on the completions.
struct Packed {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0};
  std::vector<std::pair<int64_t, int64_t>> span;  // [2P] packed target positions [begin, end)
};

Packed pack(const std::vector<PreferencePair>& pairs, std::span<const size_t> idx) {
  Packed p;
  for (size_t i : idx)
    for (const std::vector<int32_t>* c : {&pairs[i].chosen, &pairs[i].rejected}) {
      const std::vector<int32_t>& prompt = pairs[i].prompt;
      const int64_t start = int64_t(p.ids.size());
      p.ids.insert(p.ids.end(), prompt.begin(), prompt.end());
      p.ids.insert(p.ids.end(), c->begin(), c->end() - 1);
      p.targets.resize(p.ids.size(), ops::kIgnoreIndex);
      const int64_t first = start + int64_t(prompt.size()) - 1;
      for (size_t j = 0; j < c->size(); ++j) p.targets[size_t(first) + j] = (*c)[j];
      p.span.emplace_back(first, first + int64_t(c->size()));
      p.cu.push_back(int64_t(p.ids.size()));
    }
  return p;
}

using Span = std::pair<int64_t, int64_t>;

// The pair's shared length: LD-DPO weights the tokens beyond it (ld_logp).
int64_t shared_length(Span chosen, Span rejected) {
  return std::min(chosen.second - chosen.first, rejected.second - rejected.first);
}

// A completion's log-probability: its tokens' sum, LD-DPO-weighted when ld_alpha is set.
double completion_logp(std::span<const float> v, Span s, int64_t shared,
                       std::optional<double> ld_alpha) {
  const std::vector<double> logp(v.begin() + s.first, v.begin() + s.second);
  if (ld_alpha) return ld_logp(logp, shared, *ld_alpha);
  double sum = 0;  // the plain sum, in token order
  for (double x : logp) sum += x;
  return sum;
}

// The loss's inputs for the packed pairs `idx` after a pass whose per-token logprobs are
// `logprobs`: the policy's completion logprobs, the cached reference ones, the lengths.
struct PairValues {
  std::vector<double> policy_chosen, policy_rejected, ref_chosen, ref_rejected;
  std::vector<int64_t> chosen_length, rejected_length;
  DpoPairs view() const {
    return {policy_chosen, policy_rejected, ref_chosen,
            ref_rejected,  chosen_length,   rejected_length};
  }
};

PairValues pair_values(std::span<const float> logprobs, const Packed& p,
                       std::span<const size_t> idx, const std::vector<double>& ref_chosen,
                       const std::vector<double>& ref_rejected, std::optional<double> ld_alpha) {
  PairValues v;
  for (size_t k = 0; k < idx.size(); ++k) {
    const Span c = p.span[2 * k], r = p.span[2 * k + 1];
    const int64_t shared = shared_length(c, r);
    v.policy_chosen.push_back(completion_logp(logprobs, c, shared, ld_alpha));
    v.policy_rejected.push_back(completion_logp(logprobs, r, shared, ld_alpha));
    v.ref_chosen.push_back(ref_chosen[idx[k]]);
    v.ref_rejected.push_back(ref_rejected[idx[k]]);
    v.chosen_length.push_back(c.second - c.first);
    v.rejected_length.push_back(r.second - r.first);
  }
  return v;
}

}  // namespace

struct DpoTrainer::Impl {
  Context& ctx;
  const Model& model;
  LoraAdapter& adapter;
  std::vector<PreferencePair> pairs;
  DpoConfig cfg;
  std::string base_model_name;
  std::unique_ptr<TrainStep> train_step;
  std::unique_ptr<LoraAdapter> reference_adapter;  // the frozen starting one, or null: the base
  std::unique_ptr<LogprobPass> pass;
  int64_t total_steps = 0, batches_per_epoch = 0;
  std::vector<double> ref_chosen, ref_rejected;  // [pairs] reference summed logps (NaN: not yet)
  std::vector<PreferencePair> eval_pairs;
  std::vector<double> eval_ref_chosen, eval_ref_rejected;  // [eval_pairs], as ref_chosen
  int64_t epoch = 0, batch = 0;

  Impl(Context& c, const Model& m, LoraAdapter& a, std::vector<PreferencePair> p,
       const DpoConfig& d, std::string base)
      : ctx(c),
        model(m),
        adapter(a),
        pairs(std::move(p)),
        cfg(d),
        base_model_name(std::move(base)) {
    cfg.validate();
    CHECK(!pairs.empty(), "dpo: the dataset has no pairs");
    batches_per_epoch = (int64_t(pairs.size()) + cfg.per_device_train_batch_size - 1) /
                        cfg.per_device_train_batch_size;
    const int64_t steps_per_epoch =
        std::max<int64_t>(1, (batches_per_epoch + cfg.gradient_accumulation_steps - 1) /
                                 cfg.gradient_accumulation_steps);
    total_steps = cfg.max_steps > 0
                      ? cfg.max_steps
                      : int64_t(std::ceil(cfg.num_train_epochs * double(steps_per_epoch)));
    train_step =
        std::make_unique<TrainStep>(make_optimizer(cfg, adapter.master_params().numel(), ctx),
                                    train_step_config(cfg, total_steps));
    pass = std::make_unique<LogprobPass>(ctx, model, &adapter);
    reference_adapter = starting_adapter(cfg, cfg.reference_model, model, ctx);
    pass->set_reference(reference_adapter.get());
    ref_chosen.assign(pairs.size(), std::nan(""));
    ref_rejected.assign(pairs.size(), std::nan(""));
  }

  PassOptions pass_options() const {
    PassOptions o;
    o.checkpointing = cfg.gradient_checkpointing;
    o.offload = cfg.activation_offloading;
    o.lora_dropout = float(cfg.training_lora_dropout());
    return o;
  }

  PassPlan largest_plan() {
    std::vector<size_t> order(pairs.size());
    std::iota(order.begin(), order.end(), size_t(0));
    auto tokens = [&](size_t i) {
      return 2 * pairs[i].prompt.size() + pairs[i].chosen.size() + pairs[i].rejected.size();
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return tokens(a) > tokens(b); });
    order.resize(std::min(order.size(), size_t(cfg.per_device_train_batch_size)));
    const Packed p = pack(pairs, order);
    return pass->plan({p.ids, p.targets, p.cu}, pass_options());
  }

  std::vector<size_t> batch_indices(int64_t e, int64_t b) const {
    std::vector<size_t> order(pairs.size());
    std::iota(order.begin(), order.end(), size_t(0));
    const uint64_t stream = rng_key(uint64_t(cfg.seed), uint64_t(e) + 0xd90);
    for (size_t i = order.size(); i > 1; --i)
      std::swap(order[i - 1], order[size_t(uniform01(stream, i) * float(i)) % i]);
    const size_t first = size_t(b * cfg.per_device_train_batch_size);
    const size_t last = std::min(order.size(), first + size_t(cfg.per_device_train_batch_size));
    return std::vector<size_t>(order.begin() + ptrdiff_t(first), order.begin() + ptrdiff_t(last));
  }

  // The reference's summed logps of these pairs (reference_model: the frozen start or the base),
  // once each.
  void reference(std::span<const size_t> idx) {
    reference_of(pairs, idx, ref_chosen, ref_rejected);
  }
  void reference_of(const std::vector<PreferencePair>& of, std::span<const size_t> idx,
                    std::vector<double>& chosen, std::vector<double>& rejected) {
    std::vector<size_t> missing;
    for (size_t i : idx)
      if (std::isnan(chosen[i])) missing.push_back(i);
    if (missing.empty()) return;
    const Packed p = pack(of, missing);
    PassOptions o;
    o.reference = true;
    pass->forward({p.ids, p.targets, p.cu}, o);
    for (size_t k = 0; k < missing.size(); ++k) {
      const int64_t shared = shared_length(p.span[2 * k], p.span[2 * k + 1]);
      chosen[missing[k]] = completion_logp(pass->logprobs(), p.span[2 * k], shared, cfg.ld_alpha);
      rejected[missing[k]] =
          completion_logp(pass->logprobs(), p.span[2 * k + 1], shared, cfg.ld_alpha);
    }
  }

  DpoLossConfig loss_config() const {
    DpoLossConfig lc;
    lc.loss_type = cfg.loss_type;
    lc.beta = cfg.beta;
    lc.label_smoothing = cfg.label_smoothing;
    lc.discopop_tau = cfg.discopop_tau;
    return lc;
  }

  nlohmann::json evaluate() {
    const auto t0 = Clock::now();
    const DpoLossConfig lc = loss_config();
    PassOptions o = pass_options();
    o.lora_dropout = 0.0f;  // evaluation mode
    double loss = 0;
    DpoStats sum{};
    int64_t batches = 0;
    const size_t per_batch = size_t(cfg.per_device_eval_batch_size);
    for (size_t first = 0; first < eval_pairs.size(); first += per_batch) {
      std::vector<size_t> idx(std::min(per_batch, eval_pairs.size() - first));
      std::iota(idx.begin(), idx.end(), first);
      reference_of(eval_pairs, idx, eval_ref_chosen, eval_ref_rejected);
      const Packed p = pack(eval_pairs, idx);
      pass->forward({p.ids, p.targets, p.cu}, o);
      const PairValues values =
          pair_values(pass->logprobs(), p, idx, eval_ref_chosen, eval_ref_rejected, cfg.ld_alpha);
      const DpoLossResult res = dpo_loss(values.view(), lc);
      loss += res.loss * double(idx.size());
      sum.rewards_chosen += res.stats.rewards_chosen;
      sum.rewards_rejected += res.stats.rewards_rejected;
      sum.rewards_accuracies += res.stats.rewards_accuracies;
      sum.rewards_margins += res.stats.rewards_margins;
      sum.logps_chosen += res.stats.logps_chosen;
      sum.logps_rejected += res.stats.logps_rejected;
      ++batches;
    }
    const double n = double(batches);
    return {{"eval_loss", finite_or_null(loss / double(eval_pairs.size()))},
            {"eval_rewards/chosen", finite_or_null(sum.rewards_chosen / n)},
            {"eval_rewards/rejected", finite_or_null(sum.rewards_rejected / n)},
            {"eval_rewards/accuracies", finite_or_null(sum.rewards_accuracies / n)},
            {"eval_rewards/margins", finite_or_null(sum.rewards_margins / n)},
            {"eval_logps/chosen", finite_or_null(sum.logps_chosen / n)},
            {"eval_logps/rejected", finite_or_null(sum.logps_rejected / n)},
            {"eval_runtime", seconds_since(t0)}};
  }

  void run(const std::function<void(const DpoStepInfo&)>& on_step, const StopRequest& stop) {
    CHECK(!cfg.evaluates() || !eval_pairs.empty(),
          "dpo: eval_strategy = {}{} but no eval pairs were given",
          eval_strategy_name(cfg.eval_strategy), cfg.eval_on_start ? " with eval_on_start" : "");
    const DpoLossConfig lc = loss_config();
    DpoStats mean{};
    int64_t tokens = 0;
    BatchLoopHooks hooks;
    hooks.evaluate = [&] { return evaluate(); };
    hooks.begin_step = [&] {
      mean = DpoStats{};
      tokens = 0;
    };
    hooks.micro_step = [&](const DataPosition& at, uint64_t dropout_seed, const TensorView& grads,
                           double ga) {
      const std::vector<size_t> idx = batch_indices(at.epoch, at.batch);
      reference(idx);
      const Packed p = pack(pairs, idx);
      PassOptions o = pass_options();
      o.dropout_seed = dropout_seed;
      pass->forward({p.ids, p.targets, p.cu}, o);
      tokens += int64_t(p.ids.size());
      const PairValues values =
          pair_values(pass->logprobs(), p, idx, ref_chosen, ref_rejected, cfg.ld_alpha);
      const DpoLossResult res = dpo_loss(values.view(), lc);
      std::vector<float> dlogprob(p.ids.size(), 0.0f);
      const double alpha = cfg.ld_alpha.value_or(1.0);
      for (size_t k = 0; k < idx.size(); ++k) {
        const Span c = p.span[2 * k], rj = p.span[2 * k + 1];
        const int64_t shared = shared_length(c, rj);
        for (int64_t t = c.first; t < c.second; ++t)
          dlogprob[size_t(t)] =
              float(res.dloss_dchosen_logp[k] / ga * ld_token_weight(t - c.first, shared, alpha));
        for (int64_t t = rj.first; t < rj.second; ++t)
          dlogprob[size_t(t)] = float(res.dloss_drejected_logp[k] / ga *
                                      ld_token_weight(t - rj.first, shared, alpha));
      }
      pass->backward(dlogprob, grads);
      mean.rewards_chosen += res.stats.rewards_chosen;
      mean.rewards_rejected += res.stats.rewards_rejected;
      mean.rewards_accuracies += res.stats.rewards_accuracies;
      mean.rewards_margins += res.stats.rewards_margins;
      mean.logps_chosen += res.stats.logps_chosen;
      mean.logps_rejected += res.stats.logps_rejected;
      return res.loss / ga;
    };
    hooks.add_metrics = [&](nlohmann::json& line, int64_t micro, double seconds) {
      const double n = double(micro);
      line["rewards/chosen"] = mean.rewards_chosen / n;
      line["rewards/rejected"] = mean.rewards_rejected / n;
      line["rewards/accuracies"] = mean.rewards_accuracies / n;
      line["rewards/margins"] = mean.rewards_margins / n;
      line["logps/chosen"] = mean.logps_chosen / n;
      line["logps/rejected"] = mean.logps_rejected / n;
      line["tokens_per_second"] = double(tokens) / seconds;
    };
    if (on_step)
      hooks.on_step = [&](const nlohmann::json& line, double loss, double seconds, bool evaluated) {
        on_step({line["step"].get<int64_t>(), total_steps, loss,
                 line["rewards/accuracies"].get<double>(), line["rewards/margins"].get<double>(),
                 seconds, evaluated, number_or_nan(line, "eval_loss"),
                 number_or_nan(line, "eval_rewards/accuracies")});
      };
    DataPosition at{epoch, batch};
    run_batch_loop(
        {cfg, ctx, model, adapter, *train_step, base_model_name, total_steps, batches_per_epoch},
        at, hooks, stop);
    epoch = at.epoch;
    batch = at.batch;
  }
};

DpoTrainer::DpoTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
                       std::vector<PreferencePair> pairs, const DpoConfig& config,
                       std::string base_model_name)
    : impl_(std::make_unique<Impl>(ctx, model, adapter, std::move(pairs), config,
                                   std::move(base_model_name))) {}
DpoTrainer::~DpoTrainer() = default;
PassPlan DpoTrainer::plan() {
  return impl_->largest_plan();
}

size_t DpoTrainer::optimizer_state_bytes() const {
  return impl_->train_step->optimizer().state_bytes();
}

size_t DpoTrainer::reference_adapter_bytes() const {
  return impl_->reference_adapter ? impl_->reference_adapter->nbytes() : 0;
}

int64_t DpoTrainer::total_steps() const {
  return impl_->total_steps;
}
void DpoTrainer::set_eval_data(std::vector<PreferencePair> eval_pairs) {
  CHECK(!eval_pairs.empty(), "dpo: the eval dataset has no pairs");
  impl_->eval_ref_chosen.assign(eval_pairs.size(), std::nan(""));
  impl_->eval_ref_rejected.assign(eval_pairs.size(), std::nan(""));
  impl_->eval_pairs = std::move(eval_pairs);
}

nlohmann::json DpoTrainer::evaluate() {
  CHECK(!impl_->eval_pairs.empty(), "dpo: no eval pairs to evaluate on");
  return impl_->evaluate();
}

void DpoTrainer::run(const std::function<void(const DpoStepInfo&)>& on_step,
                     const StopRequest& stop) {
  impl_->run(on_step, stop);
}

}  // namespace fp8rl
