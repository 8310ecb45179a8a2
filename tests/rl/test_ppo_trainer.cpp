// The PPO loop on the demo model: the value loss's gradient through the value adapter and its
// head against finite differences, one base for every model, vf_coef 0 leaving the value adapter
// alone, an exact resume, and the value adapter's and the keys' bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/train_session.h"
#include "core/check.h"
#include "rl/ppo_loss.h"
#include "rl/ppo_trainer.h"
#include "rl/reward_config.h"
#include "rl/reward_model.h"
#include "rl/value_model.h"
#include "tokenizer/tokenizer.h"
#include "tolerances.h"
#include "train/run_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using namespace fp8rl::test;
const std::string kDemo = FP8RL_SOURCE_DIR "/examples/demo";

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fp8rl_ppo_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

std::vector<float> host_values(const LoraAdapter& a) {
  const Tensor t = a.host_masters();
  return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.view().numel());
}

PpoConfig small_config(const fs::path& out) {
  PpoConfig c;
  c.model = kDemo + "/model";
  c.data = kDemo + "/train.jsonl";
  c.output_dir = out.string();
  c.fp8 = "row";
  c.lora_r = 4;
  c.lora_alpha = 8;
  c.lora_dropout = 0.0;
  c.lora_target_modules = std::vector<std::string>{"q_proj", "v_proj"};
  c.per_device_train_batch_size = 4;
  c.gradient_accumulation_steps = 2;
  c.num_mini_batches = 2;
  c.num_ppo_epochs = 2;
  c.response_length = 4;
  c.max_prompt_length = 32;
  c.stop_token = "eos";
  c.temperature = 1.0;
  c.learning_rate = 1e-3;
  c.lr_scheduler_type = LrSchedulerType::constant;
  c.max_steps = 4;
  c.save_steps = 2;
  c.seed = 5;
  c.rewards =
      nlohmann::json::parse(R"([{"type": "answer_match", "column": "answer", "mode": "numeric"}])");
  return c;
}

struct PpoRun {
  std::vector<float> policy, value, value_before;
  std::vector<nlohmann::json> metrics;
};

PpoRun run_ppo(const PpoConfig& c) {
  cli::TrainSession ts(c, uint64_t(c.seed));
  std::unique_ptr<LoraAdapter> value =
      make_value_adapter(c.value_adapter, ts.adapter(), ts.model(), ts.ctx(), 11);
  RewardSet rewards = make_reward_set(c.rewards);
  load_reward_models(rewards, {&ts.ctx(), &ts.model()});
  const auto& chat = ts.tokenizer_setup().chat;
  PromptDataOptions d;
  d.max_prompt_length = c.max_prompt_length;
  std::vector<PromptExample> prompts =
      read_prompt_dataset(c.data, ts.tokenizer(), chat ? &*chat : nullptr, d);
  prompts.resize(24);
  PpoRun r;
  r.value_before = host_values(*value);
  PpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), *value, &ts.tokenizer(),
                     ts.session().eos_ids(), std::move(prompts), c, std::move(rewards), "demo");
  trainer.run();
  r.policy = host_values(ts.adapter());
  r.value = host_values(*value);
  std::ifstream f(c.output_dir + "/metrics.jsonl");
  for (std::string l; std::getline(f, l);) r.metrics.push_back(nlohmann::json::parse(l));
  return r;
}

// The value loss's gradient (head, A, B of the value adapter) against central differences
// of the loss through the whole model.
// The demo model with a value adapter (r 4 on q, v and down) whose B is away from zero and whose
// head has unit scale, so that every gradient is alive; two packed sequences (prompt then
// response) with values at their last 3 and 2 rows.
LoraConfig value_case_lora() {
  LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"q_proj", "v_proj", "down_proj"};
  return lc;
}

struct ValueCase {
  Model m = Model::load(kDemo + "/model");
  LoraAdapter policy = LoraAdapter::init(value_case_lora(), m, 3);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  std::unique_ptr<LoraAdapter> value;
  std::vector<int32_t> ids = {5, 17, 9, 33, 2, 41, 8, 11, 60, 7, 3};
  std::vector<int32_t> targets = std::vector<int32_t>(11, -100);
  std::vector<int64_t> cu = {0, 6, 11};
  std::vector<int64_t> rows = {3, 4, 5, 9, 10};
  PackedSequences batch() const { return {ids, targets, cu}; }

  ValueCase() {
    value = make_value_adapter("", policy, m, ctx, 9);
    Tensor v = value->host_masters();
    for (int64_t i = 0; i < v.view().numel(); ++i)
      v.ptr<float>()[i] += 0.02f * float((i * 29) % 17 - 8) / 8.0f;
    const TensorView head = value->score_slice(v.view());
    for (int64_t k = 0; k < head.numel(); ++k)
      head.ptr<float>()[k] = float((k * 7) % 13 - 6) / 6.0f;
    value->set_masters(v.view());
  }
};

TEST(PpoValueModel, ValueLossGradientMatchesFiniteDifferences) {
  ValueCase vc;
  const Model& m = vc.m;
  Context& ctx = vc.ctx;
  std::unique_ptr<LoraAdapter>& value = vc.value;
  ValueModel vm(ctx, m, *value);
  const std::vector<int64_t>& rows = vc.rows;
  const PackedSequences batch = vc.batch();
  const std::vector<double> v0 = vm.values(batch, rows);
  // Old values beside the current ones and returns away from both: the unclipped square
  // (cliprange_value large) is what the loss takes.
  std::vector<double> old = v0, returns(v0.size());
  for (size_t i = 0; i < v0.size(); ++i) returns[i] = v0[i] + (i % 2 == 0 ? 0.7 : -0.4);
  const double cliprange_value = 100.0;
  const auto loss_of = [&](const std::vector<double>& v) {
    return ppo_value_loss(v, old, returns, cliprange_value);
  };
  const PpoValueLoss l0 = loss_of(v0);
  const int64_t n = value->master_params().numel();
  std::vector<float> g(size_t(n), 0.0f);
  vm.backward(l0.dloss_dvalue, TensorView(g.data(), DType::f32, {n}));
  const auto loss_at = [&](int64_t i, float delta) {
    Tensor v = value->host_masters();
    v.ptr<float>()[i] += delta;
    value->set_masters(v.view());
    const double l = loss_of(vm.values(batch, rows)).loss;
    v.ptr<float>()[i] -= delta;
    value->set_masters(v.view());
    return l;
  };
  const auto offset = [&](const TensorView& t) {
    return static_cast<const float*>(t.data) - value->master_params().ptr<float>();
  };
  std::vector<int64_t> head_elems, lora_elems;
  for (int64_t k : {0, 17, 127})
    head_elems.push_back(offset(value->score_slice(value->master_params())) + k);
  for (int p : {2, 6})
    for (int64_t k : {1, 64, 200}) {
      lora_elems.push_back(offset(value->master_a(3, p)) + k);
      lora_elems.push_back(offset(value->master_b(3, p)) + k);
    }
  for (const std::vector<int64_t>* group : {&head_elems, &lora_elems}) {
    std::vector<double> fd, an;
    double scale = 0;
    for (int64_t i : *group) {
      const float h = float(kF32ModelFdStep);
      fd.push_back((loss_at(i, h) - loss_at(i, -h)) / (2.0 * h));
      an.push_back(g[size_t(i)]);
      scale = std::max(scale, std::fabs(fd.back()));
    }
    // Negative control: the group's gradients are not zero (a head-only backward would leave
    // the matrices' at zero and fail the comparison).
    EXPECT_GT(scale, 1e-4);
    for (size_t k = 0; k < fd.size(); ++k)
      EXPECT_LE(std::fabs(an[k] - fd[k]), kF32ModelFd * scale)
          << "element " << (*group)[k] << ": analytic " << an[k] << ", finite difference " << fd[k];
  }
}

// The value pass with per-layer checkpointing (the run's gradient_checkpointing): the same
// values and gradients as the pass that keeps every activation, bit for bit on the CPU, with a
// plan that keeps fewer bytes (negative control: the plan without checkpointing keeps more,
// which the value pass used whatever the run's setting).
TEST(PpoValueModel, CheckpointedPassEqualsTheSavingOneAndPlansLess) {
  ValueCase vc;
  const PackedSequences batch = vc.batch();
  const std::unique_ptr<LoraAdapter>& value = vc.value;
  const int64_t n = value->master_params().numel();
  struct Run {
    std::vector<double> values;
    std::vector<float> grads;
    size_t saved = 0;
  };
  const auto run = [&](bool checkpointing) {
    ValueModel vm(vc.ctx, vc.m, *value, nullptr, checkpointing);
    Run r;
    r.saved = vm.plan(batch, vc.rows).saved_bytes;
    r.values = vm.values(batch, vc.rows);
    r.grads.assign(size_t(n), 0.0f);
    const std::vector<double> dvalue = {0.3, -0.2, 0.5, 1.0, -0.7};
    vm.backward(dvalue, TensorView(r.grads.data(), DType::f32, {n}));
    return r;
  };
  const Run saving = run(false), checkpointed = run(true);
  EXPECT_EQ(checkpointed.values, saving.values);
  EXPECT_EQ(checkpointed.grads, saving.grads);
  EXPECT_LT(checkpointed.saved, saving.saved);
}

TEST(PpoTrainer, LogsTrlMetricsAndResumesExactly) {
  const fs::path a = temp_dir("a"), b = temp_dir("b");
  const PpoRun full = run_ppo(small_config(a));
  ASSERT_EQ(full.metrics.size(), 4u);
  for (const char* key :
       {"objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward",
        "objective/scores", "policy/approxkl_avg", "policy/clipfrac_avg", "loss/policy_avg",
        "loss/value_avg", "val/clipfrac_avg", "policy/entropy_avg", "val/ratio", "val/ratio_var",
        "val/num_eos_tokens", "lr", "episode"})
    EXPECT_TRUE(full.metrics[0].contains(key)) << key;
  EXPECT_EQ(full.metrics[1]["episode"].get<int64_t>(), 16);  // 2 updates x 8 prompts
  EXPECT_NE(full.value, full.value_before);                  // vf_coef 0.1 trains the value adapter
  ASSERT_TRUE(fs::exists(a / "checkpoint-2" / kValueAdapterDir / "adapter_model.safetensors"));
  ASSERT_TRUE(fs::exists(a / kValueAdapterDir / "adapter_config.json"));
  // Resumed from update 2 in another directory: both adapters bit for bit at update 4.
  PpoConfig r = small_config(b);
  r.resume_from_checkpoint = (a / "checkpoint-2").string();
  const PpoRun resumed = run_ppo(r);
  ASSERT_EQ(resumed.metrics.size(), 2u);
  EXPECT_EQ(resumed.metrics[1]["loss"], full.metrics[3]["loss"]);
  EXPECT_EQ(resumed.policy, full.policy);
  EXPECT_EQ(resumed.value, full.value);
  // Control: another seed trains other adapters.
  PpoConfig other = small_config(temp_dir("c"));
  other.seed = 6;
  EXPECT_NE(run_ppo(other).policy, full.policy);
}

// vf_coef 0: the value adapter (LoRA and head) ends as it started, bit for bit; the policy
// still trains. One update of one epoch.
TEST(PpoTrainer, VfCoefZeroLeavesTheValueAdapterAlone) {
  PpoConfig c = small_config(temp_dir("vf0"));
  c.max_steps = 1;
  c.num_ppo_epochs = 1;
  c.vf_coef = 0.0;
  const PpoRun r = run_ppo(c);
  EXPECT_EQ(r.value, r.value_before);
  EXPECT_GT(r.metrics[0]["loss/value_avg"].get<double>(), 0.0);  // a loss, weighted 0
}

// cliprange_value: in the second pass over a batch the values have moved from the rollout's;
// a tiny range clips them (val/clipfrac_avg > 0), a huge one never does (exactly 0).
TEST(PpoTrainer, CliprangeValueClipsMovedValues) {
  PpoConfig c = small_config(temp_dir("clip"));
  c.max_steps = 1;
  c.cliprange_value = 1e-6;
  const PpoRun tight = run_ppo(c);
  EXPECT_GT(tight.metrics[0]["val/clipfrac_avg"].get<double>(), 0.0);
  c.output_dir = temp_dir("noclip").string();
  c.cliprange_value = 100.0;
  const PpoRun loose = run_ppo(c);
  EXPECT_EQ(loose.metrics[0]["val/clipfrac_avg"].get<double>(), 0.0);
}

// The value model starts from a reward model's adapter (value_adapter), which a reward_model
// reward over the policy's directory scores with: one Model serves policy, reference, value
// and reward.
TEST(PpoTrainer, ValueAdapterFromARewardModelOnOneBase) {
  const fs::path d = temp_dir("rm");
  PpoConfig c = small_config(d / "run");
  cli::TrainSession ts(c, uint64_t(c.seed));
  // A reward model's adapter: SEQ_CLS with a head, of the policy's rank and targets.
  const std::unique_ptr<LoraAdapter> rm =
      make_value_adapter("", ts.adapter(), ts.model(), ts.ctx(), 21);
  rm->save_peft((d / "rm").string(), "demo");
  const std::unique_ptr<LoraAdapter> value =
      make_value_adapter((d / "rm").string(), ts.adapter(), ts.model(), ts.ctx(), 0);
  EXPECT_EQ(host_values(*value), host_values(*rm));
  RewardSet rewards = make_reward_set(nlohmann::json::parse(
      fmt::format(R"([{{"type": "reward_model", "model": "{}", "adapter": "{}"}}])", c.model,
                  (d / "rm").string())));
  load_reward_models(rewards, {&ts.ctx(), &ts.model()});
  const auto& reward = dynamic_cast<const RewardModelReward&>(rewards.function(0));
  EXPECT_TRUE(reward.shares_policy());
  // Negative control: a reward model over another directory has its own weights.
  const fs::path copy = d / "model_copy";
  fs::copy(c.model, copy, fs::copy_options::recursive);
  RewardSet own = make_reward_set(nlohmann::json::parse(
      fmt::format(R"([{{"type": "reward_model", "model": "{}", "adapter": "{}"}}])", copy.string(),
                  (d / "rm").string())));
  load_reward_models(own, {&ts.ctx(), &ts.model()});
  EXPECT_FALSE(dynamic_cast<const RewardModelReward&>(own.function(0)).shares_policy());
  fs::remove_all(d);
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(PpoTrainer, BadValueAdapterIsNamed) {
  const fs::path d = temp_dir("bad");
  PpoConfig c = small_config(d / "run");
  cli::TrainSession ts(c, uint64_t(c.seed));
  const auto save = [&](LoraConfig lc, const std::string& name) {
    LoraAdapter::init(lc, ts.model(), 1).save_peft((d / name).string(), "demo");
    return (d / name).string();
  };
  LoraConfig lc = ts.adapter().config();
  lc.sequence_classification = true;
  lc.num_labels = 1;
  LoraConfig rank = lc;
  rank.r = 8;
  LoraConfig targets = lc;
  targets.target_modules = {"q_proj", "k_proj"};
  LoraConfig no_head = ts.adapter().config();
  const auto make = [&](const std::string& dir) {
    return [&, dir] { make_value_adapter(dir, ts.adapter(), ts.model(), ts.ctx(), 0); };
  };
  expect_error(make(save(rank, "rank")), "rank r = 8 differs from the policy adapter's lora_r = 4");
  expect_error(make(save(targets, "targets")), "model.layers.0.self_attn.k_proj has an adapter");
  expect_error(make(save(no_head, "no_head")), "has no score head");
  EXPECT_NO_THROW(make(save(lc, "good"))());  // control
  fs::remove_all(d);
}

TEST(PpoConfig, EveryRangeIsNamed) {
  const auto bad = [](const std::function<void(PpoConfig&)>& set, const std::string& part) {
    PpoConfig c = small_config("/tmp/unused");
    set(c);
    expect_error([&] { c.validate(); }, part);
  };
  EXPECT_NO_THROW(small_config("/tmp/unused").validate());  // control
  bad([](PpoConfig& c) { c.num_ppo_epochs = 0; }, "num_ppo_epochs = 0 is out of range");
  bad([](PpoConfig& c) { c.num_mini_batches = 0; }, "num_mini_batches = 0 is out of range");
  bad([](PpoConfig& c) { c.num_mini_batches = 3; }, "num_mini_batches = 3 must divide the batch");
  bad([](PpoConfig& c) { c.total_episodes = 0; }, "total_episodes = 0 is out of range");
  bad([](PpoConfig& c) { c.local_rollout_forward_batch_size = 0; },
      "local_rollout_forward_batch_size = 0");
  bad([](PpoConfig& c) { c.response_length = 0; }, "response_length = 0 is out of range");
  bad([](PpoConfig& c) { c.stop_token = "eot"; }, "stop_token = 'eot'");
  bad([](PpoConfig& c) { c.stop_token_id = 3; }, "stop_token and stop_token_id are exclusive");
  bad([](PpoConfig& c) { c.temperature = 0; }, "temperature = 0 is out of range");
  bad([](PpoConfig& c) { c.missing_eos_penalty = -1; }, "missing_eos_penalty = -1 is out of range");
  bad([](PpoConfig& c) { c.cliprange = 0; }, "cliprange = 0 is out of range");
  bad([](PpoConfig& c) { c.cliprange_value = -0.1; }, "cliprange_value = -0.1 is out of range");
  bad([](PpoConfig& c) { c.vf_coef = -1; }, "vf_coef = -1 is out of range");
  bad([](PpoConfig& c) { c.gamma = 1.5; }, "gamma = 1.5 is out of range");
  bad([](PpoConfig& c) { c.lam = -0.5; }, "lam = -0.5 is out of range");
  bad([](PpoConfig& c) { c.kl_coef = -0.1; }, "kl_coef = -0.1 is out of range");
  bad([](PpoConfig& c) { c.kl_estimator = "k2"; }, "kl_estimator must be 'k1' or 'k3'");
  bad([](PpoConfig& c) { c.whiten_rewards = true; },
      "whiten_rewards needs mini-batches of at least 8");
  bad([](PpoConfig& c) { c.reward_weights = {1.0, 2.0}; }, "reward_weights has 2 values");
}

}  // namespace
}  // namespace fp8rl
