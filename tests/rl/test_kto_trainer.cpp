// The KTO loop on the demo model (examples/demo): TRL's loss at the start and learning, TRL's
// metric names, the logged KL estimate against an independent pass over the mismatched
// sequences, evaluation and an exact resume.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli/train_session.h"
#include "rl/kto_trainer.h"
#include "tokenizer/tokenizer.h"
#include "tolerances.h"
#include "train/logprob_pass.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
const std::string kDemoDir = FP8RL_SOURCE_DIR "/examples/demo";

fs::path kto_temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fp8rl_kto_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// The demo's sums as unpaired rows: the right answer desirable on even rows, a wrong one
// undesirable on odd rows (every row desirable with all_desirable), each answer followed by
// `tail`.
std::string write_examples(const fs::path& dir, bool all_desirable = false,
                           const std::string& tail = "") {
  fs::create_directories(dir);
  const std::string data = (dir / "kto.jsonl").string();
  std::ifstream in(kDemoDir + "/train.jsonl");
  std::ofstream out(data);
  std::string line;
  for (int i = 0; i < 48 && std::getline(in, line); ++i) {
    const nlohmann::json r = nlohmann::json::parse(line);
    const int answer = std::stoi(r["answer"].get<std::string>());
    const bool good = all_desirable || i % 2 == 0;
    nlohmann::json row;
    row["prompt"] = r["messages"];
    row["completion"] = {
        {{"role", "assistant"}, {"content", std::to_string(good ? answer : answer + 10) + tail}}};
    row["label"] = good;
    out << row.dump() << '\n';
  }
  return data;
}

KtoConfig small_config(const std::string& data, const fs::path& out, int64_t steps) {
  KtoConfig c;
  c.model = kDemoDir + "/model";
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

std::vector<UnpairedExample> read(const KtoConfig& c, cli::TrainSession& ts,
                                  const std::string& path) {
  const auto& chat = ts.tokenizer_setup().chat;
  PreferenceDataOptions d;
  d.eos_token_id = ts.tokenizer_setup().eos_token_id;
  d.max_prompt_length = std::nullopt;
  d.max_length = c.max_length;
  return read_unpaired_dataset(path, ts.tokenizer(), chat ? &*chat : nullptr, d);
}

std::vector<nlohmann::json> metrics_of(const std::string& dir) {
  std::ifstream f(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(nlohmann::json::parse(l));
  return lines;
}

std::vector<float> params_of(cli::TrainSession& ts) {
  const TensorView p = ts.adapter().master_params();
  return std::vector<float>(p.ptr<float>(), p.ptr<float>() + p.numel());
}

// At the start the policy is the reference (B = 0): every loss is 1 - σ(0) = 1/2, so the first
// step's loss is (w_d n_d + w_u n_u) / 2n; then the desirable answers' implicit reward rises
// above the undesirable ones'. Every line has TRL's metric names.
TEST(KtoTrainer, StartsAtTrlsLossAndLearnsThePreference) {
  const fs::path dir = kto_temp_dir("learn");
  KtoConfig c = small_config(write_examples(dir), dir / "run", 12);
  c.desirable_weight = 1.0;
  c.undesirable_weight = 1.5;  // 4 and 4 examples a batch: (4 + 6) / 16
  cli::TrainSession ts(c, uint64_t(c.seed));
  KtoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), read(c, ts, c.data), c, "demo");
  std::vector<double> loss;
  trainer.run([&](const KtoStepInfo& i) { loss.push_back(i.loss); });
  const std::vector<nlohmann::json> lines = metrics_of(c.output_dir);
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_NEAR(loss[0], 10.0 / 16.0, 1e-6);
  EXPECT_EQ(lines[0]["rewards/margins"].get<double>(), 0.0);
  EXPECT_EQ(lines[0]["kl"].get<double>(), 0.0);
  for (const char* key :
       {"loss", "grad_norm", "learning_rate", "kl", "entropy", "num_tokens", "rewards/chosen",
        "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected", "epoch"})
    EXPECT_TRUE(lines.back().contains(key)) << key;
  EXPECT_GT(lines[1]["num_tokens"].get<int64_t>(), lines[0]["num_tokens"].get<int64_t>());
  EXPECT_LT(loss.back(), loss[0] - 0.02);
  EXPECT_GT(lines.back()["rewards/margins"].get<double>(), 0.05);
  std::printf("kto loss %.4f -> %.4f, rewards/margins -> %.4f\n", loss[0], loss.back(),
              lines.back()["rewards/margins"].get<double>());
  fs::remove_all(dir);
}

// The logged KL estimate (here eval_kl, one batch of 8) equals TRL's from a separate pass:
// each prompt with its batch neighbour's completion, Σ log π - Σ log π_ref, the mean, clamped
// at 0. After training on desirable rows that share a tail after the answer, the policy gives
// that tail more mass after any answer: the estimate is positive. Control: prompts with their
// own completions give another value.
TEST(KtoTrainer, KlEstimateIsTheMismatchedPairsLogRatio) {
  const fs::path dir = kto_temp_dir("kl");
  const std::string data = write_examples(dir, /*all_desirable=*/true, " is the sum, I am sure");
  KtoConfig c = small_config(data, dir / "run", 4);
  c.per_device_eval_batch_size = 8;
  cli::TrainSession ts(c, uint64_t(c.seed));
  KtoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), read(c, ts, c.data), c, "demo");
  std::vector<UnpairedExample> eval = read(c, ts, data);
  eval.resize(8);
  trainer.set_eval_data(eval);
  trainer.run();
  const nlohmann::json m = trainer.evaluate();

  LogprobPass pass(ts.ctx(), ts.model(), &ts.adapter());
  const auto kl_of = [&](bool mismatched) {
    std::vector<int32_t> ids, targets;
    std::vector<int64_t> cu{0};
    std::vector<std::pair<size_t, size_t>> spans;
    for (size_t i = 0; i < eval.size(); ++i) {
      const size_t j = mismatched ? (i + eval.size() - 1) % eval.size() : i;
      const std::vector<int32_t>& y = eval[j].completion;
      const size_t first = ids.size() + eval[i].prompt.size() - 1;
      ids.insert(ids.end(), eval[i].prompt.begin(), eval[i].prompt.end());
      ids.insert(ids.end(), y.begin(), y.end() - 1);
      targets.resize(ids.size(), -100);
      for (size_t t = 0; t < y.size(); ++t) targets[first + t] = y[t];
      spans.emplace_back(first, first + y.size());
      cu.push_back(int64_t(ids.size()));
    }
    const auto sums = [&](bool reference) {
      PassOptions o;
      o.reference = reference;
      pass.forward({ids, targets, cu}, o);
      std::vector<double> s;
      for (const auto& [b, e] : spans) {
        double sum = 0;
        for (size_t t = b; t < e; ++t) sum += pass.logprobs()[t];
        s.push_back(sum);
      }
      return s;
    };
    const std::vector<double> policy = sums(false), reference = sums(true);
    double mean = 0;
    for (size_t i = 0; i < policy.size(); ++i) mean += (policy[i] - reference[i]) / 8.0;
    return std::max(mean, 0.0);
  };
  const double want = kl_of(true), own = kl_of(false);
  std::printf("eval_kl %.6f, independent %.6f, own completions %.6f\n", m["eval_kl"].get<double>(),
              want, own);
  EXPECT_GT(want, 0.01);
  EXPECT_NEAR(m["eval_kl"].get<double>(), want, 1e-9 * std::max(1.0, want));
  EXPECT_GT(std::fabs(own - want), 1e-3);
  for (const char* key : {"eval_loss", "eval_kl", "eval_entropy", "eval_rewards/chosen",
                          "eval_logps/chosen", "eval_num_tokens", "eval_runtime"})
    EXPECT_TRUE(m.contains(key)) << key;
  // Desirable rows only: TRL logs no rejected metric and no margin.
  EXPECT_FALSE(m.contains("eval_rewards/rejected"));
  EXPECT_FALSE(m.contains("eval_rewards/margins"));
  fs::remove_all(dir);
}

// Resuming from step 2's checkpoint continues bit for bit (data position, token count).
TEST(KtoTrainer, ResumesExactly) {
  const fs::path dir = kto_temp_dir("resume");
  const std::string data = write_examples(dir);
  const auto run = [&](const fs::path& out, std::optional<std::string> resume) {
    KtoConfig c = small_config(data, out, 4);
    c.save_steps = 2;
    c.per_device_train_batch_size = 4;
    c.gradient_accumulation_steps = 2;
    if (resume) c.resume_from_checkpoint = *resume;
    cli::TrainSession ts(c, uint64_t(c.seed));
    KtoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), read(c, ts, c.data), c, "demo");
    trainer.run();
    return params_of(ts);
  };
  const std::vector<float> whole = run(dir / "a", std::nullopt);
  fs::copy(dir / "a", dir / "b", fs::copy_options::recursive);
  const std::vector<float> resumed = run(dir / "b", (dir / "b" / "checkpoint-2").string());
  EXPECT_EQ(whole, resumed);
  const std::vector<nlohmann::json> a = metrics_of((dir / "a").string()),
                                    b = metrics_of((dir / "b").string());
  EXPECT_EQ(a.back()["num_tokens"], b.back()["num_tokens"]);
  EXPECT_EQ(a.back()["loss"], b.back()["loss"]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fp8rl
