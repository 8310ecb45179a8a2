// The reward-model trainer: TRL's Bradley-Terry loss on a hand-computed case, the gradient of
// the head and of the LoRA matrices (through the pooled states' backward) against finite
// differences, and a run on the demo model whose metrics, checkpoint and saved adapter (a PEFT
// SEQ_CLS adapter) the reward_model reward reads back with the same scores.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "formats/json_read.h"
#include "rl/reward_loss.h"
#include "rl/reward_model.h"
#include "rl/reward_trainer.h"
#include "test_util.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tolerances.h"
#include "train/run_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace fp8rl::test;
const std::string kDemoModel = FP8RL_SOURCE_DIR "/examples/demo/model";

// loss = mean(-logsigmoid(c - r - m)) + 0.1 mean((c + r)^2), computed by hand:
// x = (0.5, -1.0): (log(1 + e^-0.5) + log(1 + e^1)) / 2 + 0.1 (1 + 0) / 2.
TEST(BradleyTerry, MatchesTrlsFormulaOnAHandCase) {
  const std::vector<double> c = {1.0, -0.5}, r = {0.0, 0.5}, m = {0.5, 0.0};
  const RewardLossResult res = bradley_terry_loss(c, r, m, 0.1);
  EXPECT_NEAR(res.loss, 0.9436693358491648, 1e-15);
  EXPECT_NEAR(res.dloss_dchosen[0], -0.0887703343990727, 1e-15);    // -sig(-0.5)/2 + 2 0.1 1 / 2
  EXPECT_NEAR(res.dloss_drejected[1], 0.36552928931500245, 1e-15);  // sig(1)/2 + 0
  EXPECT_EQ(res.accuracy, 0.5);
  EXPECT_EQ(res.margin, 0.0);
  EXPECT_EQ(res.mean_reward, 0.25);
  EXPECT_EQ(res.min_reward, -0.5);
  EXPECT_EQ(res.max_reward, 1.0);
  // Each term matters (negative controls): no margin, no centering.
  EXPECT_GT(std::fabs(bradley_terry_loss(c, r, {}, 0.1).loss - res.loss), 0.05);
  EXPECT_NEAR(bradley_terry_loss(c, r, m, std::nullopt).loss, res.loss - 0.05, 1e-15);
  // The derivatives are the loss's (fp64 central differences).
  for (size_t i = 0; i < 2; ++i) {
    const double h = kFiniteDifferenceStep;
    std::vector<double> up = c, down = c;
    up[i] += h;
    down[i] -= h;
    const double fd =
        (bradley_terry_loss(up, r, m, 0.1).loss - bradley_terry_loss(down, r, m, 0.1).loss) /
        (2 * h);
    EXPECT_NEAR(res.dloss_dchosen[i], fd, kF64FiniteDifference);
  }
  const std::vector<double> one = {1.0};
  EXPECT_THROW(bradley_terry_loss(c, one, {}, std::nullopt), Error);
}

std::vector<RewardPair> demo_pairs(const tok::Tokenizer& tokenizer, const ChatTemplateConfig& chat,
                                   const fs::path& file, int n) {
  std::ofstream f(file);
  for (int i = 0; i < n; ++i) {
    const int a = 10 + 7 * i % 80, b = 11 + 13 * i % 80;
    json row = {{"prompt", {{{"role", "user"}, {"content", fmt::format("What is {}+{}?", a, b)}}}},
                {"chosen", {{{"role", "assistant"}, {"content", std::to_string(a + b)}}}},
                {"rejected", {{{"role", "assistant"}, {"content", std::to_string(a + b + 10)}}}}};
    if (i % 2 == 1)
      row["margin"] = 0.25;
    else
      row["margin"] = 0.0;
    f << row.dump() << "\n";
  }
  f.close();
  PreferenceDataOptions o;
  return read_reward_dataset(file.string(), tokenizer, &chat, o);
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fp8rl_rt_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

RewardConfig small_config(const fs::path& out) {
  RewardConfig c;
  c.model = kDemoModel;
  c.output_dir = out.string();
  c.per_device_train_batch_size = 4;
  c.per_device_eval_batch_size = 4;
  c.max_steps = 4;
  c.save_steps = 2;
  c.learning_rate = 3e-3;
  c.center_rewards_coefficient = 0.01;
  c.seed = 3;
  return c;
}

LoraAdapter seq_cls_adapter(const Model& m) {
  LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"q_proj", "v_proj", "down_proj"};
  lc.sequence_classification = true;
  LoraAdapter a = LoraAdapter::init(lc, m, 9);
  // B away from zero, so the matrices' gradients are all alive.
  Tensor v = a.host_masters();
  for (int64_t i = 0; i < v.view().numel(); ++i)
    v.ptr<float>()[i] += 0.02f * float((i * 29) % 17 - 8) / 8.0f;
  // A head of unit scale: the states' gradients (dscore x head) stand above the differences'
  // fp32 noise.
  const TensorView head = a.score_slice(v.view());
  for (int64_t k = 0; k < head.numel(); ++k) head.ptr<float>()[k] = float((k * 7) % 13 - 6) / 6.0f;
  a.set_masters(v.view());
  return a;
}

// The analytic gradient of the loss (head, A, B) against central differences of the loss.
TEST(RewardTrainer, GradientMatchesFiniteDifferences) {
  const fs::path d = temp_dir("fd");
  const Model m = Model::load(kDemoModel);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(kDemoModel);
  const ChatTemplateConfig chat = load_chat_template_config(kDemoModel);
  const std::vector<RewardPair> pairs = demo_pairs(tokenizer, chat, d / "p.jsonl", 2);
  LoraAdapter a = seq_cls_adapter(m);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  RewardTrainer t(ctx, m, a, pairs, small_config(d / "run"), "demo");
  const int64_t n = a.master_params().numel();
  std::vector<float> g(static_cast<size_t>(n), 0.0f);
  t.loss_and_gradient(pairs, TensorView(g.data(), DType::f32, {n}));
  const auto loss_at = [&](int64_t i, float delta) {
    Tensor v = a.host_masters();
    v.ptr<float>()[i] += delta;
    a.set_masters(v.view());
    const std::vector<double> s = t.scores(pairs);
    v.ptr<float>()[i] -= delta;
    a.set_masters(v.view());
    std::vector<double> c, r, mg;
    for (size_t k = 0; k < pairs.size(); ++k) {
      c.push_back(s[2 * k]);
      r.push_back(s[2 * k + 1]);
      mg.push_back(*pairs[k].margin);
    }
    return bradley_terry_loss(c, r, mg, 0.01).loss;
  };
  // Elements of the head, and of the last layer's v_proj and down_proj A and B (the matrices
  // whose gradients stand well above the differences' noise).
  const TensorView head = a.score_slice(a.master_params());
  const auto offset = [&](const TensorView& v) {
    return (static_cast<const float*>(v.data) - a.master_params().ptr<float>());
  };
  std::vector<int64_t> head_elems, lora_elems;
  for (int64_t k : {0, 17, 127}) head_elems.push_back(offset(head) + k);
  for (int p : {2, 6})
    for (int64_t k : {1, 64, 200}) {
      lora_elems.push_back(offset(a.master_a(3, p)) + k);
      lora_elems.push_back(offset(a.master_b(3, p)) + k);
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
    // the matrices' so and fail below).
    EXPECT_GT(scale, 1e-4);
    for (size_t k = 0; k < fd.size(); ++k)
      EXPECT_LE(std::fabs(an[k] - fd[k]), kF32ModelFd * scale)
          << "element " << (*group)[k] << ": analytic " << an[k] << ", finite difference " << fd[k];
  }
  fs::remove_all(d);
}

TEST(RewardTrainer, RunsLogsAndSavesAnAdapterTheRewardReads) {
  const fs::path d = temp_dir("run");
  const Model m = Model::load(kDemoModel);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(kDemoModel);
  const ChatTemplateConfig chat = load_chat_template_config(kDemoModel);
  std::vector<RewardPair> pairs = demo_pairs(tokenizer, chat, d / "p.jsonl", 12);
  const std::vector<RewardPair> eval(pairs.begin() + 8, pairs.end());
  pairs.resize(8);
  LoraConfig lc;
  lc.target_modules = {"q_proj", "v_proj"};
  lc.sequence_classification = true;
  LoraAdapter a = LoraAdapter::init(lc, m, 1);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  RewardConfig c = small_config(d / "run");
  c.eval_strategy = EvalStrategy::steps;
  c.eval_steps = 2;
  c.eval_dataset = (d / "p.jsonl").string();  // the eval pairs are given below
  RewardTrainer t(ctx, m, a, pairs, c, "demo");
  t.set_eval_data(eval);
  t.run();
  std::vector<json> lines;
  std::ifstream f(d / "run" / "metrics.jsonl");
  for (std::string l; std::getline(f, l);) lines.push_back(json::parse(l));
  ASSERT_EQ(lines.size(), 4u);
  for (const char* key : {"loss", "grad_norm", "learning_rate", "num_tokens", "accuracy", "margin",
                          "mean_reward", "min_reward", "max_reward"})
    EXPECT_TRUE(lines[0].contains(key)) << key;
  for (const char* key : {"eval_loss", "eval_rewards/accuracies", "eval_accuracy", "eval_margin"})
    EXPECT_TRUE(lines[1].contains(key)) << key;
  EXPECT_FALSE(lines[0].contains("eval_loss"));
  EXPECT_TRUE(fs::exists(d / "run" / "checkpoint-2" / "adapter_model.safetensors"));
  const json cfg = read_json_file((d / "run" / "adapter_config.json").string());
  EXPECT_EQ(cfg["task_type"], "SEQ_CLS");
  // The saved adapter as a reward: the same scores as the trainer's for the same conversation.
  RewardModelOptions o;
  o.model = kDemoModel;
  o.adapter = (d / "run").string();
  RewardModelReward reward(o);
  reward.load({&ctx, &m});
  EXPECT_TRUE(reward.shares_policy());
  RewardBatch batch;
  batch.prompt_messages =
      json::array({json::array({{{"role", "user"}, {"content", "What is 10+11?"}}})});
  batch.prompts = {"What is 10+11?"};
  batch.completions = {"21"};
  batch.completion_ids = {{1}};
  batch.columns = json::object();
  const double r = *reward.score(batch)[0];
  const std::vector<double> s = t.scores(std::span<const RewardPair>(pairs.data(), 1));
  // pairs[0] is 10+11 = 21 (chosen); the trainer's adapter is the one saved.
  EXPECT_EQ(reward.encode(batch)[0], pairs[0].chosen);
  EXPECT_LE(std::fabs(r - s[0]), kF32HeadDot * std::max(1.0, std::fabs(s[0])));
  EXPECT_GT(std::fabs(r - s[1]), 100 * kF32HeadDot * std::max(1.0, std::fabs(s[0])));
  fs::remove_all(d);
}

TEST(RewardData, MarginsAndErrors) {
  const fs::path d = temp_dir("data");
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(kDemoModel);
  const ChatTemplateConfig chat = load_chat_template_config(kDemoModel);
  const auto read = [&](const std::string& text, PreferenceDataOptions o = {}) {
    std::ofstream(d / "x.jsonl") << text;
    o.eos_token_id = 287;
    return read_reward_dataset((d / "x.jsonl").string(), tokenizer, &chat, o);
  };
  const auto error = [&](const std::string& text, const std::string& needle,
                         PreferenceDataOptions o = {}) {
    try {
      read(text, o);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const std::vector<RewardPair> p = read(R"({"chosen": "12", "rejected": "13", "margin": 1.5})");
  EXPECT_EQ(*p[0].margin, 1.5);
  EXPECT_EQ(p[0].chosen.back(), 287);  // text rows end with EOS
  error(R"({"chosen": "12"})", "x.jsonl:1: the row needs \"chosen\" and \"rejected\"");
  error(R"({"chosen": "12", "rejected": "13", "margin": "big"})",
        "\"margin\" must be a finite number");
  error(
      "{\"chosen\": \"1\", \"rejected\": \"2\", \"margin\": 1}\n{\"chosen\": \"1\", \"rejected\": "
      "\"2\"}",
      "every row or none must have one");
  PreferenceDataOptions shortened;
  shortened.max_length = 2;
  error(R"({"chosen": "12 34 56", "rejected": "13"})", "more than max_length 2", shortened);
  shortened.truncation = true;
  EXPECT_EQ(read(R"({"chosen": "12 34 56", "rejected": "13"})", shortened)[0].chosen.size(), 2u);
  // A config value out of range.
  RewardConfig c = small_config(d / "run");
  c.center_rewards_coefficient = -1.0;
  EXPECT_THROW(c.validate(), Error);
  c.center_rewards_coefficient = 0.0;
  c.max_length = 1;
  EXPECT_THROW(c.validate(), Error);
  fs::remove_all(d);
}

}  // namespace
}  // namespace fp8rl

namespace fp8rl {
namespace {

// Stopped after 2 of 4 steps and resumed from checkpoint-2: the same adapter (head included)
// and the same token count as the uninterrupted run.
TEST(RewardTrainer, ResumesExactly) {
  const fs::path d = temp_dir("resume");
  const Model m = Model::load(kDemoModel);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(kDemoModel);
  const ChatTemplateConfig chat = load_chat_template_config(kDemoModel);
  const std::vector<RewardPair> pairs = demo_pairs(tokenizer, chat, d / "p.jsonl", 8);
  LoraConfig lc;
  lc.target_modules = {"q_proj", "v_proj"};
  lc.sequence_classification = true;
  Arena arena;
  Context ctx{Device::cpu, &arena};
  const auto train = [&](const fs::path& out, int64_t steps, bool resume) {
    LoraAdapter a = LoraAdapter::init(lc, m, 1);
    RewardConfig c = small_config(out);
    c.max_steps = 4;
    if (resume) c.resume_from_checkpoint = "true";
    RewardTrainer t(ctx, m, a, pairs, c, "demo");
    std::atomic<int> signal{0};
    try {
      t.run(
          [&](const RewardStepInfo& i) {
            if (i.step == steps) signal = 2;  // as SIGINT would
          },
          StopRequest(&signal));
    } catch (const RunInterrupted&) {
    }
    const TensorView p = a.master_params();
    return std::vector<float>(p.ptr<float>(), p.ptr<float>() + p.numel());
  };
  const std::vector<float> full = train(d / "full", 4, false);
  train(d / "split", 2, false);
  ASSERT_TRUE(fs::exists(d / "split" / "checkpoint-2"));
  ASSERT_FALSE(fs::exists(d / "split" / "checkpoint-4"));  // it stopped after step 2
  const std::vector<float> resumed = train(d / "split", 4, true);
  EXPECT_EQ(resumed, full);
  const auto last_line = [](const fs::path& f) {
    std::ifstream in(f);
    std::string l, last;
    while (std::getline(in, l)) last = l;
    return json::parse(last);
  };
  EXPECT_EQ(last_line(d / "split" / "metrics.jsonl")["num_tokens"],
            last_line(d / "full" / "metrics.jsonl")["num_tokens"]);
  fs::remove_all(d);
}

}  // namespace
}  // namespace fp8rl
