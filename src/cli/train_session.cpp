#include "cli/train_session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <fmt/ranges.h>

#include "cli/common.h"
#include "core/check.h"
#include "core/output_file.h"
#include "core/spelling.h"
#include "core/wall_clock.h"
#include "formats/safetensors.h"
#include "ops/device.h"
#include "ops/memory.h"
#include "ops/memory_budget.h"
#include "train/run_dir.h"

namespace fp8rl::cli {

namespace {

// Why a dry run of `args` cannot load as its run would, and plans from the shapes instead;
// empty: it loads.
std::string why_estimate(const ModelArguments& args) {
  std::vector<std::string> why;
  if (!Checkpoint::present(args.model))
    why.push_back(fmt::format(
        "{} holds no weights (no model.safetensors), the shapes come from its config.json",
        args.model));
  if (parse_device(args.device) == Device::cuda && !CudaDevice::built())
    why.push_back(
        "made without a device: this fp8rl was built without the CUDA backend, so the CUDA "
        "kernels' scratch is taken as the CPU reference's");
  else if (parse_device(args.device) == Device::cuda && CudaDevice::count() == 0)
    why.push_back("made without a device: no CUDA device is visible");
  return fmt::format("{}", fmt::join(why, "; "));
}

}  // namespace

ModelFiles load_model_files(const ModelArguments& args) {
  CHECK(!args.model.empty(), "no model: give MODEL (or `model:` in the config)");
  ModelFiles files{ModelText(args.model, ""), {}};
  // Without tokenizer.json only rows of token ids can train (SFT); the commands that need text
  // ask for the tokenizer themselves.
  if (files.text.tokenizer() != nullptr)
    files.tokenizer_setup = load_sft_tokenizer_setup(args.model, *files.text.tokenizer());
  return files;
}

TrainSession::TrainSession(const ModelArguments& args, uint64_t seed)
    : TrainSession(args, seed, load_model_files(args)) {}

TrainSession::TrainSession(const ModelArguments& args, uint64_t seed, ModelFiles files,
                           bool dry_run)
    : tok_setup_(std::move(files.tokenizer_setup)) {
  if (dry_run) estimate_reason_ = why_estimate(args);
  SessionOptions so;
  so.model = args.model;
  so.fp8 = args.fp8;
  so.device = args.device;
  so.gpu_memory = args.gpu_memory;
  so.plan_only = !estimate_reason_.empty();
  session_ = std::make_unique<ModelSession>(so, std::move(files.text));
  Model& m = session_->model();
  if (!args.adapter.empty()) {
    adapter_ = std::make_unique<LoraAdapter>(LoraAdapter::load_peft(args.adapter, m));
  } else {
    ModelArguments resolved = args;  // the commands resolve first; callers that did not, here
    resolved.resolve_target_modules();
    adapter_ = std::make_unique<LoraAdapter>(
        LoraAdapter::init(resolved.lora_config(), m, args.adapter_init_seed(int64_t(seed))));
  }
  adapter_->to_device(session_->ctx());
  base_model_name_ = std::filesystem::path(args.model).lexically_normal().string();
}

// The adapter's device copy goes before the session's device.
TrainSession::~TrainSession() {
  adapter_.reset();
}

const tok::Tokenizer& TrainSession::tokenizer() const {
  return session_->require_tokenizer("training");
}

void check_output_dir(const TrainingArguments& args) {
  if (args.dry_run) return;
  check_run_dir_writable(args.output_dir);
  const bool resuming =
      !args.resume_from_checkpoint.empty() && args.resume_from_checkpoint != "false";
  claim_run_dir(args.output_dir, resuming, args.overwrite_output_dir);
}

RunControl::RunControl(const TrainingArguments& args) {
  const std::string from = resume_checkpoint(args.resume_from_checkpoint, args.output_dir);
  if (!from.empty()) {
    resumed_step_ = std::max<int64_t>(checkpoint_step(from), 0);
    std::filesystem::path p = std::filesystem::path(from).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();
    std::error_code ec;
    const bool in_run_dir = std::filesystem::equivalent(
        p.has_parent_path() ? p.parent_path() : std::filesystem::path("."), args.output_dir, ec);
    fmt::print(stderr, "resuming from {}{}\n", p.filename().string(),
               in_run_dir ? "" : fmt::format(" ({})", from));
  }
  start_ = Clock::now();
}

std::string RunControl::eta(int64_t step, int64_t total_steps) {
  const double elapsed = seconds_since(start_);
  const int64_t done = step - resumed_step_;
  return format_duration(elapsed / double(std::max<int64_t>(done, 1)) * double(total_steps - step));
}

void RunControl::print_done(int64_t total_steps, const std::string& dir,
                            const std::string& what) const {
  if (resumed_step_ >= total_steps) {
    fmt::print(
        "nothing to train: the run is at step {} of {}; give a larger max_steps (or "
        "num_train_epochs) to continue it\n",
        resumed_step_, total_steps);
    return;
  }
  fmt::print("trained {}{}; {} in {}\n", counted(total_steps - resumed_step_, "step"),
             resumed_step_ > 0 ? fmt::format(" ({} to {})", resumed_step_ + 1, total_steps) : "",
             what, dir);
}

void write_run_config(const std::string& dir, const std::string& yaml) {
  prepare_run_dir(dir);
  write_file_replacing((std::filesystem::path(dir) / "config.yaml").string(), yaml);
}

void report_memory_plan(TrainSession& ts, const std::string& title, size_t optimizer_state_bytes,
                        const std::vector<PlanPart>& parts, size_t scratch_bytes, bool print,
                        const std::string& hint) {
  auto mib = [](size_t b) { return double(b) / double(1 << 20); };
  Context& ctx = ts.ctx();
  const size_t params = size_t(ts.adapter().master_params().numel());
  const size_t scratch = std::max(scratch_bytes, ops::scratch_capacity(ctx));
  const size_t gemm = ops::gemm_workspace_bytes(ctx);
  std::vector<PlanPart> all = {{"weights", model_weight_bytes(ts.model()), "", true},
                               {"adapter", ts.adapter().nbytes() + params * 4,
                                fmt::format("{} fp32 values + gradients", params), true},
                               {"optimizer state", optimizer_state_bytes, "", true}};
  all.insert(all.end(), parts.begin(), parts.end());
  all.push_back(
      {"workspace", scratch + gemm,
       fmt::format("scratch arena {:.1f}, GEMM workspace {:.1f}", mib(scratch), mib(gemm)), true});
  const size_t budget = ops::device_memory_budget(ctx);
  std::vector<MemoryPart> device_parts;
  for (const PlanPart& p : all)
    if (p.in_total) device_parts.push_back({p.name, p.bytes});
  const size_t total = memory_parts_total(device_parts);
  if (print) {
    fmt::print("{}:\n", title);
    for (const PlanPart& p : all)
      fmt::print("  {:<18} {:10.1f} MiB{}\n", p.name, mib(p.bytes),
                 p.note.empty() ? "" : fmt::format("  ({})", p.note));
    fmt::print("  {:<18} {:10.1f} MiB{}\n", "total", mib(total),
               ops::device_region_info(ctx).on ? "  (all in the one device region)" : "");
    if (budget > 0)
      fmt::print("  {:<18} {:10.1f} MiB  (gpu_memory; {})\n", "budget", mib(budget),
                 total <= budget ? fmt::format("{} left", gib_text(budget - total))
                                 : fmt::format("{} over", gib_text(total - budget)));
    if (!ts.estimate_reason().empty())
      fmt::print("this plan is an estimate for --device {}: {}\n", device_name(ctx.device),
                 ts.estimate_reason());
    std::fflush(stdout);  // the plan before an error about it
  }
  if (budget > 0) check_memory_budget(budget, device_parts, hint);
}

std::string training_budget_hint(const TrainingArguments& args, const std::string& sizes) {
  const char* switches = !args.gradient_checkpointing  ? ", turn on gradient_checkpointing"
                         : !args.activation_offloading ? ", turn on activation_offloading"
                                                       : "";
  return fmt::format("lower {}{}, or give a larger gpu_memory", sizes, switches);
}

namespace {

// The offloaded layer inputs of a pass, in host memory: listed, not counted.
PlanPart offloaded_part(const PassPlan& plan) {
  return {"host (offloaded)", plan.host_bytes, "checkpointed layer inputs, not in the total",
          false};
}

}  // namespace

void report_pass_memory_plan(TrainSession& ts, const std::string& title,
                             size_t optimizer_state_bytes, const PassPlan& plan, bool print,
                             const std::string& hint, std::vector<PlanPart> extra) {
  std::vector<PlanPart> parts = std::move(extra);
  parts.push_back({"saved activations", plan.saved_bytes, "", true});
  parts.push_back({"KV", plan.kv_bytes, "", true});
  if (plan.host_bytes > 0) parts.push_back(offloaded_part(plan));
  report_memory_plan(ts, title, optimizer_state_bytes, parts, plan.scratch_bytes, print, hint);
}

std::vector<PlanPart> rollout_plan_parts(TrainSession& ts, const RolloutMemoryPlan& p) {
  auto mib = [](size_t b) { return double(b) / double(1 << 20); };
  // Without the device and a budget its free memory is unknown: the pool is what the engine
  // can use.
  const std::string kv_bound =
      ops::device_memory_left(ts.ctx()) || ts.ctx().device == Device::cpu
          ? ""
          : "; the KV pool holds max_num_seqs sequences of the full context, which a device "
            "with less free memory bounds";
  const RewardModelsPlan& rm = p.reward_models;
  std::vector<PlanPart> parts = {
      {"standby region", p.standby_region_bytes,
       fmt::format("the {} of the engine's KV pool, {:.1f} MiB, the training pass: saved "
                   "activations {:.1f} + KV {:.1f}{}{}",
                   rm.count > 0 ? "largest" : "larger", mib(p.engine_kv_bytes),
                   mib(p.pass.saved_bytes), mib(p.pass.kv_bytes),
                   rm.count > 0 ? fmt::format(", and the reward models' scoring of a round: KV "
                                              "{:.1f}",
                                              mib(rm.scoring.kv_bytes))
                                : "",
                   kv_bound),
       true}};
  if (rm.count > 0)
    parts.push_back({"reward models", rm.weights_bytes + rm.adapter_bytes,
                     fmt::format("{}: weights of their own {:.1f}, adapters {:.1f}", rm.count,
                                 mib(rm.weights_bytes), mib(rm.adapter_bytes)),
                     true});
  if (p.reference_adapter_bytes > 0)
    parts.push_back({"reference adapter", p.reference_adapter_bytes,
                     "the adapter the run continues from, frozen", true});
  if (p.pass.host_bytes > 0) parts.push_back(offloaded_part(p.pass));
  return parts;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(std::llround(s));
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace fp8rl::cli
