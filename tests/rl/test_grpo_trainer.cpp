// The GRPO loop on the demo model (examples/demo): TRL's metrics every step, checkpoints and
// an exact resume, non-finite rewards skipped and counted, a failing reward process stopping
// the run with the last checkpoint intact; and the DPO loop's resume.
#include <gtest/gtest.h>
#include <algorithm>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "cli/train_session.h"
#include "core/check.h"
#include "model/kv_cache.h"
#include "rl/dpo_trainer.h"
#include "rl/grpo_trainer.h"
#include "rl/online_dpo_config.h"
#include "rl/reward_config.h"
#include "rl/reward_model.h"
#include "tokenizer/tokenizer.h"
#include "train/run_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
const std::string kDemo = FP8RL_SOURCE_DIR "/examples/demo";

fs::path temp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("fp8rl_grpo_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

GrpoConfig small_config(const fs::path& out) {
  GrpoConfig c;
  c.model = kDemo + "/model";
  c.data = kDemo + "/train.jsonl";
  c.output_dir = out.string();
  c.fp8 = "row";
  c.lora_r = 8;
  c.lora_alpha = 16;
  c.lora_dropout = 0.0;
  c.lora_target_modules = std::vector<std::string>{"all-linear"};
  c.num_generations = 4;
  c.per_device_train_batch_size = 8;  // 2 prompts x 4 completions per step
  c.max_completion_length = 4;
  c.max_prompt_length = 32;
  c.learning_rate = 5e-4;
  c.lr_scheduler_type = LrSchedulerType::constant;
  c.max_steps = 4;
  c.save_steps = 2;
  c.seed = 7;
  c.rewards =
      nlohmann::json::parse(R"([{"type": "answer_match", "column": "answer", "mode": "numeric"}])");
  return c;
}

struct GrpoRun {
  std::vector<float> params;
  std::vector<nlohmann::json> metrics;
};

GrpoRun run_grpo(const GrpoConfig& c, RewardSet rewards) {
  cli::TrainSession ts(c, uint64_t(c.seed));
  load_reward_models(rewards, {&ts.ctx(), &ts.model()});
  const auto& chat = ts.tokenizer_setup().chat;
  PromptDataOptions d;
  d.max_prompt_length = c.max_prompt_length;
  std::vector<PromptExample> prompts =
      read_prompt_dataset(c.data, ts.tokenizer(), chat ? &*chat : nullptr, d);
  prompts.resize(64);
  GrpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), &ts.tokenizer(), ts.session().eos_ids(),
                      std::move(prompts), c, std::move(rewards), "demo");
  if (c.evaluates()) {
    std::vector<PromptExample> eval =
        read_prompt_dataset(c.eval_dataset, ts.tokenizer(), chat ? &*chat : nullptr, d);
    eval.resize(16);
    trainer.set_eval_data(std::move(eval));
  }
  trainer.run();
  GrpoRun r;
  const TensorView p = ts.adapter().master_params();
  r.params.assign(p.ptr<float>(), p.ptr<float>() + p.numel());
  std::ifstream f(c.output_dir + "/metrics.jsonl");
  for (std::string l; std::getline(f, l);) r.metrics.push_back(nlohmann::json::parse(l));
  return r;
}

TEST(GrpoTrainer, LogsTrlMetricsAndResumesExactly) {
  const fs::path a = temp_dir("a"), b = temp_dir("b");
  GrpoConfig c = small_config(a);
  const GrpoRun full = run_grpo(c, make_reward_set(c.rewards));
  ASSERT_EQ(full.metrics.size(), 4u);
  for (const char* key : {"step",
                          "loss",
                          "grad_norm",
                          "learning_rate",
                          "reward",
                          "reward_std",
                          "rewards/answer_match/mean",
                          "frac_reward_zero_std",
                          "completions/mean_length",
                          "completions/min_length",
                          "completions/max_length",
                          "completions/clipped_ratio",
                          "clip_ratio/region_mean",
                          "entropy",
                          "sampling/sampling_logp_difference/mean",
                          "sampling/token_prob_error/mean",
                          "sampling/importance_sampling_ratio/mean",
                          "rollout_tokens_per_second",
                          "peak_memory_bytes/rollout",
                          "peak_memory_bytes/train",
                          "timing/rollout_seconds",
                          "timing/train_seconds",
                          "memory/standby_region_bytes"})
    EXPECT_TRUE(full.metrics[0].contains(key)) << key;
  // On the CPU the trainer recomputes the engine's logprobs exactly (ops/cpu/log_softmax.h).
  for (const nlohmann::json& m : full.metrics) {
    if (m.contains("sampling/sampling_logp_difference/max")) {
      EXPECT_EQ(m["sampling/sampling_logp_difference/max"].get<double>(), 0.0);
      EXPECT_EQ(m["sampling/token_prob_error/mean"].get<double>(), 1.0);  // exp(0)
    }
  }
  EXPECT_GT(full.metrics[0]["peak_memory_bytes/rollout"].get<double>(), 0);
  EXPECT_GT(full.metrics[0]["peak_memory_bytes/train"].get<double>(), 0);
  ASSERT_TRUE(fs::exists(a / "checkpoint-2" / "trainer_state.safetensors"));
  ASSERT_TRUE(fs::exists(a / "samples.jsonl"));
  // num_completions_to_print null (TRL's default): every completion of each round, so a step's
  // rows average to its logged reward.
  {
    std::map<int64_t, std::vector<double>> rewards;
    std::ifstream f(a / "samples.jsonl");
    for (std::string l; std::getline(f, l);) {
      const nlohmann::json s = nlohmann::json::parse(l);
      rewards[s["step"].get<int64_t>()].push_back(s["reward"].get<double>());
    }
    ASSERT_EQ(rewards.size(), 4u);
    for (const nlohmann::json& m : full.metrics) {
      const std::vector<double>& r = rewards[m["step"].get<int64_t>()];
      ASSERT_EQ(r.size(), 8u);  // 2 prompts x 4
      EXPECT_NEAR(std::accumulate(r.begin(), r.end(), 0.0) / 8, m["reward"].get<double>(), 1e-12);
    }
  }
  // Resume from step 2 into another directory: the same adapter at step 4, bit for bit.
  GrpoConfig r = small_config(b);
  r.resume_from_checkpoint = (a / "checkpoint-2").string();
  const GrpoRun resumed = run_grpo(r, make_reward_set(r.rewards));
  ASSERT_EQ(resumed.metrics.size(), 2u);
  EXPECT_EQ(resumed.metrics[1]["loss"], full.metrics[3]["loss"]);
  EXPECT_EQ(resumed.params, full.params);
  // Resumed in its own run directory: the lines past the checkpoint are replaced, not
  // appended, so samples.jsonl reads as the uninterrupted run's (samples are deterministic).
  const fs::path again = temp_dir("again");
  fs::copy(a, again, fs::copy_options::recursive);
  GrpoConfig ra = small_config(again);
  ra.resume_from_checkpoint = (again / "checkpoint-2").string();
  EXPECT_EQ(run_grpo(ra, make_reward_set(ra.rewards)).metrics.size(), 4u);
  const auto slurp = [](const fs::path& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(slurp(again / "samples.jsonl"), slurp(a / "samples.jsonl"));
  // Control: a different seed trains another adapter.
  GrpoConfig other = small_config(temp_dir("c"));
  other.seed = 8;
  EXPECT_NE(run_grpo(other, make_reward_set(other.rewards)).params, full.params);
}

// Online DPO (fp8rl online-dpo): TRL's OnlineDPOConfig run by the GRPO loop, 4 prompts (8
// completions) per step.
OnlineDpoConfig small_online_dpo_config(const fs::path& out) {
  const GrpoConfig g = small_config(out);
  OnlineDpoConfig c;
  static_cast<GrpoConfig&>(c) = g;
  c.num_generations = 2;
  c.per_device_train_batch_size = 4;  // prompts, as TRL counts them
  c.temperature = 1.0;
  // Two tokens: most completions stop before their EOS (answers are 2-3 digits, then EOS),
  // so the missing-EOS penalty applies.
  c.max_completion_length = 2;
  c.max_prompt_length.reset();
  c.max_length = 64;
  c.beta = 0.0;
  c.vllm_importance_sampling_correction = false;
  c.missing_eos_penalty = 0.5;
  return c;
}

std::vector<nlohmann::json> read_samples(const fs::path& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream f(dir / "samples.jsonl");
  for (std::string l; std::getline(f, l);) out.push_back(nlohmann::json::parse(l));
  return out;
}

// Each prompt's two completions sit side by side in samples.jsonl with their rewards: the
// logged scores_margin is the mean over the pairs of |r_a - r_b| (the better one chosen), and
// objective/scores the mean reward less missing_eos_penalty for the completions without EOS.
// The first step's policy is the reference (a fresh adapter): kl 0 and the sigmoid loss log 2.
// A run resumed from the step-2 checkpoint ends with the same adapter, bit for bit. Controls:
// without the penalty the scores are the plain mean; another seed trains another adapter.
TEST(OnlineDpoTrainer, PairsFollowTheRewardsPenaltyAppliesAndResumesExactly) {
  const fs::path a = temp_dir("odpo_a"), b = temp_dir("odpo_b");
  const OnlineDpoConfig c = small_online_dpo_config(a);
  c.validate();
  const GrpoRun full = run_grpo(c.trainer_config(), make_reward_set(c.rewards));
  ASSERT_EQ(full.metrics.size(), 4u);
  const std::vector<nlohmann::json> samples = read_samples(a);
  ASSERT_EQ(samples.size(), 32u);  // 4 steps x 4 prompts x 2
  double eos_seen = 0, margins_seen = 0;
  for (size_t step = 0; step < 4; ++step) {
    const nlohmann::json& m = full.metrics[step];
    for (const char* key :
         {"objective/kl", "objective/entropy", "objective/non_score_reward",
          "objective/rlhf_reward", "objective/scores", "objective/scores_margin", "rewards/chosen",
          "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
          "logps/rejected", "val/contain_eos_token", "beta", "loss", "reward"})
      ASSERT_TRUE(m.contains(key)) << key;
    double margin = 0, sum = 0;
    for (size_t i = 0; i < 4; ++i) {
      const double ra = samples[step * 8 + 2 * i]["reward"].get<double>();
      const double rb = samples[step * 8 + 2 * i + 1]["reward"].get<double>();
      EXPECT_EQ(samples[step * 8 + 2 * i]["prompt"], samples[step * 8 + 2 * i + 1]["prompt"]);
      sum += ra + rb;
      margin += std::fabs(ra - rb);
    }
    const double eos = m["val/contain_eos_token"].get<double>();
    eos_seen += eos;
    // With no EOS in the step every reward loses the same penalty: the margins are |r_a - r_b|.
    if (eos == 0.0) {
      EXPECT_NEAR(m["objective/scores_margin"].get<double>(), margin / 4, 1e-12) << step;
      margins_seen += margin;
    }
    EXPECT_GE(m["objective/scores_margin"].get<double>(), 0.0);
    EXPECT_NEAR(m["objective/scores"].get<double>(), sum / 8 - 0.5 * (1 - eos), 1e-12) << step;
    EXPECT_EQ(m["beta"].get<double>(), 0.1);
  }
  EXPECT_LT(eos_seen, 4.0) << "every completion ended: the penalty check is vacuous";
  EXPECT_GT(margins_seen, 0.0) << "every pair tied: the choice check is vacuous";
  EXPECT_EQ(full.metrics[0]["objective/kl"].get<double>(), 0.0);
  EXPECT_NEAR(full.metrics[0]["loss"].get<double>(), std::log(2.0), 1e-12);
  EXPECT_NE(full.metrics[1]["objective/kl"].get<double>(), 0.0);
  // Resume from step 2 into another directory.
  OnlineDpoConfig r = small_online_dpo_config(b);
  r.resume_from_checkpoint = (a / "checkpoint-2").string();
  const GrpoRun resumed = run_grpo(r.trainer_config(), make_reward_set(r.rewards));
  ASSERT_EQ(resumed.metrics.size(), 2u);
  EXPECT_EQ(resumed.metrics[1]["loss"], full.metrics[3]["loss"]);
  EXPECT_EQ(resumed.params, full.params);
  // Controls.
  OnlineDpoConfig plain = small_online_dpo_config(temp_dir("odpo_plain"));
  plain.missing_eos_penalty.reset();
  plain.max_steps = 1;
  const GrpoRun p = run_grpo(plain.trainer_config(), make_reward_set(plain.rewards));
  const std::vector<nlohmann::json> ps = read_samples(plain.output_dir);
  double sum = 0;
  for (size_t i = 0; i < 8; ++i) sum += ps[i]["reward"].get<double>();
  EXPECT_NEAR(p.metrics[0]["objective/scores"].get<double>(), sum / 8, 1e-12);
  OnlineDpoConfig other = small_online_dpo_config(temp_dir("odpo_seed"));
  other.seed = 8;
  EXPECT_NE(run_grpo(other.trainer_config(), make_reward_set(other.rewards)).params, full.params);
}

// OnlineDPOConfig's ranges and the GRPO keys that do not apply are errors naming the key.
TEST(OnlineDpoTrainer, BadKeysAreErrorsNamingThem) {
  const auto fails = [](const std::function<void(OnlineDpoConfig&)>& edit,
                        const std::string& fragment) {
    OnlineDpoConfig c = small_online_dpo_config(temp_dir("odpo_bad"));
    edit(c);
    try {
      c.validate();
      ADD_FAILURE() << "accepted: " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  fails([](OnlineDpoConfig& c) { c.dpo_beta = {0.1, -1.0}; }, "beta holds -1");
  fails([](OnlineDpoConfig& c) { c.dpo_beta.clear(); }, "beta is an empty list");
  fails([](OnlineDpoConfig& c) { c.dpo_loss_type = DpoLossType::hinge; }, "loss_type");
  fails([](OnlineDpoConfig& c) { c.missing_eos_penalty = std::nan(""); }, "missing_eos_penalty");
  fails([](OnlineDpoConfig& c) { c.max_length = 2; }, "max_length (2) must exceed max_new_tokens");
  fails([](OnlineDpoConfig& c) { c.num_generations = 3; }, "2 completions per prompt");
  fails([](OnlineDpoConfig& c) { c.num_iterations = 2; }, "num_iterations");
  fails([](OnlineDpoConfig& c) { c.temperature = 0; }, "temperature");
  OnlineDpoConfig ok = small_online_dpo_config(temp_dir("odpo_ok"));
  EXPECT_NO_THROW(ok.validate());
}

// TRL shuffles the generation batch before cutting it into micro-batches; the order is a
// permutation fixed by (seed, round).
TEST(GrpoTrainer, GenerationBatchOrderIsASeededPermutation) {
  const std::vector<size_t> o = generation_batch_order(42, 3, 64);
  std::vector<size_t> sorted = o;
  std::sort(sorted.begin(), sorted.end());
  std::vector<size_t> identity(64);
  std::iota(identity.begin(), identity.end(), size_t(0));
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(o, identity);                           // shuffled (1/64! to be the identity by chance)
  EXPECT_EQ(generation_batch_order(42, 3, 64), o);  // reproducible
  // Controls: another round or another seed orders differently.
  EXPECT_NE(generation_batch_order(42, 4, 64), o);
  EXPECT_NE(generation_batch_order(43, 3, 64), o);
  EXPECT_TRUE(generation_batch_order(42, 0, 0).empty());
  EXPECT_EQ(generation_batch_order(42, 0, 1), std::vector<size_t>{0});
}

// A round cut into two micro-batches (steps_per_generation 2) after the shuffle, one optimizer
// step each: the same seed trains the same adapter, bit for bit, and a resume from the
// checkpoint between the two steps (inside the round, which it stores) replays it.
TEST(GrpoTrainer, ShuffledRoundsAreReproducible) {
  GrpoConfig c = small_config(temp_dir("split_a"));
  c.per_device_train_batch_size = 4;  // half a round: 2 prompts x 4 completions per round
  c.gradient_accumulation_steps = 1;
  c.steps_per_generation = 2;
  c.max_steps = 2;
  c.save_steps = 1;
  const GrpoRun a = run_grpo(c, make_reward_set(c.rewards));
  GrpoConfig again = c;
  again.output_dir = temp_dir("split_b").string();
  EXPECT_EQ(run_grpo(again, make_reward_set(again.rewards)).params, a.params);
  GrpoConfig resumed = c;
  resumed.output_dir = temp_dir("split_c").string();
  resumed.resume_from_checkpoint = (fs::path(c.output_dir) / "checkpoint-1").string();
  EXPECT_EQ(run_grpo(resumed, make_reward_set(resumed.rewards)).params, a.params);
}

// on_policy_exact: the mismatch is checked to be exactly zero every round and no correction is
// applied. With a zero mismatch TRL's correction weights are all exactly 1, so the run trains
// the very adapter the default (corrected) run does: the mode costs nothing on the CPU.
// Evaluations (eval_strategy steps, every 2 steps of 3, and eval_on_start) log TRL's generation
// metrics with the eval_ prefix on steps 0 and 2 only, and leave training as it is: the same
// metrics and, bit for bit, the same adapter as the run without them. Greedy eval decoding
// (eval_generation_kwargs) makes the 2 completions of an eval prompt the same: every group's
// reward std is 0. Control: a learning rate 1e-6 larger gives another adapter, so the
// comparison sees a change that small.
TEST(GrpoTrainer, EvaluationsLogTheirStepsOnlyAndLeaveTrainingAsItIs) {
  GrpoConfig plain = small_config(temp_dir("plain"));
  plain.max_steps = 3;
  const GrpoRun base = run_grpo(plain, make_reward_set(plain.rewards));
  GrpoConfig c = small_config(temp_dir("eval"));
  c.max_steps = 3;
  c.eval_dataset = kDemo + "/eval.jsonl";
  c.eval_strategy = EvalStrategy::steps;
  c.eval_steps = 2;
  c.eval_on_start = true;
  c.num_generations_eval = 2;
  c.per_device_eval_batch_size = 8;  // 4 prompts x 2 completions; 16 prompts in 4 batches
  c.eval_generation_kwargs = {{"temperature", 0.0}};
  const GrpoRun run = run_grpo(c, make_reward_set(c.rewards));
  ASSERT_EQ(run.metrics.size(), 4u);  // step 0 (eval_on_start), then 1..3
  for (size_t i = 0; i < run.metrics.size(); ++i) {
    const nlohmann::json& m = run.metrics[i];
    EXPECT_EQ(m["step"], int64_t(i));
    const bool eval_step = i % 2 == 0;
    for (const char* key : {"eval_reward", "eval_reward_std", "eval_rewards/answer_match/mean",
                            "eval_completions/mean_length", "eval_completions/clipped_ratio",
                            "eval_frac_reward_zero_std", "eval_runtime"})
      EXPECT_EQ(m.contains(key), eval_step) << key << " at step " << i;
    if (eval_step) {
      EXPECT_EQ(m["eval_frac_reward_zero_std"].get<double>(), 1.0) << "greedy: equal completions";
      EXPECT_GE(m["eval_reward"].get<double>(), 0.0);
      EXPECT_LE(m["eval_reward"].get<double>(), 1.0);
    }
    if (i == 0) {
      EXPECT_FALSE(m.contains("loss"));  // the evaluation alone
      continue;
    }
    nlohmann::json train = m, expected = base.metrics[i - 1];
    for (nlohmann::json* j : {&train, &expected})
      for (auto it = j->begin(); it != j->end();)
        it = (it.key().starts_with("eval_") || it.key().find("seconds") != std::string::npos ||
              it.key().find("per_second") != std::string::npos ||
              it.key().starts_with("peak_memory") || it.key().starts_with("memory/"))
                 ? j->erase(it)
                 : std::next(it);
    EXPECT_EQ(train, expected) << "step " << i;
  }
  EXPECT_EQ(run.params, base.params);
  GrpoConfig nudged = small_config(temp_dir("nudged"));
  nudged.max_steps = 3;
  nudged.learning_rate *= 1 + 1e-6;
  EXPECT_NE(run_grpo(nudged, make_reward_set(nudged.rewards)).params, base.params);
}

TEST(GrpoTrainer, OnPolicyExactEqualsTheCorrectedRunOnTheCpu) {
  GrpoConfig c = small_config(temp_dir("exact_default"));
  c.max_steps = 2;
  c.save_steps = 0;
  const GrpoRun corrected = run_grpo(c, make_reward_set(c.rewards));
  GrpoConfig e = small_config(temp_dir("exact"));
  e.max_steps = 2;
  e.save_steps = 0;
  e.on_policy_exact = true;
  const GrpoRun exact = run_grpo(e, make_reward_set(e.rewards));
  EXPECT_EQ(exact.params, corrected.params);
  EXPECT_EQ(exact.metrics[0]["sampling/sampling_logp_difference/max"].get<double>(), 0.0);
  EXPECT_FALSE(exact.metrics[0].contains("sampling/importance_sampling_ratio/mean"));
  EXPECT_TRUE(corrected.metrics[0].contains("sampling/importance_sampling_ratio/mean"));
  // Control: the run trains (the adapter's B starts at zero).
  EXPECT_TRUE(
      std::any_of(exact.params.begin(), exact.params.end(), [](float v) { return v != 0.0f; }));
}

// TRL's loss knobs reach the micro-steps: each trains another adapter than the same run
// without it (the negative control for every one of them), and sapo logs no clip ratios.
TEST(GrpoTrainer, LossKnobsReachTheLoop) {
  const auto config = [](const std::string& name) {
    GrpoConfig c = small_config(temp_dir(name));
    c.max_steps = 2;
    c.save_steps = 0;
    c.num_iterations = 2;  // the second pass is off-policy: ratios away from 1 for delta
    return c;
  };
  const auto train = [](const GrpoConfig& c) { return run_grpo(c, make_reward_set(c.rewards)); };
  const GrpoRun base = train(config("knobs_base"));
  GrpoConfig c = config("knobs_delta");
  c.delta = 1.0;  // caps every ratio above 1
  EXPECT_NE(train(c).params, base.params);
  c = config("knobs_entropy");
  c.top_entropy_quantile = 0.2;
  EXPECT_NE(train(c).params, base.params);
  c = config("knobs_sapo");
  c.loss_type = GrpoLossType::sapo;
  const GrpoRun sapo = train(c);
  EXPECT_FALSE(sapo.metrics[0].contains("clip_ratio/region_mean"));
  EXPECT_TRUE(base.metrics[0].contains("clip_ratio/region_mean"));
  c.sapo_temperature_neg = c.sapo_temperature_pos = 3.0;
  c.output_dir = temp_dir("knobs_sapo_tau").string();
  EXPECT_NE(train(c).params, sapo.params);
  c = config("knobs_gspo");
  c.loss_type = GrpoLossType::grpo;
  c.importance_sampling_level = ImportanceSamplingLevel::sequence;
  const GrpoRun gspo = train(c);
  c.loss_type = GrpoLossType::luspo;
  c.output_dir = temp_dir("knobs_luspo").string();
  EXPECT_NE(train(c).params, gspo.params);
}

// generation_kwargs reach the engine: min_tokens = max_completion_length makes every
// completion run to the limit.
TEST(GrpoTrainer, GenerationKwargsReachTheEngine) {
  GrpoConfig c = small_config(temp_dir("gen_kwargs"));
  c.max_steps = 1;
  c.save_steps = 0;
  c.generation_kwargs = {{"min_tokens", 4}};
  const GrpoRun r = run_grpo(c, make_reward_set(c.rewards));
  EXPECT_EQ(r.metrics[0]["completions/min_length"].get<double>(), 4.0);
  EXPECT_EQ(r.metrics[0]["completions/clipped_ratio"].get<double>(), 1.0);
  // Control: the demo model ends some completions early without it.
  c.generation_kwargs = nullptr;
  c.output_dir = temp_dir("gen_kwargs_control").string();
  const GrpoRun control = run_grpo(c, make_reward_set(c.rewards));
  EXPECT_LT(control.metrics[0]["completions/min_length"].get<double>(), 4.0);
}

TEST(GrpoTrainer, NonFiniteRewardsAreSkippedAndCounted) {
  GrpoConfig c = small_config(temp_dir("nan"));
  c.max_steps = 1;
  // A process that scores every sample NaN: every row is counted and none is trained on, so
  // the gradient is zero and AdamW (no weight decay) leaves the adapter as initialized.
  const GrpoRun run = run_grpo(
      c, make_reward_process_set(
             "while read -r line; do echo '{\"rewards\": [\"NaN\",\"NaN\",\"NaN\",\"NaN\",\"NaN\","
             "\"NaN\",\"NaN\",\"NaN\"]}'; done"));
  ASSERT_EQ(run.metrics.size(), 1u);
  EXPECT_EQ(run.metrics[0]["rewards/non_finite_total"], 8);
  EXPECT_EQ(run.metrics[0]["loss"], 0.0);
  cli::TrainSession fresh(c, uint64_t(c.seed));
  const TensorView p = fresh.adapter().master_params();
  EXPECT_EQ(run.params, std::vector<float>(p.ptr<float>(), p.ptr<float>() + p.numel()));
}

// A reward model over the policy's own (FP8) weights with a SEQ_CLS adapter: its scores reach
// the metrics and the total reward carries its weight.
TEST(GrpoTrainer, ARewardModelScoresTheRoundsWithItsWeight) {
  const fs::path out = temp_dir("rm");
  GrpoConfig c = small_config(out);
  c.max_steps = 1;
  const fs::path rm = temp_dir("rm_adapter");
  {
    const Model base = Model::load(kDemo + "/model");
    LoraConfig lc;
    lc.target_modules = {"q_proj"};
    lc.sequence_classification = true;
    LoraAdapter::init(lc, base, 5).save_peft(rm.string(), "demo");
  }
  c.rewards = nlohmann::json::array({{{"type", "reward_model"},
                                      {"model", kDemo + "/model"},
                                      {"adapter", rm.string()},
                                      {"weight", 2.0}}});
  const GrpoRun run = run_grpo(c, make_reward_set(c.rewards));
  ASSERT_EQ(run.metrics.size(), 1u);
  const nlohmann::json& m = run.metrics[0];
  ASSERT_TRUE(m.contains("rewards/reward_model/mean"));
  const double mean = m["rewards/reward_model/mean"].get<double>();
  EXPECT_NE(mean, 0.0);
  EXPECT_NEAR(m["reward"].get<double>(), 2.0 * mean, 1e-9 * std::fabs(mean));
  EXPECT_GT(m["rewards/reward_model/std"].get<double>(), 0.0);
  fs::remove_all(out);
  fs::remove_all(rm);
}

// A reward model's scoring of a round is a phase of the standby region, planned with the
// others: with a small engine pool and a round of 64 completions scored at once (16 micro-batches
// of 4), the scoring's KV is the largest phase and sizes the region. Control: the same run with
// a rule reward plans no scoring and a smaller region. The run then scores inside the plan.
TEST(GrpoTrainer, RewardModelScoringIsAPhaseOfTheMemoryPlan) {
  const fs::path rm = temp_dir("rm_plan_adapter");
  {
    const Model base = Model::load(kDemo + "/model");
    LoraConfig lc;
    lc.target_modules = {"q_proj"};
    lc.sequence_classification = true;
    LoraAdapter::init(lc, base, 5).save_peft(rm.string(), "demo");
  }
  const auto plan_of = [&](const nlohmann::json& reward_specs, const fs::path& out, bool train) {
    GrpoConfig c = small_config(out);
    c.max_steps = 1;
    c.per_device_train_batch_size = 4;
    c.steps_per_generation = 16;
    c.rewards = reward_specs;
    cli::TrainSession ts(c, uint64_t(c.seed));
    // An engine pool of 32 blocks: smaller than the scoring's.
    c.kv_memory =
        32.0 * double(KvPool::block_bytes(ts.model().config(), ts.ctx())) / double(1ull << 30);
    RewardSet rewards = make_reward_set(c.rewards);
    load_reward_models(rewards, {&ts.ctx(), &ts.model()});
    const auto& chat = ts.tokenizer_setup().chat;
    PromptDataOptions d;
    d.max_prompt_length = c.max_prompt_length;
    std::vector<PromptExample> prompts =
        read_prompt_dataset(c.data, ts.tokenizer(), chat ? &*chat : nullptr, d);
    prompts.resize(64);
    size_t longest = 0;
    for (const PromptExample& e : prompts) longest = std::max(longest, e.ids.size());
    GrpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), &ts.tokenizer(), ts.session().eos_ids(),
                        std::move(prompts), c, std::move(rewards), "demo");
    const RolloutMemoryPlan p = trainer.memory_plan();
    std::vector<nlohmann::json> metrics;
    if (train) {
      trainer.run();
      std::ifstream f(c.output_dir + "/metrics.jsonl");
      for (std::string l; std::getline(f, l);) metrics.push_back(nlohmann::json::parse(l));
    }
    return std::make_tuple(p, metrics, int64_t(longest) + c.max_completion_length,
                           KvPool::block_bytes(ts.model().config(), ts.ctx()));
  };
  const fs::path a = temp_dir("rm_plan"), b = temp_dir("rm_plan_control");
  const auto [with, metrics, length, block] = plan_of(
      nlohmann::json::array(
          {{{"type", "reward_model"}, {"model", kDemo + "/model"}, {"adapter", rm.string()}}}),
      a, true);
  const auto [without, unused, length2, block2] = plan_of(small_config(b).rewards, b, false);
  // 64 sequences of up to `length` tokens in one forward (under max_batch_tokens 4096): their
  // blocks are at most ceil((64 length + 15 x 64) / 16).
  ASSERT_LT(64 * length, 4096);
  EXPECT_EQ(with.reward_models.count, 1);
  EXPECT_EQ(with.reward_models.scoring.kv_blocks, (64 * length + 15 * 64 + 15) / 16);
  EXPECT_EQ(with.reward_models.scoring.kv_bytes,
            size_t(with.reward_models.scoring.kv_blocks) * block);
  EXPECT_GT(with.reward_models.scoring.scratch_bytes, 0u);
  EXPECT_GT(with.reward_models.adapter_bytes, 0u);
  EXPECT_EQ(with.reward_models.weights_bytes, 0u);  // the policy's weights, shared
  EXPECT_GT(with.reward_models.scoring.kv_bytes, with.engine_kv_bytes);
  EXPECT_GT(with.reward_models.scoring.kv_bytes, with.pass.region_bytes());
  EXPECT_EQ(with.standby_region_bytes, with.reward_models.scoring.kv_bytes);
  // Control: no reward model, no scoring phase; the region is the larger of the other two.
  EXPECT_EQ(without.reward_models.count, 0);
  EXPECT_EQ(without.reward_models.scoring.kv_bytes, 0u);
  EXPECT_EQ(without.standby_region_bytes,
            std::max(without.engine_kv_bytes, without.pass.region_bytes()));
  EXPECT_LT(without.standby_region_bytes, with.standby_region_bytes);
  // The run scored inside the plan: the region never grew.
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_TRUE(metrics[0].contains("rewards/reward_model/mean"));
  EXPECT_EQ(metrics[0]["memory/standby_region_bytes"].get<size_t>(), with.standby_region_bytes);
  (void)unused;
  (void)length2;
  (void)block2;
  for (const fs::path& d : {a, b, rm}) fs::remove_all(d);
}

TEST(GrpoTrainer, AFailingRewardProcessStopsTheRunWithTheCheckpointIntact) {
  const fs::path a = temp_dir("fail");
  GrpoConfig c = small_config(a);
  c.save_steps = 1;
  // Answers twice, then exits.
  const std::string cmd =
      "n=0; while read -r line; do n=$((n+1)); [ $n -gt 2 ] && exit 3; "
      "echo '{\"rewards\": [1,0,1,0,1,0,1,0]}'; done";
  try {
    run_grpo(c, make_reward_process_set(cmd, 10));
    FAIL() << "the run must stop";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exited with status 3"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(a / "checkpoint-2" / "adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(a / "checkpoint-3"));
  EXPECT_TRUE(latest_checkpoint(a.string()).ends_with("checkpoint-2"));
}

// A TRL-style Python reward function in `dir`/`name`.py run by the helper, with its stderr
// appended to `dir`/stderr.txt.
std::string python_reward(const fs::path& dir, const std::string& name, const std::string& code,
                          const std::string& function) {
  fs::create_directories(dir);
  std::ofstream(dir / (name + ".py")) << code;
  return fmt::format(
      "PYTHONPATH='{}/python:{}' PYTHONDONTWRITEBYTECODE=1 exec python3 -m fp8rl_reward {}:{} "
      "2>>'{}'",
      FP8RL_SOURCE_DIR, dir.string(), name, function, (dir / "stderr.txt").string());
}

// In a run on a conversational dataset (the demo's messages rows), a reward function gets what
// TRL passes: message lists, one assistant message per completion, the answer column and the
// trainer's state; what it logs reaches metrics.jsonl and samples.jsonl.
TEST(GrpoTrainer, PythonRewardsGetTrlArgumentsAndTheirLogsReachTheRunFiles) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const fs::path out = temp_dir("trl_args"), code = temp_dir("trl_args_code");
  GrpoConfig c = small_config(out);
  c.max_steps = 2;
  const std::string cmd = python_reward(code, "run_reward", R"(
def correct(prompts, completions, answer, trainer_state, completion_ids, log_metric, log_extra,
            **kwargs):
    assert prompts[0][-1]["role"] == "user", prompts[0]
    assert [len(c) for c in completions] == [1] * len(completions)
    assert completions[0][0]["role"] == "assistant"
    assert all(len(ids) > 0 for ids in completion_ids)
    log_metric("custom/global_step", trainer_state.global_step)
    log_metric("custom/max_steps", trainer_state.max_steps)
    log_metric("custom/epoch", trainer_state.epoch)
    log_extra("question", [p[-1]["content"] for p in prompts])
    return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]
)",
                                        "correct");
  const GrpoRun run = run_grpo(c, make_reward_process_set(cmd, 60));
  ASSERT_EQ(run.metrics.size(), 2u);
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(run.metrics[size_t(step)]["custom/global_step"], double(step));
    EXPECT_EQ(run.metrics[size_t(step)]["custom/max_steps"], 2.0);
    // The data drawn before the round: 2 of the 64 prompts per round.
    EXPECT_EQ(run.metrics[size_t(step)]["custom/epoch"], step * 2.0 / 64.0);
  }
  std::ifstream samples(out / "samples.jsonl");
  int64_t rows = 0;
  for (std::string l; std::getline(samples, l); ++rows) {
    const nlohmann::json s = nlohmann::json::parse(l);
    ASSERT_TRUE(s.contains("question")) << l;
    const std::string question = s["question"];
    EXPECT_TRUE(question.starts_with("What is ")) << l;
    // The rendered prompt holds the question it was logged for.
    EXPECT_NE(s["prompt"].get<std::string>().find(question), std::string::npos) << l;
  }
  EXPECT_GT(rows, 0);
}

// A logged metric or extra column named like fp8rl's own stops the run, naming it (the
// control, names of its own, is PythonRewardsGetTrlArgumentsAndTheirLogsReachTheRunFiles).
TEST(GrpoTrainer, LoggedNamesThatClashWithTheRunsOwnAreErrors) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const fs::path code = temp_dir("clash_code");
  const std::string module = R"(
def metric(completions, log_metric, **kwargs):
    log_metric("reward", 1.0)
    return [0.0] * len(completions)

def extra(completions, log_extra, **kwargs):
    log_extra("prompt", ["x"] * len(completions))
    return [0.0] * len(completions)

)";
  const auto error_of = [&](const std::string& function) -> std::string {
    GrpoConfig c = small_config(temp_dir("clash_" + function));
    c.max_steps = 1;
    try {
      run_grpo(c, make_reward_process_set(python_reward(code, "clash", module, function), 60));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("metric").find("logged the metric 'reward', a name fp8rl's own metrics use"),
            std::string::npos);
  EXPECT_NE(error_of("extra").find("logged the extra column 'prompt', a field samples.jsonl uses"),
            std::string::npos);
}

}  // namespace
}  // namespace fp8rl

namespace fp8rl {
namespace {

// Preference pairs of the demo task in `dir`/pairs.jsonl: chosen = the right sum, rejected = a
// wrong one.
std::string write_pairs(const fs::path& dir, const std::string& rejected_tail = "") {
  fs::create_directories(dir);
  const std::string data = (dir / "pairs.jsonl").string();
  std::ifstream in(kDemo + "/train.jsonl");
  std::ofstream out(data);
  std::string line;
  for (int i = 0; i < 64 && std::getline(in, line); ++i) {
    const nlohmann::json r = nlohmann::json::parse(line);
    const int answer = std::stoi(r["answer"].get<std::string>());
    nlohmann::json row;
    row["prompt"] = r["messages"];
    row["chosen"] = {{{"role", "assistant"}, {"content", std::to_string(answer)}}};
    row["rejected"] = {
        {{"role", "assistant"}, {"content", std::to_string(answer + 10) + rejected_tail}}};
    out << row.dump() << '\n';
  }
  return data;
}

DpoConfig small_dpo_config(const std::string& data, const fs::path& out, int64_t steps) {
  DpoConfig c;
  c.model = kDemo + "/model";
  c.data = data;
  c.output_dir = out.string();
  c.fp8 = "row";
  c.lora_r = 8;
  c.lora_alpha = 16;
  c.lora_dropout = 0.0;
  c.lora_target_modules = std::vector<std::string>{"all-linear"};
  c.per_device_train_batch_size = 8;
  c.learning_rate = 2e-3;
  c.lr_scheduler_type = LrSchedulerType::constant;
  c.max_steps = steps;
  c.save_steps = 0;
  return c;
}

struct DpoRun {
  std::vector<double> loss, accuracy;
};

DpoRun run_dpo(const DpoConfig& c) {
  cli::TrainSession ts(c, uint64_t(c.seed));
  const auto& chat = ts.tokenizer_setup().chat;
  PreferenceDataOptions d;
  d.eos_token_id = ts.tokenizer_setup().eos_token_id;
  DpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(),
                     read_preference_dataset(c.data, ts.tokenizer(), chat ? &*chat : nullptr, d), c,
                     "demo");
  DpoRun r;
  trainer.run([&](const DpoStepInfo& i) {
    r.loss.push_back(i.loss);
    r.accuracy.push_back(i.accuracy);
  });
  return r;
}

// DPO on the demo task. The loss starts at ln 2 (the adapter starts at B = 0: policy =
// reference) and falls; the implicit-reward accuracy rises above chance.
// DPO's disable_dropout (TRL's default true): lora_dropout stays in the config but training runs
// without it, exactly as with lora_dropout 0; with it false the dropout masks change the run.
TEST(DpoTrainer, DisableDropoutTrainsWithoutLoraDropout) {
  const fs::path dir = temp_dir("dpo_dropout");
  const std::string data = write_pairs(dir);
  DpoConfig off = small_dpo_config(data, dir / "off", 3);
  off.lora_dropout = 0.05;
  ASSERT_TRUE(off.disable_dropout);  // DPOConfig's default
  DpoConfig zero = small_dpo_config(data, dir / "zero", 3);
  zero.lora_dropout = 0.0;
  DpoConfig on = off;
  on.output_dir = (dir / "on").string();
  on.disable_dropout = false;
  const DpoRun a = run_dpo(off), b = run_dpo(zero), c = run_dpo(on);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_NE(a.loss, c.loss);  // control: the dropout is really there without the key
  fs::remove_all(dir);
}

TEST(DpoTrainer, PrefersTheChosenAnswers) {
  const fs::path dir = temp_dir("dpo");
  const DpoRun r = run_dpo(small_dpo_config(write_pairs(dir), dir / "run", 32));
  const std::vector<double>& loss = r.loss;
  ASSERT_EQ(loss.size(), 32u);
  EXPECT_NEAR(loss[0], std::log(2.0), 1e-6);  // policy == reference at the start
  EXPECT_LT(loss.back(), 0.6);
  EXPECT_GT(r.accuracy.back(), 0.6);
  std::printf("dpo loss %.4f -> %.4f, accuracy -> %.3f\n", loss[0], loss.back(), r.accuracy.back());
  fs::remove_all(dir);
}

// Evaluation (eval_strategy steps every 2 steps, eval_on_start) logs TRL's DPO metrics with the
// eval_ prefix on steps 0 and 2 only (not on the last, 3: transformers evaluates at the end
// only where the schedule lands). At step 0 the policy is the reference: the sigmoid loss is
// ln 2 and the implicit rewards 0.
TEST(DpoTrainer, EvaluationLogsTrlsEvalMetricsOnItsSteps) {
  const fs::path dir = temp_dir("dpo_eval");
  const std::string data = write_pairs(dir);
  DpoConfig c = small_dpo_config(data, dir / "run", 3);
  c.eval_dataset = data;
  c.eval_strategy = EvalStrategy::steps;
  c.eval_steps = 2;
  c.eval_on_start = true;
  c.per_device_eval_batch_size = 8;
  cli::TrainSession ts(c, uint64_t(c.seed));
  const auto& chat = ts.tokenizer_setup().chat;
  PreferenceDataOptions d;
  d.eos_token_id = ts.tokenizer_setup().eos_token_id;
  DpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(),
                     read_preference_dataset(c.data, ts.tokenizer(), chat ? &*chat : nullptr, d), c,
                     "demo");
  std::vector<PreferencePair> eval =
      read_preference_dataset(data, ts.tokenizer(), chat ? &*chat : nullptr, d);
  eval.resize(16);
  trainer.set_eval_data(std::move(eval));
  trainer.run();
  std::ifstream f(c.output_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["step"], int64_t(i));
    const bool eval_step = i == 0 || i == 2;
    for (const char* key :
         {"eval_loss", "eval_rewards/chosen", "eval_rewards/rejected", "eval_rewards/accuracies",
          "eval_rewards/margins", "eval_logps/chosen", "eval_logps/rejected", "eval_runtime"})
      EXPECT_EQ(lines[i].contains(key), eval_step) << key << " at step " << i;
  }
  EXPECT_NEAR(lines[0]["eval_loss"].get<double>(), std::log(2.0), 1e-6);
  EXPECT_EQ(lines[0]["eval_rewards/margins"].get<double>(), 0.0);
  EXPECT_LT(lines[2]["eval_loss"].get<double>(), lines[0]["eval_loss"].get<double>());
  fs::remove_all(dir);
}

// LD-DPO: with rejected answers longer than the chosen ones, ld_alpha changes the second
// step's loss (the first is ln 2 either way: policy == reference); ld_alpha 1 is plain DPO.
TEST(DpoTrainer, LdAlphaWeighsTheLongerCompletionsTail) {
  const fs::path dir = temp_dir("dpo_ld");
  const std::string data = write_pairs(dir, ", I am quite sure of it");
  const auto run = [&](std::optional<double> ld_alpha) {
    DpoConfig c = small_dpo_config(data, dir / "run", 2);
    c.ld_alpha = ld_alpha;
    const DpoRun r = run_dpo(c);
    fs::remove_all(dir / "run");
    return r;
  };
  const DpoRun plain = run(std::nullopt), ld = run(0.5), one = run(1.0);
  ASSERT_EQ(ld.loss.size(), 2u);
  EXPECT_NEAR(ld.loss[0], std::log(2.0), 1e-6);
  EXPECT_GT(std::fabs(ld.loss[1] - plain.loss[1]), 1e-4);
  EXPECT_NEAR(one.loss[1], plain.loss[1], 1e-6);
  fs::remove_all(dir);
}

// A run that continues from an adapter compares the policy with that adapter, frozen, as TRL's
// reference is the starting model: DPO's first loss is ln 2 again and GRPO's first KL is 0.
// Control: with reference_model base the same runs start away from both (the adapter moved the
// policy off the base model).
TEST(DpoTrainer, TheReferenceIsTheAdapterTheRunStartsFrom) {
  const fs::path dir = temp_dir("dpo_ref");
  const std::string data = write_pairs(dir);
  (void)run_dpo(small_dpo_config(data, dir / "first", 8));  // the adapter to continue from
  for (ReferenceModel which : {ReferenceModel::start, ReferenceModel::base}) {
    DpoConfig c = small_dpo_config(data, dir / "next", 1);
    c.adapter = (dir / "first").string();
    c.reference_model = which;
    const DpoRun r = run_dpo(c);
    ASSERT_EQ(r.loss.size(), 1u);
    if (which == ReferenceModel::start)
      EXPECT_NEAR(r.loss[0], std::log(2.0), 1e-6);
    else
      EXPECT_GT(std::fabs(r.loss[0] - std::log(2.0)), 1e-3);
    fs::remove_all(dir / "next");

    GrpoConfig g = small_config(dir / "grpo");
    g.adapter = c.adapter;
    g.beta = 0.04;
    g.max_steps = 1;
    g.save_steps = 0;
    g.reference_model = which;
    const GrpoRun gr = run_grpo(g, make_reward_set(g.rewards));
    ASSERT_EQ(gr.metrics.size(), 1u);
    const double kl = gr.metrics[0].at("kl").get<double>();
    std::printf("reference %s: dpo first loss %.6f, grpo first kl %.3g\n",
                which == ReferenceModel::start ? "start" : "base", r.loss[0], kl);
    if (which == ReferenceModel::start)
      EXPECT_EQ(kl, 0.0);
    else
      EXPECT_GT(kl, 1e-4);
    fs::remove_all(dir / "grpo");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8rl
