#include "rl/reward_trainer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"
#include "core/wall_clock.h"
#include "model/sequence_score.h"
#include "ops/memory.h"
#include "rl/reward_loss.h"
#include "train/batch_loop.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"
#include "train/train_step.h"

namespace fp8rl {

namespace {

// Pairs packed as 2 sequences each (chosen, then rejected), with each one's pooled row.
struct Packed {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0}, rows;
};

Packed pack(std::span<const RewardPair> pairs, std::optional<int64_t> pad) {
  Packed p;
  for (const RewardPair& pair : pairs)
    for (const std::vector<int32_t>* s : {&pair.chosen, &pair.rejected}) {
      p.rows.push_back(int64_t(p.ids.size()) + pooled_position(*s, pad));
      p.ids.insert(p.ids.end(), s->begin(), s->end());
      p.cu.push_back(int64_t(p.ids.size()));
    }
  p.targets.assign(p.ids.size(), -100);
  return p;
}

}  // namespace

struct RewardTrainer::Impl {
  Context& ctx;
  const Model& model;
  LoraAdapter& adapter;
  std::vector<RewardPair> pairs, eval_pairs;
  RewardConfig cfg;
  std::string base_model_name;
  std::unique_ptr<TrainStep> train_step;
  std::unique_ptr<LogprobPass> pass;
  int64_t total_steps = 0, batches_per_epoch = 0, epoch = 0, batch = 0;
  int64_t num_tokens = 0;

  Impl(Context& c, const Model& m, LoraAdapter& a, std::vector<RewardPair> p, const RewardConfig& r,
       std::string base)
      : ctx(c),
        model(m),
        adapter(a),
        pairs(std::move(p)),
        cfg(r),
        base_model_name(std::move(base)) {
    cfg.validate();
    CHECK(!pairs.empty(), "reward: the dataset has no pairs");
    CHECK(adapter.has_score_head(),
          "reward: the adapter has no score head (its task_type must be SEQ_CLS)");
    CHECK(adapter.config().num_labels == 1 ||
              (m.config().sequence_classification && m.config().num_labels == 1),
          "reward: the score head has {} labels; a reward model has one",
          adapter.config().num_labels);
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
  }

  PassOptions pass_options(bool training) const {
    PassOptions o;
    o.checkpointing = cfg.gradient_checkpointing;
    o.offload = cfg.activation_offloading;
    o.lora_dropout = training ? float(cfg.training_lora_dropout()) : 0.0f;
    return o;
  }

  // The head's masters on the host, f32 [H].
  std::vector<float> head() const {
    const TensorView w = adapter.score_slice(adapter.master_params());
    std::vector<float> h(size_t(w.numel()));
    Context c = ctx;
    ops::copy(c, w, TensorView(h.data(), DType::f32, w.shape));
    ops::synchronize(c);
    return h;
  }

  // Runs the scoring pass over `p` and returns the [2P] scores; the pass keeps its states.
  std::vector<double> score_pass(const Packed& p, PassOptions o, const std::vector<float>& w) {
    o.pooled_rows = p.rows;
    pass->forward({p.ids, p.targets, p.cu}, o);
    const int64_t h = model.config().hidden_size;
    const std::span<const float> states = pass->pooled();
    std::vector<double> s(p.rows.size());
    for (size_t i = 0; i < s.size(); ++i) {
      double acc = 0;
      for (int64_t k = 0; k < h; ++k)
        acc += double(states[i * size_t(h) + size_t(k)]) * double(w[size_t(k)]);
      s[i] = acc;
    }
    return s;
  }

  RewardLossResult loss_of(std::span<const RewardPair> of, const std::vector<double>& s) const {
    std::vector<double> c, r, m;
    for (size_t i = 0; i < of.size(); ++i) {
      c.push_back(s[2 * i]);
      r.push_back(s[2 * i + 1]);
      if (of[i].margin) m.push_back(*of[i].margin);
    }
    return bradley_terry_loss(c, r, m, cfg.center_rewards_coefficient);
  }

  // The gradient of scale * loss into grads: the head's from the pooled states, the states'
  // (dscore x head) through the backward.
  void backward(const RewardLossResult& res, double scale, const std::vector<float>& w,
                const TensorView& grads) {
    const int64_t h = model.config().hidden_size;
    const size_t n = 2 * res.dloss_dchosen.size();
    const std::span<const float> states = pass->pooled();
    std::vector<float> d_pooled(n * size_t(h));
    std::vector<double> d_head(size_t(h), 0.0);
    for (size_t i = 0; i < n; ++i) {
      const double ds =
          scale * (i % 2 == 0 ? res.dloss_dchosen[i / 2] : res.dloss_drejected[i / 2]);
      for (int64_t k = 0; k < h; ++k) {
        d_pooled[i * size_t(h) + size_t(k)] = float(ds * double(w[size_t(k)]));
        d_head[size_t(k)] += ds * double(states[i * size_t(h) + size_t(k)]);
      }
    }
    pass->backward_pooled(d_pooled, grads);
    // The head's gradient added on the host (a few hundred values).
    const TensorView g = adapter.score_slice(grads);
    std::vector<float> host(size_t(g.numel()));
    ops::copy(ctx, g, TensorView(host.data(), DType::f32, g.shape));
    ops::synchronize(ctx);
    for (int64_t k = 0; k < h; ++k) host[size_t(k)] += float(d_head[size_t(k)]);
    ops::copy(ctx, TensorView(host.data(), DType::f32, g.shape), g);
    ops::synchronize(ctx);
  }

  std::vector<size_t> batch_indices(int64_t e, int64_t b) const {
    std::vector<size_t> order(pairs.size());
    std::iota(order.begin(), order.end(), size_t(0));
    const uint64_t stream = rng_key(uint64_t(cfg.seed), uint64_t(e) + 0x4e3);
    for (size_t i = order.size(); i > 1; --i)
      std::swap(order[i - 1], order[size_t(uniform01(stream, i) * float(i)) % i]);
    const size_t first = size_t(b * cfg.per_device_train_batch_size);
    const size_t last = std::min(order.size(), first + size_t(cfg.per_device_train_batch_size));
    return std::vector<size_t>(order.begin() + ptrdiff_t(first), order.begin() + ptrdiff_t(last));
  }

  std::vector<RewardPair> gather(const std::vector<size_t>& idx) const {
    std::vector<RewardPair> out;
    for (size_t i : idx) out.push_back(pairs[i]);
    return out;
  }

  PassPlan largest_plan() {
    std::vector<size_t> order(pairs.size());
    std::iota(order.begin(), order.end(), size_t(0));
    auto tokens = [&](size_t i) { return pairs[i].chosen.size() + pairs[i].rejected.size(); };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return tokens(a) > tokens(b); });
    order.resize(std::min(order.size(), size_t(cfg.per_device_train_batch_size)));
    const Packed p = pack(gather(order), model.config().pad_token_id);
    PassOptions o = pass_options(true);
    o.pooled_rows = p.rows;
    return pass->plan({p.ids, p.targets, p.cu}, o);
  }

  nlohmann::json evaluate() {
    const auto t0 = Clock::now();
    const std::vector<float> w = head();
    double loss = 0, acc = 0, margin = 0, mean = 0, lo = INFINITY, hi = -INFINITY;
    int64_t batches = 0;
    const size_t per = size_t(cfg.per_device_eval_batch_size);
    for (size_t first = 0; first < eval_pairs.size(); first += per) {
      const std::span<const RewardPair> of(eval_pairs.data() + first,
                                           std::min(per, eval_pairs.size() - first));
      const RewardLossResult r =
          loss_of(of, score_pass(pack(of, model.config().pad_token_id), pass_options(false), w));
      loss += r.loss * double(of.size());
      acc += r.accuracy;
      margin += r.margin;
      mean += r.mean_reward;
      lo = std::min(lo, r.min_reward);
      hi = std::max(hi, r.max_reward);
      ++batches;
    }
    const double n = double(batches);
    return {{"eval_loss", finite_or_null(loss / double(eval_pairs.size()))},
            {"eval_accuracy", finite_or_null(acc / n)},
            {"eval_rewards/accuracies", finite_or_null(acc / n)},
            {"eval_margin", finite_or_null(margin / n)},
            {"eval_mean_reward", finite_or_null(mean / n)},
            {"eval_min_reward", finite_or_null(lo)},
            {"eval_max_reward", finite_or_null(hi)},
            {"eval_runtime", seconds_since(t0)}};
  }

  void run(const std::function<void(const RewardStepInfo&)>& on_step, const StopRequest& stop) {
    CHECK(!cfg.evaluates() || !eval_pairs.empty(),
          "reward: eval_strategy = {}{} but no eval pairs were given",
          eval_strategy_name(cfg.eval_strategy), cfg.eval_on_start ? " with eval_on_start" : "");
    std::vector<float> w;
    double acc = 0, margin = 0, mean = 0, lo = INFINITY, hi = -INFINITY;
    BatchLoopHooks hooks;
    hooks.save_state = [&](nlohmann::json& state) { state["num_tokens"] = num_tokens; };
    hooks.load_state = [&](const nlohmann::json& state, const std::string& checkpoint) {
      num_tokens = checkpoint_position(state, "num_tokens", checkpoint);
    };
    hooks.evaluate = [&] { return evaluate(); };
    hooks.begin_step = [&] {
      w = head();
      acc = margin = mean = 0;
      lo = INFINITY;
      hi = -INFINITY;
    };
    hooks.micro_step = [&](const DataPosition& at, uint64_t dropout_seed, const TensorView& grads,
                           double ga) {
      const std::vector<RewardPair> of = gather(batch_indices(at.epoch, at.batch));
      const Packed p = pack(of, model.config().pad_token_id);
      PassOptions o = pass_options(true);
      o.dropout_seed = dropout_seed;
      const RewardLossResult r = loss_of(of, score_pass(p, o, w));
      backward(r, 1.0 / ga, w, grads);
      num_tokens += int64_t(p.ids.size());
      acc += r.accuracy;
      margin += r.margin;
      mean += r.mean_reward;
      lo = std::min(lo, r.min_reward);
      hi = std::max(hi, r.max_reward);
      return r.loss / ga;
    };
    hooks.add_metrics = [&](nlohmann::json& line, int64_t micro, double) {
      const double n = double(micro);
      line["num_tokens"] = num_tokens;
      line["accuracy"] = acc / n;
      line["margin"] = margin / n;
      line["mean_reward"] = mean / n;
      line["min_reward"] = lo;
      line["max_reward"] = hi;
    };
    if (on_step)
      hooks.on_step = [&](const nlohmann::json& line, double loss, double seconds, bool evaluated) {
        on_step({line["step"].get<int64_t>(), total_steps, loss, line["accuracy"].get<double>(),
                 line["margin"].get<double>(), seconds, evaluated, number_or_nan(line, "eval_loss"),
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

RewardTrainer::RewardTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
                             std::vector<RewardPair> pairs, const RewardConfig& config,
                             std::string base_model_name)
    : impl_(std::make_unique<Impl>(ctx, model, adapter, std::move(pairs), config,
                                   std::move(base_model_name))) {}
RewardTrainer::~RewardTrainer() = default;

int64_t RewardTrainer::total_steps() const {
  return impl_->total_steps;
}
PassPlan RewardTrainer::plan() {
  return impl_->largest_plan();
}
size_t RewardTrainer::optimizer_state_bytes() const {
  return impl_->train_step->optimizer().state_bytes();
}
void RewardTrainer::set_eval_data(std::vector<RewardPair> eval_pairs) {
  CHECK(!eval_pairs.empty(), "reward: the eval dataset has no pairs");
  impl_->eval_pairs = std::move(eval_pairs);
}
nlohmann::json RewardTrainer::evaluate() {
  CHECK(!impl_->eval_pairs.empty(), "reward: no eval pairs to evaluate on");
  return impl_->evaluate();
}
std::vector<double> RewardTrainer::scores(std::span<const RewardPair> pairs) {
  return impl_->score_pass(pack(pairs, impl_->model.config().pad_token_id),
                           impl_->pass_options(false), impl_->head());
}
double RewardTrainer::loss_and_gradient(std::span<const RewardPair> pairs,
                                        const TensorView& grads) {
  const std::vector<float> w = impl_->head();
  const RewardLossResult r =
      impl_->loss_of(pairs, impl_->score_pass(pack(pairs, impl_->model.config().pad_token_id),
                                              impl_->pass_options(false), w));
  impl_->backward(r, 1.0, w, grads);
  return r.loss;
}
void RewardTrainer::run(const std::function<void(const RewardStepInfo&)>& on_step,
                        const StopRequest& stop) {
  impl_->run(on_step, stop);
}

}  // namespace fp8rl
