// Reward models: sequence-classification checkpoints (config, score head, errors), the score at
// the last non-pad token against an independent route, SEQ_CLS adapters with their head (PEFT's
// layout), the reward_model reward (its texts, its score, the policy's weights shared) and its
// configuration errors; transformers' scores once tools/goldens/make_reward_goldens.py has run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "engine/engine.h"
#include "formats/json_read.h"
#include "formats/npy.h"
#include "formats/safetensors.h"
#include "model/forward.h"
#include "model/sequence_score.h"
#include "rl/reward_config.h"
#include "rl/reward_model.h"
#include "test_util.h"
#include "tolerances.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace fp8rl::test;
const std::string kDemoModel = FP8RL_SOURCE_DIR "/examples/demo/model";

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fp8rl_rm_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

json demo_config() {
  std::ifstream f(kDemoModel + "/config.json");
  return json::parse(f);
}

// The demo model as a Qwen3ForSequenceClassification: its decoder, a score head of `labels`
// rows (deterministic values), its tokenizer. `edit` changes the config or the tensors.
struct ClassifierDir {
  json config = demo_config();
  int64_t labels = 1;
  bool with_score = true;
  Shape score_shape{0};
  fs::path write(const std::string& name) const {
    const fs::path d = temp_dir(name);
    json c = config;
    c["architectures"] = {"Qwen3ForSequenceClassification"};
    c["id2label"] = json::object();
    for (int64_t i = 0; i < labels; ++i)
      c["id2label"][std::to_string(i)] = "LABEL_" + std::to_string(i);
    std::ofstream(d / "config.json") << c.dump(2);
    auto demo = SafetensorsFile::open(kDemoModel + "/model.safetensors");
    SafetensorsWriter w;
    for (const SafetensorsTensorInfo& info : demo->tensors())
      if (info.name != "lm_head.weight") w.add(info.name, demo->view(info));
    const Shape s = score_shape.rank == 1 && score_shape[0] == 0 ? Shape{labels, 128} : score_shape;
    Tensor score = Tensor::empty(s, DType::f32);
    for (int64_t i = 0; i < score.view().numel(); ++i)
      score.ptr<float>()[i] = 0.05f * float((i * 37) % 23 - 11);
    if (with_score) w.add("score.weight", score);
    w.write((d / "model.safetensors").string());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(kDemoModel + "/" + f, d / f);
    return d;
  }
};

// The final normed hidden states of every token of `ids` through the simple forward with an
// identity head (a route that cuts nothing and pools nothing): [T, H].
std::vector<float> hidden_states(Context& ctx, const Model& m, const LoraAdapter* adapter,
                                 const std::vector<int32_t>& ids) {
  const int64_t h = m.config().hidden_size, t = int64_t(ids.size());
  Tensor eye = Tensor::zeros({h, h}, DType::f32);
  for (int64_t i = 0; i < h; ++i) eye.ptr<float>()[i * h + i] = 1.0f;
  LinearWeight identity;
  identity.weight = eye.view();
  KvCache cache(m.config(), t);
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = int32_t(i);
  SequenceInput seq{ids, pos, &cache};
  std::vector<float> out(static_cast<size_t>(t * h));
  forward(ctx, m, adapter, {&seq, 1}, LogitRows::all, TensorView(out.data(), DType::f32, {t, h}),
          &identity);
  return out;
}

double dot_row(const std::vector<float>& hidden, int64_t row, const TensorView& head) {
  const int64_t h = head.dim(1);
  std::vector<float> w(static_cast<size_t>(h));
  convert(head.data, head.dtype, w.data(), DType::f32, size_t(h));
  double s = 0;
  for (int64_t k = 0; k < h; ++k) s += double(hidden[size_t(row * h + k)]) * double(w[size_t(k)]);
  return s;
}

TEST(ClassifierConfig, LabelsAndPad) {
  json c = demo_config();
  c["architectures"] = {"Qwen3ForSequenceClassification"};
  ModelConfig m = ModelConfig::from_json(c);
  EXPECT_TRUE(m.sequence_classification);
  EXPECT_EQ(m.arch, Arch::qwen3);
  EXPECT_EQ(m.num_labels, 2);  // transformers' default without id2label
  EXPECT_EQ(m.output_size(), 2);
  EXPECT_EQ(m.pad_token_id, 285);
  c["id2label"] = {{"0", "LABEL_0"}};
  EXPECT_EQ(ModelConfig::from_json(c).num_labels, 1);
  c["architectures"] = {"LlamaForSequenceClassification"};
  EXPECT_EQ(ModelConfig::from_json(c).arch, Arch::llama);
  c["pad_token_id"] = 288;
  EXPECT_THROW(
      {
        try {
          ModelConfig::from_json(c);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("pad_token_id"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  c["pad_token_id"] = 0;
  c["id2label"] = json::array();
  EXPECT_THROW(ModelConfig::from_json(c), Error);
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ClassifierLoad, ScoreHeadErrors) {
  ClassifierDir missing;
  missing.with_score = false;
  const fs::path a = missing.write("noscore");
  expect_error([&] { Model::load(a.string()); }, "has no score.weight");
  ClassifierDir wrong;
  wrong.score_shape = Shape{1, 64};
  const fs::path b = wrong.write("badscore");
  expect_error([&] { Model::load(b.string()); }, "tensor 'score.weight' has shape [1, 64]");
  ClassifierDir ok;
  const fs::path c = ok.write("okscore");
  const Model m = Model::load(c.string());
  EXPECT_EQ(m.lm_head.weight.shape, (Shape{1, 128}));
  Arena arena;
  Context ctx{Device::cpu, &arena};
  expect_error([&] { Engine(ctx, m, nullptr, nullptr, {}, EngineOptions{}); }, "cannot generate");
  // A SEQ_CLS adapter over a classifier starts from its head (PEFT's modules_to_save copy).
  LoraConfig lc;
  lc.target_modules = {"q_proj"};
  lc.sequence_classification = true;
  const LoraAdapter head = LoraAdapter::init(lc, m, 2);
  EXPECT_EQ(rel_max_diff(head.score_slice(head.master_params()), m.lm_head.weight), 0.0);
  fs::remove_all(a);
  fs::remove_all(b);
  fs::remove_all(c);
}

TEST(PooledPosition, LastNonPad) {
  const std::vector<int32_t> ids = {5, 7, 285, 9, 285, 285};
  EXPECT_EQ(pooled_position(ids, 285), 3);
  EXPECT_EQ(pooled_position(ids, std::nullopt), 5);
  EXPECT_EQ(pooled_position(std::vector<int32_t>{285, 285}, 285), 0);
  EXPECT_EQ(pooled_position(std::vector<int32_t>{4}, 285), 0);
}

// The score of each sequence equals the head times the hidden state at its last non-pad token,
// the hidden states taken from a full, uncut forward; the last token (a pad) does not.
TEST(SequenceScore, EqualsHeadAtLastNonPadToken) {
  const fs::path d = ClassifierDir().write("score");
  const Model m = Model::load(d.string());
  Arena arena;
  Context ctx{Device::cpu, &arena};
  const std::vector<std::vector<int32_t>> seqs = {
      {3, 17, 40, 41, 42, 285, 285},
      {8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
       26},  // longer than a KV block
      {285, 285, 285}};
  ScoreOptions so;
  so.pad_token_id = m.config().pad_token_id;
  so.max_batch_tokens = 20;  // two forwards
  const std::vector<float> scores = score_sequences(ctx, m, nullptr, nullptr, seqs, so);
  ASSERT_EQ(scores.size(), 3u);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<float> hidden = hidden_states(ctx, m, nullptr, seqs[i]);
    const int64_t at = pooled_position(seqs[i], so.pad_token_id);
    const double ref = dot_row(hidden, at, m.lm_head.weight);
    EXPECT_LE(std::fabs(scores[i] - ref), kF32HeadDot * std::max(1.0, std::fabs(ref))) << i;
    if (i == 0) {
      // Negative control: the last token's state (a pad) gives another score.
      const double last = dot_row(hidden, int64_t(seqs[i].size()) - 1, m.lm_head.weight);
      EXPECT_GT(std::fabs(scores[i] - last), 100 * kF32HeadDot * std::max(1.0, std::fabs(ref)));
    }
  }
  // Batched or alone: the same bits (the CPU forward is batch-invariant).
  so.max_batch_tokens = 4096;
  EXPECT_EQ(score_sequences(ctx, m, nullptr, nullptr, seqs, so), scores);
  fs::remove_all(d);
}

// Scoring in a standby region planned by plan_scoring: the same bits as with pools of its own,
// the KV in the region (its holder the caller's, its size the plan's: nothing grew). Control:
// without a region the region is never touched.
TEST(SequenceScore, RunsInAPlannedStandbyRegionWithTheSameBits) {
  const fs::path d = ClassifierDir().write("score_region");
  const Model m = Model::load(d.string());
  Arena arena;
  Context ctx{Device::cpu, &arena};
  const std::vector<std::vector<int32_t>> seqs = {
      {3, 17, 40, 41, 42, 285, 285}, {8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}, {5}};
  ScoreOptions so;
  so.pad_token_id = m.config().pad_token_id;
  so.max_batch_tokens = 16;  // two forwards
  StandbyRegion region(ctx);
  so.region = &region;
  so.holder = &so;
  const std::vector<float> own = [&] {
    ScoreOptions plain = so;
    plain.region = nullptr;
    return score_sequences(ctx, m, nullptr, nullptr, seqs, plain);
  }();
  EXPECT_EQ(region.holder(), nullptr);
  EXPECT_EQ(region.size(), 0u);
  const ScorePlan plan = plan_scoring(ctx, m, nullptr, nullptr, {3, 14, 16});
  // The largest forward: 16 tokens in at most 3 sequences, ceil((16 + 45) / 16) = 4 blocks.
  EXPECT_EQ(plan.kv_blocks, 4);
  EXPECT_EQ(plan.kv_bytes, 4 * KvPool::block_bytes(m.config(), ctx));
  EXPECT_GT(plan.scratch_bytes, 0u);
  region.reserve(plan.kv_bytes);
  EXPECT_EQ(score_sequences(ctx, m, nullptr, nullptr, seqs, so), own);
  EXPECT_EQ(region.holder(), &so);
  EXPECT_EQ(region.size(), plan.kv_bytes);
  EXPECT_EQ(region.allocations(), 1);
  expect_error(
      [&] {
        plan_scoring(ctx, m, nullptr, nullptr, {0, 14, 16});
      },
      "sequences 0, max_length 14 and max_batch_tokens 16 must be positive");
  fs::remove_all(d);
}

// A SEQ_CLS adapter carries the head in its masters, writes it where PEFT does and reads it
// back; over a causal LM its head scores the sequences.
TEST(SeqClsAdapter, HeadSavedAsPeftAndScores) {
  const Model base = Model::load(kDemoModel);
  LoraConfig lc;
  lc.r = 4;
  lc.lora_alpha = 8;
  lc.target_modules = {"q_proj", "v_proj"};
  lc.sequence_classification = true;
  LoraAdapter a = LoraAdapter::init(lc, base, 3);
  ASSERT_TRUE(a.has_score_head());
  EXPECT_EQ(a.score_slice(a.master_params()).shape, (Shape{1, 128}));
  // B = 0 leaves the adapter's matrices inert; give them values so the test sees them.
  Tensor values = a.host_masters();
  for (int64_t i = 0; i < values.view().numel(); ++i)
    values.ptr<float>()[i] += 0.01f * float((i % 7) - 3);
  a.set_masters(values.view());
  const fs::path d = temp_dir("adapter");
  a.save_peft((d / "rm").string(), "demo");
  const json cfg = read_json_file((d / "rm" / "adapter_config.json").string());
  EXPECT_EQ(cfg["task_type"], "SEQ_CLS");
  EXPECT_EQ(cfg["modules_to_save"], json({"classifier", "score"}));
  auto file = SafetensorsFile::open((d / "rm" / "adapter_model.safetensors").string());
  ASSERT_NE(file->find("base_model.model.score.weight"), nullptr);
  const LoraAdapter b = LoraAdapter::load_peft((d / "rm").string(), base);
  EXPECT_EQ(rel_max_diff(b.master_params(), a.master_params()), 0.0);

  Arena arena;
  Context ctx{Device::cpu, &arena};
  const LinearWeight head = b.score_head(Device::cpu);
  const std::vector<std::vector<int32_t>> seqs = {{3, 17, 40, 41, 285}};
  ScoreOptions so;
  so.pad_token_id = 285;
  const float s = score_sequences(ctx, base, &b, &head, seqs, so)[0];
  const std::vector<float> hidden = hidden_states(ctx, base, &b, seqs[0]);
  const double ref = dot_row(hidden, 3, head.weight);
  EXPECT_LE(std::fabs(s - ref), kF32HeadDot * std::max(1.0, std::fabs(ref)));
  // Negative control: without the adapter's matrices the state (and the score) differ.
  const double plain = dot_row(hidden_states(ctx, base, nullptr, seqs[0]), 3, head.weight);
  EXPECT_GT(std::fabs(s - plain), 100 * kF32HeadDot * std::max(1.0, std::fabs(ref)));
  // A SEQ_CLS adapter whose head is missing or does not fit the model is refused by name.
  const auto rewrite = [&](const std::optional<Shape>& head_shape) {
    auto src = SafetensorsFile::open((d / "rm" / "adapter_model.safetensors").string());
    SafetensorsWriter w;
    std::vector<Tensor> keep;
    for (const SafetensorsTensorInfo& info : src->tensors()) {
      if (info.name == "base_model.model.score.weight") continue;
      Tensor t = Tensor::empty(info.shape, DType::f32);
      convert(src->view(info).data, info.dtype, t.view().data, DType::f32,
              size_t(info.shape.numel()));
      w.add(info.name, t);
    }
    if (head_shape) w.add("base_model.model.score.weight", Tensor::zeros(*head_shape, DType::f32));
    w.write((d / "bad" / "adapter_model.safetensors").string());
    fs::copy_file(d / "rm" / "adapter_config.json", d / "bad" / "adapter_config.json",
                  fs::copy_options::overwrite_existing);
  };
  fs::create_directories(d / "bad");
  rewrite(std::nullopt);
  expect_error([&] { LoraAdapter::load_peft((d / "bad").string(), base); },
               "needs its score head 'base_model.model.score.weight'");
  rewrite(Shape{1, 64});
  expect_error([&] { LoraAdapter::load_peft((d / "bad").string(), base); },
               "the score head 'base_model.model.score.weight' is F32 [1, 64]");
  rewrite(Shape{2, 128});
  RewardModelOptions two;
  two.model = kDemoModel;
  two.adapter = (d / "bad").string();
  RewardModelReward two_labels(two);
  Arena a2;
  Context c2{Device::cpu, &a2};
  expect_error([&] { two_labels.load({&c2, nullptr}); }, "a score head of 2 labels");
  // A CAUSAL_LM adapter file with a head tensor is refused (unexpected tensor).
  json causal = cfg;
  causal["task_type"] = "CAUSAL_LM";
  causal["modules_to_save"] = nullptr;
  std::ofstream(d / "rm" / "adapter_config.json") << causal.dump();
  expect_error([&] { LoraAdapter::load_peft((d / "rm").string(), base); },
               "unexpected tensor 'base_model.model.score.weight'");
  fs::remove_all(d);
}

RewardBatch chat_batch() {
  RewardBatch b;
  b.prompt_messages = json::array();
  for (const char* q : {"What is 12+30?", "What is 7+8?"}) {
    b.prompt_messages.push_back(json::array({{{"role", "user"}, {"content", q}}}));
    b.prompts.push_back(q);
  }
  b.completions = {"42", "15"};
  b.completion_ids = {{1}, {2}};
  b.columns = json::object();
  return b;
}

// The reward renders prompt + completion with the reward model's template and scores it.
TEST(RewardModelReward, ScoresTheRenderedConversation) {
  const fs::path d = ClassifierDir().write("reward");
  RewardModelOptions o;
  o.model = d.string();
  RewardModelReward r(o);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  r.load({&ctx, nullptr});
  EXPECT_FALSE(r.shares_policy());
  const RewardBatch batch = chat_batch();
  const std::vector<std::vector<int32_t>> ids = r.encode(batch);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(d);
  const ChatTemplateConfig chat = load_chat_template_config(d.string());
  ChatRequest req;
  for (const auto& m : batch.prompt_messages[0]) req.messages.push_back(nlohmann::ordered_json(m));
  nlohmann::ordered_json reply = nlohmann::ordered_json::object();
  reply["role"] = "assistant";
  reply["content"] = "42";
  req.messages.push_back(reply);
  const std::string text = ChatTemplate(chat.source).render(build_chat_context(chat, req));
  EXPECT_NE(text.find("42"), std::string::npos);
  EXPECT_EQ(ids[0], tokenizer.encode(text, false));
  const RewardValues v = r.score(batch);
  const Model m = Model::load(d.string());
  ScoreOptions so;
  so.pad_token_id = 285;
  const std::vector<float> ref = score_sequences(ctx, m, nullptr, nullptr, ids, so);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(*v[0], double(ref[0]));
  EXPECT_EQ(*v[1], double(ref[1]));
  EXPECT_NE(*v[0], *v[1]);
  // The same reward model quantized on load (FP8 row scaling): close to the unquantized
  // scores, not equal.
  RewardModelOptions q = o;
  q.fp8 = Fp8Scheme::row;
  RewardModelReward quantized(q);
  quantized.load({&ctx, nullptr});
  const RewardValues vq = quantized.score(batch);
  EXPECT_NE(*vq[0], *v[0]);
  EXPECT_NEAR(*vq[0], *v[0], 0.1 * std::max(1.0, std::fabs(*v[0])));
  // A text batch is prompt + completion.
  RewardBatch text_batch = batch;
  text_batch.prompt_messages = nullptr;
  EXPECT_EQ(r.encode(text_batch)[1], tokenizer.encode("What is 7+8?15", false));
  fs::remove_all(d);
}

// Over the policy's own directory with a SEQ_CLS adapter the reward runs on the policy's weights.
TEST(RewardModelReward, SharesThePolicyBase) {
  const Model policy = Model::load(kDemoModel);
  LoraConfig lc;
  lc.target_modules = {"q_proj"};
  lc.sequence_classification = true;
  const fs::path d = temp_dir("shared");
  LoraAdapter::init(lc, policy, 1).save_peft((d / "rm").string(), "demo");
  RewardModelOptions o;
  o.model = kDemoModel;
  o.adapter = (d / "rm").string();
  RewardModelReward r(o);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  r.load({&ctx, &policy});
  EXPECT_TRUE(r.shares_policy());
  const RewardValues v = r.score(chat_batch());
  EXPECT_TRUE(v[0].has_value() && std::isfinite(*v[0]));
  // Without the adapter the policy's directory has no head.
  o.adapter.clear();
  expect_error([&] { RewardModelReward{o}; }, "with no score head");
  fs::remove_all(d);
}

TEST(RewardModelConfig, BadEntries) {
  const fs::path two = [] {
    ClassifierDir c;
    c.labels = 2;
    return c.write("twolabels");
  }();
  const fs::path ok = ClassifierDir().write("okconfig");
  const auto set = [](const std::string& text) { return make_reward_set(json::parse(text)); };
  expect_error([&] { set(R"([{"type": "reward_model"}])"); }, "the field 'model' is required");
  expect_error([&] { set(R"([{"type": "reward_model", "model": ""}])"); },
               "'model' must name a model directory");
  expect_error([&] { set(R"([{"type": "reward_model", "model": "/nonexistent/rm"}])"); },
               "/nonexistent/rm/config.json");
  expect_error([&] { set(R"([{"type": "reward_model", "model": ")" + two.string() + R"("}])"); },
               "num_labels = 2");
  const std::string m = R"("model": ")" + ok.string() + R"(")";
  expect_error([&] { set(R"([{"type": "reward_model", )" + m + R"(, "fp8": "e5m2"}])"); },
               "'fp8' must be one of");
  expect_error([&] { set(R"([{"type": "reward_model", )" + m + R"(, "max_batch_tokens": 0}])"); },
               "'max_batch_tokens' must be in [1, 4194304]");
  expect_error([&] { set(R"([{"type": "reward_model", )" + m + R"(, "adaptor": "x"}])"); },
               "did you mean 'adapter'");
  expect_error(
      [&] { set(R"([{"type": "reward_model", )" + m + R"(, "adapter": "/nonexistent"}])"); },
      "no adapter_config.json");
  EXPECT_EQ(
      set(R"([{"type": "reward_model", )" + m + R"(, "weight": 0.5, "fp8": "row"}])").weights(),
      std::vector<double>{0.5});
  // A tokenizer larger than the model's vocabulary.
  json c = read_json_file((ok / "config.json").string());
  c["vocab_size"] = 100;
  c["pad_token_id"] = 0;
  std::ofstream(ok / "config.json") << c.dump();
  expect_error([&] { set(R"([{"type": "reward_model", )" + m + R"(}])"); },
               "its vocabulary does not fit the model");
  fs::remove_all(two);
  fs::remove_all(ok);
}

// transformers' scores of a tiny random classifier (tools/goldens/make_reward_goldens.py): the
// padded batch as transformers ran it, pooled at the last non-pad token.
TEST(RewardGolden, ScoresMatchTransformers) {
  for (const std::string arch : {"reward_qwen3", "reward_llama"}) {
    const std::string dir = golden_dir(arch);
    if (!fs::exists(dir + "/scores.npy")) GTEST_SKIP() << dir << " not generated yet";
    const Model m = Model::load(dir);
    const json ids = read_json_file(dir + "/ids.json");
    Arena arena;
    Context ctx{Device::cpu, &arena};
    ScoreOptions so;
    so.pad_token_id = m.config().pad_token_id;
    const std::vector<float> ours =
        score_sequences(ctx, m, nullptr, nullptr, ids.get<std::vector<std::vector<int32_t>>>(), so);
    const Tensor ref = read_npy(dir + "/scores.npy");
    ASSERT_EQ(int64_t(ours.size()), ref.view().numel());
    EXPECT_LE(rel_max_diff(TensorView(const_cast<float*>(ours.data()), DType::f32, ref.shape()),
                           ref.view()),
              kHfFp32Logits)
        << arch;
  }
}

}  // namespace
}  // namespace fp8rl
