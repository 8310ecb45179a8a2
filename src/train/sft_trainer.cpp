#include "train/sft_trainer.h"

#include <cmath>
#include <numeric>

#include "core/rng.h"
#include "core/wall_clock.h"
#include "ops/backward.h"
#include "ops/memory.h"
#include "train/run_dir.h"
#include "train/sft_batch.h"
#include "train/step_metrics.h"
#include "train/training_arguments.h"

namespace fp8rl {

SftTrainer::SftTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
                       std::vector<SftExample> examples, const SftConfig& config,
                       std::string base_model_name)
    : ctx_(ctx),
      model_(model),
      adapter_(adapter),
      examples_(std::move(examples)),
      cfg_(config),
      base_model_name_(std::move(base_model_name)) {
  cfg_.validate();
  CHECK(!examples_.empty(), "sft: the dataset has no examples");
  pass_.checkpointing = cfg_.gradient_checkpointing;
  pass_.offload = cfg_.activation_offloading;
  pass_.lora_dropout = float(cfg_.training_lora_dropout());
  batches_per_epoch_ = int64_t(epoch_plan(0).size());
  const int64_t ga = cfg_.gradient_accumulation_steps;
  steps_per_epoch_ = (batches_per_epoch_ + ga - 1) / ga;
  total_steps_ = cfg_.max_steps > 0
                     ? cfg_.max_steps
                     : int64_t(std::ceil(cfg_.num_train_epochs * double(steps_per_epoch_)));
  CHECK(total_steps_ > 0, "sft: {} epochs of {} steps train nothing", cfg_.num_train_epochs,
        steps_per_epoch_);
  train_step_ =
      std::make_unique<TrainStep>(make_optimizer(cfg_, adapter_.master_params().numel(), ctx_),
                                  train_step_config(cfg_, total_steps_));
}

const std::vector<std::vector<size_t>>& SftTrainer::epoch_plan(int64_t epoch) {
  if (epoch != plan_epoch_) {
    // packing: batches by the token budget alone (up to as many examples as fit).
    const int64_t batch_size =
        cfg_.packing ? int64_t(examples_.size()) : cfg_.per_device_train_batch_size;
    plan_ = plan_epoch(examples_, batch_size, cfg_.tokens_per_batch(), uint64_t(cfg_.seed), epoch,
                       /*shuffle=*/true);
    plan_epoch_ = epoch;
  }
  return plan_;
}

size_t SftTrainer::optimizer_state_bytes() const {
  return train_step_->optimizer().state_bytes();
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
  return pass.plan({batch.input_ids, batch.targets, batch.cu_seqlens}, pass_);
}

void SftTrainer::set_eval_data(std::vector<SftExample> eval_examples) {
  CHECK(!eval_examples.empty(), "sft: the eval dataset has no examples");
  eval_examples_ = std::move(eval_examples);
}

double SftTrainer::evaluate_loss() {
  CHECK(!eval_examples_.empty(), "sft: no eval examples to evaluate on");
  if (!pass_object_) pass_object_ = std::make_unique<LogprobPass>(ctx_, model_, &adapter_);
  PassOptions o = pass_;
  o.lora_dropout = 0.0f;  // evaluation mode
  double weighted = 0;
  int64_t counted = 0;
  const size_t per_batch = size_t(cfg_.per_device_eval_batch_size);
  for (size_t first = 0; first < eval_examples_.size(); first += per_batch) {
    std::vector<size_t> idx(std::min(per_batch, eval_examples_.size() - first));
    std::iota(idx.begin(), idx.end(), first);
    const SftBatch b = make_batch(eval_examples_, idx);
    if (b.num_targets == 0) continue;  // nothing to score (transformers: a NaN batch)
    pass_object_->forward({b.input_ids, b.targets, b.cu_seqlens}, o);
    double sum = 0;
    for (size_t t = 0; t < b.targets.size(); ++t)
      if (b.targets[t] != ops::kIgnoreIndex) sum -= pass_object_->logprobs()[t];
    weighted += sum / double(b.num_targets) * double(idx.size());
    counted += int64_t(idx.size());
  }
  return counted > 0 ? weighted / double(counted) : std::nan("");
}

nlohmann::json SftTrainer::position_json() const {
  return {
      {"epoch", pos_.epoch}, {"batch", pos_.batch}, {"micro", pos_.micro}, {"tokens", pos_.tokens}};
}

void SftTrainer::run(const std::function<void(const SftStepInfo&)>& on_step,
                     const StopRequest& stop) {
  prepare_run_dir(cfg_.output_dir);
  const std::string resume = resume_checkpoint(cfg_.resume_from_checkpoint, cfg_.output_dir);
  if (!resume.empty()) {
    const nlohmann::json st = load_checkpoint(resume, ctx_, model_, adapter_, *train_step_);
    // Each an integer >= 0: a negative batch indexed before the epoch's plan.
    pos_.epoch = checkpoint_position(st, "epoch", resume);
    pos_.batch = checkpoint_position(st, "batch", resume);
    pos_.micro = checkpoint_position(st, "micro", resume);
    pos_.tokens = checkpoint_position(st, "tokens", resume);
  }
  CHECK(!cfg_.evaluates() || !eval_examples_.empty(),
        "sft: eval_strategy = {}{} but no eval examples were given",
        eval_strategy_name(cfg_.eval_strategy), cfg_.eval_on_start ? " with eval_on_start" : "");
  StepMetrics metrics(cfg_, train_step_->global_step());
  if (!pass_object_) pass_object_ = std::make_unique<LogprobPass>(ctx_, model_, &adapter_);
  LogprobPass& pass = *pass_object_;
  // transformers' evaluation: eval_loss and eval_runtime (seconds).
  const auto evaluate = [&] {
    const auto t0 = Clock::now();
    const double loss = evaluate_loss();
    return nlohmann::json{{"eval_loss", finite_or_null(loss)}, {"eval_runtime", seconds_since(t0)}};
  };
  if (cfg_.eval_on_start && train_step_->global_step() == 0) {
    nlohmann::json line = evaluate();
    line["step"] = 0;
    metrics.write(line);
  }
  // The gradients on the run's device, beside the masters: the optimizer steps them there.
  const int64_t num_params = adapter_.master_params().numel();
  const DeviceBuffer grad_storage(ctx_, size_t(num_params) * sizeof(float));
  const TensorView grads = grad_storage.view({num_params}, DType::f32);  // [P] f32

  std::string saved = resume;  // the checkpoint of the last completed step, if any

  while (train_step_->global_step() < total_steps_ && !stop.requested()) {
    const auto t0 = Clock::now();
    // The micro-batches of this step: up to grad_accum, not crossing an epoch's end.
    if (pos_.batch >= int64_t(epoch_plan(pos_.epoch).size())) ++pos_.epoch, pos_.batch = 0;
    const auto& p = epoch_plan(pos_.epoch);
    const int64_t first = pos_.batch;
    const int64_t last =
        std::min<int64_t>(first + cfg_.gradient_accumulation_steps, int64_t(p.size()));
    std::vector<SftBatch> batches;
    int64_t targets = 0, tokens = 0;
    for (int64_t b = first; b < last; ++b) {
      batches.push_back(make_batch(examples_, p[size_t(b)]));
      targets += batches.back().num_targets;
      tokens += int64_t(batches.back().input_ids.size());
    }
    ops::fill_zero(ctx_, grads);
    double loss_sum = 0;
    for (const SftBatch& b : batches) {
      PassOptions o = pass_;
      o.dropout_seed = rng_key(uint64_t(cfg_.seed), uint64_t(pos_.micro++));
      pass.forward({b.input_ids, b.targets, b.cu_seqlens}, o);
      std::vector<float> dlogprob(b.targets.size(), 0.0f);
      for (size_t t = 0; t < b.targets.size(); ++t)
        if (b.targets[t] != ops::kIgnoreIndex) {
          loss_sum -= pass.logprobs()[t];
          dlogprob[t] = -1.0f / float(std::max<int64_t>(targets, 1));
        }
      if (targets > 0) pass.backward(dlogprob, grads);
    }
    const double loss = targets > 0 ? loss_sum / double(targets) : 0.0;
    // The optimizer's pass writes the masters and the forward's compute copies (CUDA) at once.
    const StepResult r =
        train_step_->step(ctx_, adapter_.master_params(), grads, loss, adapter_.compute_params());
    if (!r.skipped) adapter_.mark_updated();
    pos_.batch = last;
    pos_.tokens += tokens;
    const double seconds = seconds_since(t0);
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
                           {"peak_memory_bytes", peak_memory_bytes(ctx_)},
                           {"skipped", r.skipped},
                           {"skipped_steps", train_step_->skipped_steps()}};
    if (const ops::DeviceRegionInfo dr = ops::device_region_info(ctx_); dr.on)
      line["memory/device_region_bytes"] = dr.committed;
    if (!std::isfinite(loss)) line["loss"] = nullptr;
    if (!std::isfinite(r.grad_norm)) line["grad_norm"] = nullptr;
    // The step ended an epoch when it took the epoch's last batch (a step never crosses one).
    const bool evaluated = cfg_.should_evaluate(step, total_steps_, last == int64_t(p.size()));
    if (evaluated) line.update(evaluate());
    metrics.write(line);
    if (on_step)
      on_step({step, total_steps_, loss, r.grad_norm, r.lr, seconds, double(tokens) / seconds,
               r.skipped, evaluated,
               evaluated && line.at("eval_loss").is_number() ? line.at("eval_loss").get<double>()
                                                             : std::nan(""),
               line.value("eval_runtime", 0.0)});
    if ((cfg_.save_steps > 0 && step % cfg_.save_steps == 0) || step == total_steps_) {
      save_checkpoint(cfg_.output_dir, step, adapter_, *train_step_, position_json(),
                      base_model_name_);
      saved = checkpoint_path(cfg_.output_dir, step);
    }
  }
  if (train_step_->global_step() < total_steps_)
    end_stopped_run(stop, train_step_->global_step(), total_steps_, cfg_.output_dir, saved, [&] {
      save_checkpoint(cfg_.output_dir, train_step_->global_step(), adapter_, *train_step_,
                      position_json(), base_model_name_);
    });
  adapter_.save_peft(cfg_.output_dir, base_model_name_);
}

}  // namespace fp8rl
