#include "train/sft_trainer.h"

#include <chrono>
#include <cmath>

#include "core/rng.h"
#include "ops/backward.h"
#include "train/run_dir.h"
#include "train/sft_batch.h"

namespace fp8rl {

SftTrainer::SftTrainer(Context& ctx, Model& model, LoraAdapter& adapter,
                       std::vector<SftExample> examples, const SftLoopSettings& s,
                       std::unique_ptr<Optimizer> optimizer, TrainStepConfig step_config)
    : ctx_(ctx), model_(model), adapter_(adapter), examples_(std::move(examples)), settings_(s) {
  CHECK(!examples_.empty(), "sft: the dataset has no examples");
  CHECK(s.batch_size > 0 && s.max_tokens > 0 && s.grad_accum > 0,
        "sft: batch size {}, token budget {} and gradient accumulation {} must be positive",
        s.batch_size, s.max_tokens, s.grad_accum);
  batches_per_epoch_ = int64_t(epoch_plan(0).size());
  steps_per_epoch_ = (batches_per_epoch_ + s.grad_accum - 1) / s.grad_accum;
  total_steps_ = s.max_steps > 0 ? s.max_steps
                                 : int64_t(std::ceil(s.epochs * double(steps_per_epoch_)));
  CHECK(total_steps_ > 0, "sft: {} epochs of {} steps train nothing", s.epochs, steps_per_epoch_);
  if (step_config.schedule.num_training_steps == 0)
    step_config.schedule.num_training_steps = total_steps_;
  train_step_ = std::make_unique<TrainStep>(std::move(optimizer), step_config);
}

const std::vector<std::vector<size_t>>& SftTrainer::epoch_plan(int64_t epoch) {
  if (epoch != plan_epoch_) {
    plan_ = plan_epoch(examples_, settings_.batch_size, settings_.max_tokens, settings_.seed,
                       epoch, /*shuffle=*/true);
    plan_epoch_ = epoch;
  }
  return plan_;
}

PassPlan SftTrainer::plan() {
  // The micro-batch with the most tokens of the first epoch (epochs differ only in order).
  const auto& p = epoch_plan(0);
  size_t best = 0;
  int64_t most = -1;
  for (size_t b = 0; b < p.size(); ++b) {
    int64_t n = 0;
    for (size_t i : p[b]) n += int64_t(examples_[i].input_ids.size());
    if (n > most) most = n, best = b;
  }
  const SftBatch batch = make_batch(examples_, p[best]);
  LogprobPass pass(ctx_, model_, &adapter_);
  return pass.plan({batch.input_ids, batch.targets, batch.cu_seqlens}, settings_.pass);
}

nlohmann::json SftTrainer::position_json() const {
  return {{"epoch", pos_.epoch}, {"batch", pos_.batch}, {"micro", pos_.micro},
          {"tokens", pos_.tokens}};
}

void SftTrainer::run(const std::function<void(const SftStepInfo&)>& on_step) {
  const SftLoopSettings& s = settings_;
  prepare_run_dir(s.output_dir);
  if (!s.resume.empty()) {
    const nlohmann::json st = load_checkpoint(s.resume, model_, adapter_, *train_step_);
    try {
      pos_.epoch = st.at("epoch").get<int64_t>();
      pos_.batch = st.at("batch").get<int64_t>();
      pos_.micro = st.at("micro").get<int64_t>();
      pos_.tokens = st.at("tokens").get<int64_t>();
    } catch (const std::exception& e) {
      RAISE("checkpoint '{}': its data position is malformed: {}", s.resume, e.what());
    }
  }
  MetricsLog metrics(s.output_dir, train_step_->global_step());
  LogprobPass pass(ctx_, model_, &adapter_);
  const TensorView params = adapter_.master_params();
  std::vector<float> grads(size_t(params.numel()));
  const TensorView grads_view(grads.data(), DType::f32, {params.numel()});

  while (train_step_->global_step() < total_steps_) {
    const auto t0 = std::chrono::steady_clock::now();
    // The micro-batches of this step: up to grad_accum, not crossing an epoch's end.
    if (pos_.batch >= int64_t(epoch_plan(pos_.epoch).size())) ++pos_.epoch, pos_.batch = 0;
    const auto& p = epoch_plan(pos_.epoch);
    const int64_t first = pos_.batch, last = std::min<int64_t>(first + s.grad_accum, int64_t(p.size()));
    std::vector<SftBatch> batches;
    int64_t targets = 0, tokens = 0;
    for (int64_t b = first; b < last; ++b) {
      batches.push_back(make_batch(examples_, p[size_t(b)]));
      targets += batches.back().num_targets;
      tokens += int64_t(batches.back().input_ids.size());
    }
    std::fill(grads.begin(), grads.end(), 0.0f);
    double loss_sum = 0;
    for (const SftBatch& b : batches) {
      PassOptions o = s.pass;
      o.dropout_seed = rng_key(s.seed, uint64_t(pos_.micro++));
      pass.forward({b.input_ids, b.targets, b.cu_seqlens}, o);
      std::vector<float> dlogprob(b.targets.size(), 0.0f);
      for (size_t t = 0; t < b.targets.size(); ++t)
        if (b.targets[t] != ops::kIgnoreIndex) {
          loss_sum -= pass.logprobs()[t];
          dlogprob[t] = -1.0f / float(std::max<int64_t>(targets, 1));
        }
      if (targets > 0) pass.backward(dlogprob, grads_view);
    }
    const double loss = targets > 0 ? loss_sum / double(targets) : 0.0;
    const StepResult r = train_step_->step({params.ptr<float>(), size_t(params.numel())}, grads, loss);
    if (!r.skipped) adapter_.mark_updated();
    pos_.batch = last;
    pos_.tokens += tokens;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t step = train_step_->global_step();
    const double epoch = double(pos_.epoch) + double(pos_.batch) / double(p.size());
    nlohmann::json line = {{"step", step},
                           {"epoch", epoch},
                           {"loss", loss},
                           {"grad_norm", r.grad_norm},
                           {"lr", r.lr},
                           {"learning_rate", r.lr},
                           {"num_tokens", pos_.tokens},
                           {"tokens_per_second", double(tokens) / seconds},
                           {"step_seconds", seconds},
                           {"peak_memory_bytes", peak_host_memory_bytes()},
                           {"skipped", r.skipped},
                           {"skipped_steps", train_step_->skipped_steps()}};
    if (!std::isfinite(loss)) line["loss"] = nullptr;
    if (!std::isfinite(r.grad_norm)) line["grad_norm"] = nullptr;
    metrics.write(line);
    if (on_step)
      on_step({step, total_steps_, loss, r.grad_norm, r.lr, seconds, double(tokens) / seconds,
               r.skipped});
    if ((s.save_steps > 0 && step % s.save_steps == 0) || step == total_steps_)
      save_checkpoint(s.output_dir, step, adapter_, *train_step_, position_json(),
                      s.base_model_name);
  }
  adapter_.save_peft(s.output_dir, s.base_model_name);
}

}  // namespace fp8rl
