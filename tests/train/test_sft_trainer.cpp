// The SFT loop (train/sft_trainer.h): it learns (the loss of a synthetic task falls, with
// FP8-row and unquantized bases ending within 1% of each other), and a run
// resumed from a checkpoint continues bit for bit.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/rng.h"
#include "formats/safetensors.h"
#include "model/adapter.h"
#include "model/model_test_util.h"
#include "tolerances.h"
#include "train/run_dir.h"
#include "train/sft_trainer.h"

namespace fp8rl {
namespace {

using namespace test;
namespace fs = std::filesystem;

// A synthetic task the base cannot do, with a known loss floor: from a start token, each next
// token is the previous one plus 3 or plus 5 (mod 40, offset 20), a fair coin per position.
// A model that learns the rule reaches ln 2 per token, which keeps the end of the run at a
// loss where a relative comparison of two runs means something (a task learned to zero loss
// would compare noise).
std::vector<SftExample> stepping_task(int64_t n, int64_t len) {
  std::vector<SftExample> out;
  for (int64_t i = 0; i < n; ++i) {
    SftExample e;
    int32_t v = int32_t((i * 37) % 40);
    for (int64_t t = 0; t < len; ++t) {
      e.input_ids.push_back(20 + v);
      e.loss_mask.push_back(t > 0);
      v = (v + (uniform01(uint64_t(i), uint64_t(t)) < 0.5f ? 3 : 5)) % 40;
    }
    e.line = i + 1;
    out.push_back(e);
  }
  return out;
}

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> params;
};

TrainRun train(const std::string& dir, std::optional<Fp8Scheme> fp8, int64_t max_steps,
               const std::string& resume = "", int64_t save_steps = 0) {
  Model m = load_model(golden_dir("llama"), fp8);
  LoraConfig lc;
  lc.r = 8;
  lc.lora_alpha = 16;
  lc.target_modules = {"all-linear"};
  LoraAdapter adapter = LoraAdapter::init(lc, m, 3);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  SftConfig c;
  c.output_dir = dir;
  c.per_device_train_batch_size = 4;
  c.max_tokens_per_batch = 4096;
  c.gradient_accumulation_steps = 2;
  c.max_steps = max_steps;
  c.save_steps = save_steps;
  c.lora_dropout = 0.05;
  c.resume_from_checkpoint = resume;
  c.learning_rate = 5e-3;
  c.lr_scheduler_type = LrSchedulerType::constant;
  c.weight_decay = 0.01;
  SftTrainer trainer(ctx, m, adapter, stepping_task(256, 12), c, "tiny-llama");
  TrainRun r;
  trainer.run([&](const SftStepInfo& i) { r.losses.push_back(i.loss); });
  const TensorView p = adapter.master_params();
  r.params.assign(p.ptr<float>(), p.ptr<float>() + p.numel());
  return r;
}

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fp8rl_sft_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// Continuing from an adapter (--adapter) keeps the adapter's own LoRA settings, as PEFT does:
// unset keys take the adapter's values, a set key that agrees is fine, a set key that
// contradicts it is an error naming both. Control: without an adapter the keys stay.
TEST(ModelArguments, AnAdapterKeepsItsOwnSettings) {
  const Model m = load_model(golden_dir("llama"));
  LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 12;
  lc.lora_dropout = 0.0;
  lc.target_modules = {"v_proj", "q_proj"};
  const fs::path dir = fs::temp_directory_path() / ("fp8rl_adopt" + std::to_string(::getpid()));
  fs::remove_all(dir);
  LoraAdapter::init(lc, m, 1).save_peft(dir.string(), "tiny-llama");

  ModelArguments fresh;  // no adapter: nothing changes
  fresh.adopt_adapter_config({"lora_dropout"});
  EXPECT_EQ(fresh.lora_r, 16);
  EXPECT_EQ(fresh.lora_dropout, 0.05);

  ModelArguments a;
  a.adapter = dir.string();
  a.adopt_adapter_config({});
  EXPECT_EQ(a.lora_r, 4);
  EXPECT_EQ(a.lora_alpha, 12);
  EXPECT_EQ(a.lora_dropout, 0.0);
  EXPECT_EQ(a.lora_target_modules, (std::vector<std::string>{"v_proj", "q_proj"}));

  ModelArguments agree;
  agree.adapter = dir.string();
  agree.lora_r = 4;
  // The same projections, another order.
  agree.lora_target_modules = std::vector<std::string>{"q_proj", "v_proj"};
  EXPECT_NO_THROW(agree.adopt_adapter_config({"lora_r", "lora_target_modules"}));

  ModelArguments dropout;
  dropout.adapter = dir.string();
  try {
    dropout.adopt_adapter_config({"lora_dropout"});
    ADD_FAILURE() << "a contradicting lora_dropout was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("lora_dropout = 0.05"), std::string::npos) << what;
    EXPECT_NE(what.find("adapter's lora_dropout = 0"), std::string::npos) << what;
    EXPECT_NE(what.find("adapter_config.json"), std::string::npos) << what;
  }
  ModelArguments targets;
  targets.adapter = dir.string();
  targets.lora_target_modules = std::vector<std::string>{"all-linear"};
  EXPECT_THROW(targets.adopt_adapter_config({"lora_target_modules"}), Error);
  // null given (PEFT's default) takes the adapter's list, as PEFT continues an adapter.
  ModelArguments unset;
  unset.adapter = dir.string();
  EXPECT_NO_THROW(unset.adopt_adapter_config({"lora_target_modules"}));
  EXPECT_EQ(unset.lora_target_modules, (std::vector<std::string>{"v_proj", "q_proj"}));
  fs::remove_all(dir);
}

TEST(SftTrainer, LearnsTheTaskWithFp8AndUnquantizedBases) {
  const int64_t steps = 80;
  const TrainRun fp8 = train(temp_dir("fp8").string(), Fp8Scheme::row, steps);
  const TrainRun off = train(temp_dir("off").string(), Fp8Scheme::off, steps);
  ASSERT_EQ(fp8.losses.size(), size_t(steps));
  // The end of the run: the mean of the last 16 steps (a fifth of the run). Each step sees
  // other examples, so one step's loss moves by ~5%; both runs see the same batches.
  auto tail = [](const TrainRun& r) {
    double s = 0;
    for (size_t i = r.losses.size() - 16; i < r.losses.size(); ++i) s += r.losses[i];
    return s / 16;
  };
  std::printf("step loss(fp8-row) loss(unquantized)\n");
  for (size_t i = 0; i < fp8.losses.size(); ++i)
    std::printf("%zu %.4f %.4f\n", i + 1, fp8.losses[i], off.losses[i]);
  std::printf("loss fp8-row %.4f -> %.4f, unquantized %.4f -> %.4f\n", fp8.losses[0], tail(fp8),
              off.losses[0], tail(off));
  EXPECT_LT(tail(fp8), 0.5 * fp8.losses[0]) << "the loss does not fall";
  EXPECT_LT(tail(off), 0.5 * off.losses[0]);
  EXPECT_LE(std::fabs(tail(fp8) - tail(off)) / tail(off), kFp8SftLossCurve);
}

TEST(SftTrainer, ResumeContinuesBitForBit) {
  const fs::path a = temp_dir("a"), b = temp_dir("b");
  const TrainRun full = train(a.string(), std::nullopt, 6, "", 3);
  ASSERT_TRUE(fs::exists(a / "checkpoint-3" / "adapter_model.safetensors"));
  ASSERT_TRUE(fs::exists(a / "adapter_config.json"));
  const TrainRun resumed = train(b.string(), std::nullopt, 6, (a / "checkpoint-3").string(), 3);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], full.losses[3 + i]) << i;
  EXPECT_EQ(resumed.params, full.params);
  // Control: resuming from the other checkpoint's start does not give the same adapter.
  const TrainRun from_start = train(temp_dir("c").string(), std::nullopt, 3);
  EXPECT_NE(from_start.params, full.params);
  // metrics.jsonl: one line per step.
  std::ifstream f(a / "metrics.jsonl");
  int lines = 0;
  for (std::string l; std::getline(f, l);) ++lines;
  EXPECT_EQ(lines, 6);
  // A checkpoint whose optimizer state does not name this binary's adapter layout (an earlier
  // fp8rl's) is refused with a clear error, not resumed with its moments misplaced.
  const fs::path old_state = a / "checkpoint-3" / "trainer_state.safetensors";
  {
    const auto file = SafetensorsFile::open(old_state.string());
    SafetensorsWriter w;
    for (const SafetensorsTensorInfo& t : file->tensors()) w.add(t.name, file->view(t));
    for (const auto& [key, value] : file->metadata())
      if (key != "fp8rl_adapter_layout" && key != "format") w.add_metadata(key, value);
    w.write(old_state.string() + ".old");
  }
  fs::rename(old_state.string() + ".old", old_state);
  try {
    train(temp_dir("d").string(), std::nullopt, 6, (a / "checkpoint-3").string(), 3);
    ADD_FAILURE() << "resumed from a checkpoint of another adapter layout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("laid out differently"), std::string::npos) << e.what();
  }
}

// eval_loss is the training loss without the update: with one batch of all 8 examples and no
// dropout, the loss before step 0 (eval_on_start) is step 1's training loss on the same
// examples, and the evaluation after step 1 is step 2's (the adapter step 1 left). Control:
// the two evaluations differ (another adapter, another value). Training with evaluations
// trains the same adapter as without. By epoch: after each epoch's last step and the run's.
TEST(SftTrainer, EvalLossIsTheTrainingLossOfTheSameBatchWithoutTheUpdate) {
  const auto run = [](const fs::path& dir, bool eval, bool by_epoch = false) {
    Model m = load_model(golden_dir("llama"), Fp8Scheme::row);
    LoraConfig lc;
    lc.r = 8;
    lc.lora_alpha = 16;
    lc.target_modules = {"all-linear"};
    LoraAdapter adapter = LoraAdapter::init(lc, m, 3);
    Arena arena;
    Context ctx{Device::cpu, &arena};
    SftConfig c;
    c.output_dir = dir.string();
    c.per_device_train_batch_size = 8;
    c.max_tokens_per_batch = 4096;
    c.max_steps = 2;
    c.save_steps = 0;
    c.lora_dropout = 0.0;
    c.learning_rate = 5e-3;
    c.lr_scheduler_type = LrSchedulerType::constant;
    if (eval) {
      c.eval_dataset = "the training examples";  // given below, not read from a file
      c.eval_strategy = EvalStrategy::steps;
      c.eval_steps = 1;
      c.eval_on_start = true;
      c.per_device_eval_batch_size = 8;
    }
    if (by_epoch) {  // 2 steps an epoch, 3 steps
      c.per_device_train_batch_size = 4;
      c.max_steps = 3;
      c.eval_strategy = EvalStrategy::epoch;
      c.eval_on_start = false;
    }
    SftTrainer trainer(ctx, m, adapter, stepping_task(8, 12), c, "tiny-llama");
    if (eval) trainer.set_eval_data(stepping_task(8, 12));
    trainer.run();
    std::ifstream f(dir / "metrics.jsonl");
    std::vector<nlohmann::json> lines;
    for (std::string l; std::getline(f, l);) lines.push_back(nlohmann::json::parse(l));
    const TensorView p = adapter.master_params();
    return std::make_pair(lines, std::vector<float>(p.ptr<float>(), p.ptr<float>() + p.numel()));
  };
  const auto [lines, params] = run(temp_dir("eval"), true);
  ASSERT_EQ(lines.size(), 3u);  // step 0 (eval_on_start), 1, 2
  const double at_start = lines[0]["eval_loss"].get<double>();
  const double after_1 = lines[1]["eval_loss"].get<double>();
  EXPECT_FALSE(lines[0].contains("loss"));
  // The same sums of the same logprobs in another order (the epoch's shuffle).
  EXPECT_NEAR(at_start, lines[1]["loss"].get<double>(), 1e-12 * at_start);
  EXPECT_NEAR(after_1, lines[2]["loss"].get<double>(), 1e-12 * after_1);
  EXPECT_GT(std::fabs(at_start - after_1), 1e-6 * at_start);
  EXPECT_TRUE(lines[2].contains("eval_loss"));
  EXPECT_EQ(run(temp_dir("plain"), false).second, params);
  // eval_strategy epoch: after the epoch's last step and the run's last (a cut-short epoch).
  const auto by_epoch = run(temp_dir("epoch"), true, true).first;
  ASSERT_EQ(by_epoch.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(by_epoch[i].contains("eval_loss"), i > 0) << i;
}

}  // namespace
}  // namespace fp8rl
