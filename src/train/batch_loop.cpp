#include "train/batch_loop.h"

#include "core/interrupt.h"
#include "core/rng.h"
#include "core/wall_clock.h"
#include "model/adapter.h"
#include "ops/memory.h"
#include "ops/ops.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"
#include "train/train_step.h"
#include "train/training_arguments.h"

namespace fp8rl {

void run_batch_loop(const BatchLoop& loop, DataPosition& at, const BatchLoopHooks& hooks,
                    const StopRequest& stop) {
  const TrainingArguments& cfg = loop.cfg;
  TrainStep& train_step = loop.train_step;
  LoraAdapter& adapter = loop.adapter;
  prepare_run_dir(cfg.output_dir);
  const std::string resume = resume_checkpoint(cfg.resume_from_checkpoint, cfg.output_dir);
  if (!resume.empty()) {
    const nlohmann::json s = load_checkpoint(resume, loop.ctx, loop.model, adapter, train_step);
    at.epoch = checkpoint_position(s, "epoch", resume);
    at.batch = checkpoint_position(s, "batch", resume);
    if (hooks.load_state) hooks.load_state(s, resume);
  }
  const auto state = [&] {
    nlohmann::json s = {{"epoch", at.epoch}, {"batch", at.batch}};
    if (hooks.save_state) hooks.save_state(s);
    return s;
  };
  StepMetrics metrics(cfg, train_step.global_step());
  // The gradients on the run's device, beside the masters: the optimizer steps them there.
  const int64_t num_params = adapter.master_params().numel();
  const DeviceBuffer grad_storage(loop.ctx, size_t(num_params) * sizeof(float));
  const TensorView grads = grad_storage.view({num_params}, DType::f32);  // [P] f32
  if (cfg.eval_on_start && train_step.global_step() == 0) {
    nlohmann::json line = hooks.evaluate();
    line["step"] = 0;
    metrics.write(line);
  }
  std::string saved = resume;  // the checkpoint of the last completed step, if any
  const double accumulation = double(cfg.gradient_accumulation_steps);
  while (train_step.global_step() < loop.total_steps && !stop.requested()) {
    const auto t0 = Clock::now();
    ops::fill_zero(loop.ctx, grads);
    if (hooks.begin_step) hooks.begin_step();
    double loss = 0;
    int64_t micro = 0;
    for (; micro < cfg.gradient_accumulation_steps; ++micro) {
      if (at.batch >= loop.batches_per_epoch) {
        if (micro > 0) break;  // an epoch's last step may be shorter (transformers)
        ++at.epoch;
        at.batch = 0;
      }
      const DataPosition taken = at;
      ++at.batch;
      const uint64_t dropout_seed =
          rng_key(uint64_t(cfg.seed), uint64_t(at.epoch) * 1000003u + uint64_t(at.batch));
      loss += hooks.micro_step(taken, dropout_seed, grads, accumulation);
    }
    const StepResult r =
        train_step.step(loop.ctx, adapter.master_params(), grads, loss, adapter.compute_params());
    if (!r.skipped) adapter.mark_updated();
    const double seconds = seconds_since(t0);
    const int64_t step = train_step.global_step();
    nlohmann::json line = {
        {"step", step},
        {"loss", finite_or_null(loss)},
        {"grad_norm", finite_or_null(r.grad_norm)},
        {"learning_rate", r.lr},
        {"epoch", double(at.epoch) + double(at.batch) / double(loop.batches_per_epoch)},
        {"peak_memory_bytes", peak_memory_bytes(loop.ctx)},
        {"skipped_steps", train_step.skipped_steps()}};
    hooks.add_metrics(line, micro, seconds);
    // The step ended an epoch when it took the epoch's last batch.
    const bool evaluated =
        cfg.should_evaluate(step, loop.total_steps, at.batch >= loop.batches_per_epoch);
    if (evaluated) line.update(hooks.evaluate());
    metrics.write(line);
    if (hooks.on_step) hooks.on_step(line, loss, seconds, evaluated);
    if ((cfg.save_steps > 0 && step % cfg.save_steps == 0) || step == loop.total_steps) {
      save_checkpoint(cfg.output_dir, step, adapter, train_step, state(), loop.base_model_name);
      saved = checkpoint_path(cfg.output_dir, step);
    }
  }
  if (train_step.global_step() < loop.total_steps)
    end_stopped_run(stop, train_step.global_step(), loop.total_steps, cfg.output_dir, saved, [&] {
      save_checkpoint(cfg.output_dir, train_step.global_step(), adapter, train_step, state(),
                      loop.base_model_name);
    });
  adapter.save_peft(cfg.output_dir, loop.base_model_name);
}

}  // namespace fp8rl
