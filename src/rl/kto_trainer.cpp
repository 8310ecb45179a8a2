#include "rl/kto_trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <span>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "core/wall_clock.h"
#include "ops/backward.h"
#include "ops/memory.h"
#include "rl/kto_loss.h"
#include "train/batch_loop.h"
#include "train/logprob_pass.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"
#include "train/train_step.h"
#include "train/training_arguments.h"

namespace fp8rl {

namespace {

using Span = std::pair<int64_t, int64_t>;

// Examples [i...] packed as one sequence each (prompt + completion), then, with the KL
// estimate, one each of prompt + the KL partner's completion; targets on the completions.
struct KtoPacked {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0};
  std::vector<Span> span, kl_span;  // packed target positions [begin, end)
  int64_t main_tokens = 0;          // prompt + completion tokens of the main sequences
};

// The completion tokens a sequence keeps under max_length (the reader made the prompt shorter).
size_t kept(const std::vector<int32_t>& prompt, const std::vector<int32_t>& completion,
            int64_t max_length) {
  return std::min(completion.size(), size_t(max_length) - prompt.size());
}

Span add_sequence(KtoPacked& p, const std::vector<int32_t>& prompt,
                  const std::vector<int32_t>& completion, int64_t max_length) {
  const size_t n = kept(prompt, completion, max_length);
  const int64_t start = int64_t(p.ids.size());
  p.ids.insert(p.ids.end(), prompt.begin(), prompt.end());
  p.ids.insert(p.ids.end(), completion.begin(), completion.begin() + ptrdiff_t(n) - 1);
  p.targets.resize(p.ids.size(), ops::kIgnoreIndex);
  const int64_t first = start + int64_t(prompt.size()) - 1;
  for (size_t j = 0; j < n; ++j) p.targets[size_t(first) + j] = completion[j];
  p.cu.push_back(int64_t(p.ids.size()));
  return {first, first + int64_t(n)};
}

KtoPacked pack(const std::vector<UnpairedExample>& of, std::span<const size_t> idx, bool with_kl,
               int64_t max_length, int64_t kl_batch) {
  KtoPacked p;
  for (size_t i : idx) {
    p.span.push_back(add_sequence(p, of[i].prompt, of[i].completion, max_length));
    p.main_tokens +=
        int64_t(of[i].prompt.size() + kept(of[i].prompt, of[i].completion, max_length));
  }
  if (with_kl)
    for (size_t i : idx) {
      const size_t j = size_t(kto_kl_partner(int64_t(i), int64_t(of.size()), kl_batch));
      p.kl_span.push_back(add_sequence(p, of[i].prompt, of[j].completion, max_length));
    }
  return p;
}

double span_sum(std::span<const float> v, Span s) {
  double sum = 0;  // in token order
  for (int64_t t = s.first; t < s.second; ++t) sum += v[size_t(t)];
  return sum;
}

// TRL's _metrics: each batch appends its values, a log averages each key's values (a key no
// batch appended is not logged).
class MetricMeans {
 public:
  void add(const std::string& key, double v) {
    auto& [sum, count] = values_[key];
    sum += v;
    ++count;
  }
  void write(nlohmann::json& line, const std::string& prefix) const {
    for (const auto& [key, v] : values_) {
      const double mean = v.first / double(v.second);
      line[prefix + key] = finite_or_null(mean);
    }
  }

 private:
  std::map<std::string, std::pair<double, int64_t>> values_;
};

// The values TRL's _compute_loss appends for one batch.
void add_batch_metrics(MetricMeans& m, const KtoStats& s, double kl, double entropy) {
  m.add("kl", kl);
  m.add("entropy", entropy);
  if (s.num_chosen > 0) {
    m.add("rewards/chosen", s.rewards_chosen / double(s.num_chosen));
    m.add("logps/chosen", s.logps_chosen / double(s.num_chosen));
  }
  if (s.num_rejected > 0) {
    m.add("rewards/rejected", s.rewards_rejected / double(s.num_rejected));
    m.add("logps/rejected", s.logps_rejected / double(s.num_rejected));
  }
  if (s.num_chosen > 0 && s.num_rejected > 0)
    m.add("rewards/margins",
          s.rewards_chosen / double(s.num_chosen) - s.rewards_rejected / double(s.num_rejected));
}

}  // namespace

int64_t kto_kl_partner(int64_t i, int64_t n, int64_t batch_size) {
  CHECK(i >= 0 && i < n && batch_size > 0, "kto_kl_partner: example {} of {}, batch {}", i, n,
        batch_size);
  const int64_t first = i / batch_size * batch_size;
  const int64_t last = std::min(n, first + batch_size) - 1;
  return i == first ? last : i - 1;
}

int64_t kto_sequence_length(const UnpairedExample& example, const std::vector<int32_t>& completion,
                            int64_t max_length) {
  return int64_t(example.prompt.size() + kept(example.prompt, completion, max_length));
}

struct KtoTrainer::Impl {
  Context& ctx;
  const Model& model;
  LoraAdapter& adapter;
  std::vector<UnpairedExample> examples;
  KtoConfig cfg;
  bool with_kl;
  std::string base_model_name;
  std::unique_ptr<TrainStep> train_step;
  std::unique_ptr<LoraAdapter> reference_adapter;  // the frozen starting one, or null: the base
  std::unique_ptr<LogprobPass> pass;
  int64_t total_steps = 0, batches_per_epoch = 0;
  // [examples] the reference's summed logps of the example's sequence and of its KL sequence
  // (NaN: not yet); the eval set's likewise.
  std::vector<double> ref_logp, ref_kl_logp;
  std::vector<UnpairedExample> eval_examples;
  std::vector<double> eval_ref_logp, eval_ref_kl_logp;
  int64_t epoch = 0, batch = 0, num_tokens = 0;

  Impl(Context& c, const Model& m, LoraAdapter& a, std::vector<UnpairedExample> e,
       const KtoConfig& k, std::string base)
      : ctx(c),
        model(m),
        adapter(a),
        examples(std::move(e)),
        cfg(k),
        with_kl(kto_loss_uses_kl(k.loss_type)),
        base_model_name(std::move(base)) {
    cfg.validate();
    CHECK(!examples.empty(), "kto: the dataset has no examples");
    for (const UnpairedExample& x : examples)
      CHECK(!x.prompt.empty() && !x.completion.empty() && int64_t(x.prompt.size()) < cfg.max_length,
            "kto: example of line {} has {} prompt and {} completion tokens (max_length {})",
            x.line, x.prompt.size(), x.completion.size(), cfg.max_length);
    const int64_t per_batch = cfg.per_device_train_batch_size;
    batches_per_epoch = (int64_t(examples.size()) + per_batch - 1) / per_batch;
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
    ref_logp.assign(examples.size(), std::nan(""));
    ref_kl_logp.assign(examples.size(), std::nan(""));
  }

  KtoPacked pack_of(const std::vector<UnpairedExample>& of, std::span<const size_t> idx) const {
    return pack(of, idx, with_kl, cfg.max_length, cfg.per_device_train_batch_size);
  }

  PassOptions pass_options() const {
    PassOptions o;
    o.checkpointing = cfg.gradient_checkpointing;
    o.offload = cfg.activation_offloading;
    o.lora_dropout = float(cfg.training_lora_dropout());
    o.entropy = true;  // TRL's entropy metric
    return o;
  }

  // Batches are consecutive examples in file order, every epoch alike (sequential sampling).
  std::vector<size_t> batch_indices(int64_t b, size_t n, int64_t per_batch) const {
    const size_t first = size_t(b * per_batch);
    std::vector<size_t> idx(std::min(n, first + size_t(per_batch)) - first);
    std::iota(idx.begin(), idx.end(), first);
    return idx;
  }

  PassPlan largest_plan() {
    std::vector<size_t> largest;
    int64_t most = -1;
    for (int64_t b = 0; b < batches_per_epoch; ++b) {
      const std::vector<size_t> idx =
          batch_indices(b, examples.size(), cfg.per_device_train_batch_size);
      const int64_t tokens = int64_t(pack_of(examples, idx).ids.size());
      if (tokens > most) {
        most = tokens;
        largest = idx;
      }
    }
    const KtoPacked p = pack_of(examples, largest);
    return pass->plan({p.ids, p.targets, p.cu}, pass_options());
  }

  // The reference's summed logps of these examples' sequences (reference_model: the frozen
  // start or the base), once each.
  void reference_of(const std::vector<UnpairedExample>& of, std::span<const size_t> idx,
                    std::vector<double>& ref, std::vector<double>& ref_kl) {
    std::vector<size_t> missing;
    for (size_t i : idx)
      if (std::isnan(ref[i])) missing.push_back(i);
    if (missing.empty()) return;
    const KtoPacked p = pack_of(of, missing);
    PassOptions o;
    o.reference = true;
    pass->forward({p.ids, p.targets, p.cu}, o);
    for (size_t k = 0; k < missing.size(); ++k) {
      ref[missing[k]] = span_sum(pass->logprobs(), p.span[k]);
      if (with_kl) ref_kl[missing[k]] = span_sum(pass->logprobs(), p.kl_span[k]);
    }
  }

  KtoLossConfig loss_config() const {
    KtoLossConfig lc;
    lc.loss_type = cfg.loss_type;
    lc.beta = cfg.beta;
    lc.desirable_weight = cfg.desirable_weight;
    lc.undesirable_weight = cfg.undesirable_weight;
    return lc;
  }

  struct BatchResult {
    KtoLossResult res;
    double kl = 0, entropy = 0;
  };

  // The loss of the batch `idx` of `of` after a policy pass over pack_of(of, idx).
  BatchResult batch_loss(const std::vector<UnpairedExample>& of, std::span<const size_t> idx,
                         const KtoPacked& p, const std::vector<double>& ref,
                         const std::vector<double>& ref_kl) const {
    const std::span<const float> logprobs = pass->logprobs();
    std::vector<double> policy, reference, policy_kl, reference_kl;
    std::vector<uint8_t> desirable;
    for (size_t k = 0; k < idx.size(); ++k) {
      policy.push_back(span_sum(logprobs, p.span[k]));
      reference.push_back(ref[idx[k]]);
      desirable.push_back(of[idx[k]].desirable ? 1 : 0);
      if (with_kl) {
        policy_kl.push_back(span_sum(logprobs, p.kl_span[k]));
        reference_kl.push_back(ref_kl[idx[k]]);
      }
    }
    BatchResult b;
    b.kl = with_kl ? kto_kl_estimate(policy_kl, reference_kl) : 0.0;
    b.res = kto_loss({policy, reference, desirable}, b.kl, loss_config());
    // TRL's entropy: the mean over the main sequences' completion tokens.
    const std::span<const float> entropies = pass->entropies();
    double entropy = 0;
    int64_t tokens = 0;
    for (const Span& s : p.span) {
      entropy += span_sum(entropies, s);
      tokens += s.second - s.first;
    }
    b.entropy = tokens > 0 ? entropy / double(tokens) : 0.0;
    return b;
  }

  nlohmann::json evaluate() {
    const auto t0 = Clock::now();
    PassOptions o = pass_options();
    o.lora_dropout = 0.0f;  // evaluation mode
    double loss = 0;
    MetricMeans means;
    const size_t n = eval_examples.size();
    const int64_t per_batch = cfg.per_device_eval_batch_size;
    for (int64_t b = 0; size_t(b * per_batch) < n; ++b) {
      const std::vector<size_t> idx = batch_indices(b, n, per_batch);
      reference_of(eval_examples, idx, eval_ref_logp, eval_ref_kl_logp);
      const KtoPacked p = pack_of(eval_examples, idx);
      pass->forward({p.ids, p.targets, p.cu}, o);
      const BatchResult r = batch_loss(eval_examples, idx, p, eval_ref_logp, eval_ref_kl_logp);
      loss += r.res.loss * double(idx.size());
      add_batch_metrics(means, r.res.stats, r.kl, r.entropy);
    }
    nlohmann::json line = {{"eval_loss", finite_or_null(loss / double(n))}};
    means.write(line, "eval_");
    line["eval_num_tokens"] = num_tokens;
    line["eval_runtime"] = seconds_since(t0);
    return line;
  }

  void run(const std::function<void(const KtoStepInfo&)>& on_step, const StopRequest& stop) {
    CHECK(!cfg.evaluates() || !eval_examples.empty(),
          "kto: eval_strategy = {}{} but no eval examples were given",
          eval_strategy_name(cfg.eval_strategy), cfg.eval_on_start ? " with eval_on_start" : "");
    MetricMeans means;
    int64_t tokens = 0;
    BatchLoopHooks hooks;
    hooks.save_state = [&](nlohmann::json& state) { state["num_tokens"] = num_tokens; };
    hooks.load_state = [&](const nlohmann::json& state, const std::string& checkpoint) {
      num_tokens = checkpoint_position(state, "num_tokens", checkpoint);
    };
    hooks.evaluate = [&] { return evaluate(); };
    hooks.begin_step = [&] {
      means = MetricMeans();
      tokens = 0;
    };
    hooks.micro_step = [&](const DataPosition& at, uint64_t dropout_seed, const TensorView& grads,
                           double ga) {
      const std::vector<size_t> idx =
          batch_indices(at.batch, examples.size(), cfg.per_device_train_batch_size);
      reference_of(examples, idx, ref_logp, ref_kl_logp);
      const KtoPacked p = pack_of(examples, idx);
      PassOptions o = pass_options();
      o.dropout_seed = dropout_seed;
      pass->forward({p.ids, p.targets, p.cu}, o);
      tokens += int64_t(p.ids.size());
      num_tokens += p.main_tokens;
      const BatchResult r = batch_loss(examples, idx, p, ref_logp, ref_kl_logp);
      std::vector<float> dlogprob(p.ids.size(), 0.0f);  // the KL sequences' stay 0
      for (size_t k = 0; k < idx.size(); ++k)
        for (int64_t t = p.span[k].first; t < p.span[k].second; ++t)
          dlogprob[size_t(t)] = float(r.res.dloss_dlogp[k] / ga);
      pass->backward(dlogprob, grads);
      add_batch_metrics(means, r.res.stats, r.kl, r.entropy);
      return r.res.loss / ga;
    };
    hooks.add_metrics = [&](nlohmann::json& line, int64_t, double seconds) {
      means.write(line, "");
      line["num_tokens"] = num_tokens;
      line["tokens_per_second"] = double(tokens) / seconds;
    };
    if (on_step)
      hooks.on_step = [&](const nlohmann::json& line, double loss, double seconds, bool evaluated) {
        on_step({line["step"].get<int64_t>(), total_steps, loss, number_or_nan(line, "kl"), seconds,
                 evaluated, number_or_nan(line, "eval_loss")});
      };
    DataPosition at{epoch, batch};
    run_batch_loop(
        {cfg, ctx, model, adapter, *train_step, base_model_name, total_steps, batches_per_epoch},
        at, hooks, stop);
    epoch = at.epoch;
    batch = at.batch;
  }
};

KtoTrainer::KtoTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
                       std::vector<UnpairedExample> examples, const KtoConfig& config,
                       std::string base_model_name)
    : impl_(std::make_unique<Impl>(ctx, model, adapter, std::move(examples), config,
                                   std::move(base_model_name))) {}
KtoTrainer::~KtoTrainer() = default;

PassPlan KtoTrainer::plan() {
  return impl_->largest_plan();
}

size_t KtoTrainer::optimizer_state_bytes() const {
  return impl_->train_step->optimizer().state_bytes();
}

size_t KtoTrainer::reference_adapter_bytes() const {
  return impl_->reference_adapter ? impl_->reference_adapter->nbytes() : 0;
}

int64_t KtoTrainer::total_steps() const {
  return impl_->total_steps;
}

void KtoTrainer::set_eval_data(std::vector<UnpairedExample> eval_examples) {
  CHECK(!eval_examples.empty(), "kto: the eval dataset has no examples");
  impl_->eval_ref_logp.assign(eval_examples.size(), std::nan(""));
  impl_->eval_ref_kl_logp.assign(eval_examples.size(), std::nan(""));
  impl_->eval_examples = std::move(eval_examples);
}

nlohmann::json KtoTrainer::evaluate() {
  CHECK(!impl_->eval_examples.empty(), "kto: no eval examples to evaluate on");
  return impl_->evaluate();
}

void KtoTrainer::run(const std::function<void(const KtoStepInfo&)>& on_step,
                     const StopRequest& stop) {
  impl_->run(on_step, stop);
}

}  // namespace fp8rl
