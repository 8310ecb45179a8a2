// LoRA adapters as PEFT writes and reads them: initialization, the adapter_config.json keys
// and safetensors names PEFT uses, target selection, every rejected input, attaching.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "core/rng.h"
#include "model/adapter.h"
#include "model/forward.h"
#include "model/presets.h"
#include "model_test_util.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kQ = 0, kUp = 5, kDown = 6;  // kProjectionNames indices

std::string temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("fp8rl_adapter_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

void write_json(const std::string& path, const json& j) {
  std::ofstream(path) << j.dump(2);
}

LoraConfig config_of(std::vector<std::string> targets, int64_t r = 8, double alpha = 16) {
  LoraConfig c;
  c.r = r;
  c.lora_alpha = alpha;
  c.target_modules = std::move(targets);
  return c;
}

// Sets every B master to nonzero values so that a round trip exercises both matrices.
void randomize_b(LoraAdapter& a, uint64_t seed) {
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int p = 0; p < 7; ++p) {
      if (!a.targeted(l, p)) continue;
      const TensorView b = a.master_b(l, p);
      for (int64_t i = 0; i < b.numel(); ++i)
        b.ptr<float>()[i] = normal01(seed + uint64_t(l * 7 + p), uint64_t(i));
    }
  a.mark_updated();
}

// The set of (layer, projection) an adapter targets, as "l.p" strings.
std::set<std::string> targeted_set(const LoraAdapter& a) {
  std::set<std::string> s;
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int p = 0; p < 7; ++p)
      if (a.targeted(l, p)) s.insert(std::to_string(l) + "." + kProjectionNames[p]);
  return s;
}

// Runs `f` and requires an fp8rl::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
    return;
  }
  ADD_FAILURE() << "no error; expected one mentioning " << *parts.begin();
}

// Rewrites adapter_model.safetensors of `dir`, letting `edit` change the tensors.
void rewrite_tensors(const std::string& dir,
                     const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  const std::string path = dir + "/adapter_model.safetensors";
  std::map<std::string, Tensor> tensors;
  {
    const auto file = SafetensorsFile::open(path);
    for (const SafetensorsTensorInfo& info : file->tensors()) {
      const TensorView v = file->view(info);
      Tensor t = Tensor::empty(v.shape, v.dtype);
      std::memcpy(t.view().data, v.data, v.nbytes());
      tensors[info.name] = t;
    }
  }
  edit(tensors);
  SafetensorsWriter w;
  for (auto& [n, t] : tensors) w.add(n, t.view());
  w.write(path);
}

class AdapterTest : public ::testing::Test {
 protected:
  // Qwen3 tiny: 2 layers, H 192, q [256, 192], k/v [128, 192], o [192, 256], gate/up
  // [320, 192], down [192, 320]: every projection has a distinct [N, K].
  Model model = load_model(golden_dir("qwen3"));

  // A saved adapter (all-linear, r 8, nonzero B) for the validation tests to corrupt.
  std::string saved_adapter(const std::string& name) {
    LoraAdapter a = LoraAdapter::init(config_of({"all-linear"}), model, 3);
    randomize_b(a, 11);
    const std::string dir = temp_dir(name);
    a.save_peft(dir, "tiny/qwen3");
    return dir;
  }
};

const std::string kQName = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";

}  // namespace

TEST(LoraConfig, ScaleIsAlphaOverRankOrOverSqrtRank) {
  LoraConfig c = config_of({"q_proj"}, 16, 32);
  EXPECT_DOUBLE_EQ(c.scale(), 2.0);
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scale(), 8.0);
}

TEST_F(AdapterTest, DefaultInitIsKaimingUniformAndZeroB) {
  const LoraAdapter a = LoraAdapter::init(config_of({"all-linear"}), model, 7);
  for (int p = 0; p < 7; ++p) {
    // Pool both layers: A of projection p is uniform in [-1/sqrt(K), 1/sqrt(K)].
    double sum2 = 0.0, amax = 0.0;
    int64_t n = 0;
    double bound = 0.0;
    for (int64_t l = 0; l < 2; ++l) {
      const TensorView av = a.master_a(l, p), bv = a.master_b(l, p);
      ASSERT_EQ(av.dim(0), 8);
      ASSERT_EQ(bv.dim(1), 8);
      bound = 1.0 / std::sqrt(double(av.dim(1)));
      for (int64_t i = 0; i < av.numel(); ++i) {
        const double x = av.ptr<float>()[i];
        ASSERT_LE(std::fabs(x), bound) << kProjectionNames[p];
        sum2 += x * x;
        amax = std::max(amax, std::fabs(x));
      }
      n += av.numel();
      for (int64_t i = 0; i < bv.numel(); ++i) ASSERT_EQ(bv.ptr<float>()[i], 0.0f);
    }
    const double second = sum2 / double(n), expect = bound * bound / 3.0;
    EXPECT_NEAR(second / expect, 1.0, second_moment_tolerance(9.0 / 5.0, n)) << kProjectionNames[p];
    EXPECT_GT(amax, 0.99 * bound) << "the draws must fill the interval";
  }
  // Per layer sum K = sum N = 1536.
  EXPECT_EQ(a.master_params().numel(), 2 * 8 * (1536 + 1536));
}

TEST_F(AdapterTest, GaussianInitHasStdOneOverRank) {
  LoraConfig c = config_of({"all-linear"}, 4);
  c.init_lora_weights = "gaussian";
  const LoraAdapter a = LoraAdapter::init(c, model, 5);
  double sum = 0.0, sum2 = 0.0;
  int64_t n = 0;
  for (int64_t l = 0; l < 2; ++l)
    for (int p = 0; p < 7; ++p) {
      const TensorView av = a.master_a(l, p), bv = a.master_b(l, p);
      for (int64_t i = 0; i < av.numel(); ++i) {
        sum += av.ptr<float>()[i];
        sum2 += double(av.ptr<float>()[i]) * av.ptr<float>()[i];
      }
      n += av.numel();
      for (int64_t i = 0; i < bv.numel(); ++i) ASSERT_EQ(bv.ptr<float>()[i], 0.0f);
    }
  const double var = 1.0 / 16.0;  // PEFT: nn.init.normal_(std=1/r), r = 4
  EXPECT_NEAR(sum2 / double(n) / var, 1.0, second_moment_tolerance(3.0, n));
  EXPECT_NEAR(sum / double(n), 0.0, 5.0 * std::sqrt(var / double(n)));
}

TEST_F(AdapterTest, InitIsDeterministicInTheSeed) {
  const LoraConfig c = config_of({"q_proj", "down_proj"});
  const LoraAdapter a = LoraAdapter::init(c, model, 1), b = LoraAdapter::init(c, model, 1),
                    other = LoraAdapter::init(c, model, 2);
  const size_t bytes = a.master_params().nbytes();
  EXPECT_EQ(std::memcmp(a.master_params().data, b.master_params().data, bytes), 0);
  EXPECT_NE(std::memcmp(a.master_params().data, other.master_params().data, bytes), 0);
}

TEST_F(AdapterTest, SaveLoadRoundTripIsBitExact) {
  LoraConfig c = config_of({"q_proj", "v_proj", "down_proj"}, 4, 12);
  c.use_rslora = true;
  c.lora_dropout = 0.05;
  LoraAdapter a = LoraAdapter::init(c, model, 9);
  randomize_b(a, 21);
  const std::string dir = temp_dir("roundtrip");
  a.save_peft(dir, "org/base");
  EXPECT_FALSE(fs::exists(dir + ".tmp-" + std::to_string(::getpid())));

  const LoraAdapter b = LoraAdapter::load_peft(dir, model);
  EXPECT_EQ(targeted_set(b), targeted_set(a));
  EXPECT_EQ(b.config().r, 4);
  EXPECT_EQ(b.config().lora_alpha, 12);
  EXPECT_TRUE(b.config().use_rslora);
  EXPECT_EQ(b.config().lora_dropout, 0.05);
  EXPECT_EQ(b.scale(), a.scale());
  ASSERT_EQ(b.master_params().numel(), a.master_params().numel());
  EXPECT_EQ(std::memcmp(a.master_params().data, b.master_params().data, a.master_params().nbytes()),
            0);

  // Saving over an existing adapter replaces it.
  randomize_b(a, 33);
  a.save_peft(dir + "/", "org/base");
  const LoraAdapter c2 = LoraAdapter::load_peft(dir, model);
  EXPECT_EQ(
      std::memcmp(a.master_params().data, c2.master_params().data, a.master_params().nbytes()), 0);
  EXPECT_NE(
      std::memcmp(b.master_params().data, c2.master_params().data, a.master_params().nbytes()), 0);
  fs::remove_all(dir);
}

TEST_F(AdapterTest, LoadsBf16AndF16Tensors) {
  const std::string dir = saved_adapter("halfprec");
  const LoraAdapter ref = LoraAdapter::load_peft(dir, model);
  for (const DType dt : {DType::bf16, DType::f16}) {
    ref.save_peft(dir, "tiny/qwen3");  // the f32 tensors again
    rewrite_tensors(dir, [&](std::map<std::string, Tensor>& t) {
      for (auto& [n, x] : t) {
        Tensor h = Tensor::empty(x.shape(), dt);
        convert(x.ptr<float>(), DType::f32, h.view().data, dt, size_t(x.numel()));
        x = h;
      }
    });
    EXPECT_EQ(SafetensorsFile::open(dir + "/adapter_model.safetensors")->find(kQName)->dtype, dt);
    const LoraAdapter a = LoraAdapter::load_peft(dir, model);
    const TensorView got = a.master_b(1, kUp), want = ref.master_b(1, kUp);
    int64_t inexact = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
      const float w = want.ptr<float>()[i];
      const float rounded = dt == DType::bf16 ? round_to_bf16(w) : f16_to_f32(f32_to_f16(w));
      ASSERT_EQ(got.ptr<float>()[i], rounded) << dtype_name(dt) << " element " << i;
      inexact += rounded != w;
    }
    EXPECT_GT(inexact, 0) << "the f32 values must not all be representable";
  }
  fs::remove_all(dir);
}

TEST_F(AdapterTest, WritesPeftNamesAndConfigKeys) {
  LoraAdapter a = LoraAdapter::init(config_of({"all-linear"}, 8, 16), model, 1);
  const std::string dir = temp_dir("names");
  a.save_peft(dir, "Qwen/Qwen3-8B");

  const json cfg = read_json(dir + "/adapter_config.json");
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["r"], 8);
  EXPECT_TRUE(cfg["lora_alpha"].is_number_integer());  // PEFT's type
  EXPECT_EQ(cfg["lora_alpha"], 16);
  EXPECT_EQ(cfg["lora_dropout"], 0.0);
  EXPECT_EQ(cfg["use_rslora"], false);
  EXPECT_EQ(cfg["bias"], "none");
  EXPECT_EQ(cfg["fan_in_fan_out"], false);
  EXPECT_EQ(cfg["init_lora_weights"], true);  // PEFT rejects the string "default"
  EXPECT_EQ(cfg["base_model_name_or_path"], "Qwen/Qwen3-8B");
  EXPECT_EQ(cfg["inference_mode"], true);
  EXPECT_TRUE(cfg["modules_to_save"].is_null());
  EXPECT_TRUE(cfg["layers_to_transform"].is_null());
  EXPECT_TRUE(cfg["revision"].is_null());
  EXPECT_EQ(cfg["use_dora"], false);
  EXPECT_EQ(cfg["target_modules"],
            json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));

  // The raw header: names, dtype and shapes exactly as PEFT's get_peft_model_state_dict.
  std::ifstream f(dir + "/adapter_model.safetensors", std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, ' ');
  f.read(header.data(), std::streamsize(header_len));
  const json h = json::parse(header);
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  EXPECT_EQ(h.size(), 1u + 2 * 7 * 2);
  EXPECT_EQ(h[kQName]["dtype"], "F32");
  EXPECT_EQ(h[kQName]["shape"], json({8, 192}));
  EXPECT_EQ(h["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]["shape"],
            json({256, 8}));
  EXPECT_EQ(h["base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight"]["shape"],
            json({128, 8}));
  EXPECT_EQ(h["base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight"]["shape"],
            json({8, 256}));
  EXPECT_EQ(h["base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight"]["shape"],
            json({320, 8}));
  EXPECT_EQ(h["base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"]["shape"],
            json({8, 320}));
  for (const auto& [name, v] : h.items()) EXPECT_EQ(name.find(".default"), std::string::npos);

  // Gaussian init is saved as PEFT's string; a regex target is saved as the regex.
  LoraConfig g = config_of({}, 4);
  g.target_regex = R"(model\.layers\.\d+\.mlp\..*)";
  g.init_lora_weights = "gaussian";
  LoraAdapter::init(g, model, 1).save_peft(dir, "x");
  const json gcfg = read_json(dir + "/adapter_config.json");
  EXPECT_EQ(gcfg["init_lora_weights"], "gaussian");
  EXPECT_EQ(gcfg["target_modules"], R"(model\.layers\.\d+\.mlp\..*)");
  fs::remove_all(dir);
}

TEST_F(AdapterTest, TargetSelectionFollowsPeft) {
  const auto select = [&](const LoraConfig& c) {
    return targeted_set(LoraAdapter::init(c, model, 1));
  };
  EXPECT_EQ(select(config_of({"q_proj", "v_proj"})),
            (std::set<std::string>{"0.q_proj", "0.v_proj", "1.q_proj", "1.v_proj"}));
  EXPECT_EQ(select(config_of({"mlp.down_proj"})),
            (std::set<std::string>{"0.down_proj", "1.down_proj"}));
  EXPECT_EQ(select(config_of({"model.layers.1.self_attn.o_proj"})),
            (std::set<std::string>{"1.o_proj"}));
  EXPECT_EQ(select(config_of({"all-linear"})).size(), 14u);

  LoraConfig layers = config_of({"q_proj", "gate_proj"});
  layers.layers_to_transform = {1};
  EXPECT_EQ(select(layers), (std::set<std::string>{"1.q_proj", "1.gate_proj"}));

  LoraConfig re = config_of({});
  re.target_regex = R"(model\.layers\.1\.self_attn\.(q|k)_proj)";
  EXPECT_EQ(select(re), (std::set<std::string>{"1.q_proj", "1.k_proj"}));
  // The regex must match the whole path (re.fullmatch), not a part of it.
  re.target_regex = "q_proj";
  expect_error([&] { select(re); }, {"'q_proj'", "selects none"});
  re.target_regex = ".*\\.(up|down)_proj";
  EXPECT_EQ(select(re),
            (std::set<std::string>{"0.up_proj", "0.down_proj", "1.up_proj", "1.down_proj"}));
  // A name is a whole path component: "proj" is no module.
  expect_error([&] { select(config_of({"proj"})); }, {"'proj'", "selects none"});
  expect_error([&] { select(config_of({"q_proj", "lm_head"})); }, {"'lm_head'"});
  re.target_regex = "(";
  expect_error([&] { select(re); }, {"malformed"});
  layers.layers_to_transform = {2};
  expect_error([&] { select(layers); }, {"layers_to_transform has layer 2"});
}

// Every key that PEFT 0.19 writes, at the values it writes for a plain LoRA: accepted.
TEST(LoraConfig, ReadsTheKeysPeftWrites) {
  const json j = json::parse(R"({
    "alora_invocation_tokens": null, "alpha_pattern": {}, "arrow_config": null,
    "auto_mapping": null, "base_model_name_or_path": "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
    "bias": "none", "corda_config": null, "ensure_weight_tying": false, "eva_config": null,
    "exclude_modules": null, "fan_in_fan_out": false, "inference_mode": true,
    "init_lora_weights": true, "layer_replication": null, "layers_pattern": null,
    "layers_to_transform": null, "loftq_config": {}, "lora_alpha": 32, "lora_bias": false,
    "lora_dropout": 0.05, "lora_ga_config": null, "megatron_config": null,
    "megatron_core": "megatron.core", "modules_to_save": null, "peft_type": "LORA",
    "peft_version": "0.19.1", "qalora_group_size": 16, "r": 16, "rank_pattern": {},
    "revision": null, "target_modules": ["o_proj", "v_proj", "gate_proj", "down_proj", "k_proj",
    "q_proj", "up_proj"], "target_parameters": null, "task_type": "CAUSAL_LM",
    "trainable_token_indices": null, "use_bdlora": null, "use_dora": false, "use_qalora": false,
    "use_rslora": false})");
  const LoraConfig c = LoraConfig::from_peft_json(j, "peft.json");
  EXPECT_EQ(c.r, 16);
  EXPECT_EQ(c.lora_alpha, 32);
  EXPECT_EQ(c.lora_dropout, 0.05);
  EXPECT_EQ(c.target_modules.size(), 7u);
  EXPECT_TRUE(c.target_regex.empty());
  EXPECT_EQ(c.scale(), 2.0);
  // The same file with a setting that changes the computation is refused.
  for (const char* key : {"alora_invocation_tokens", "use_bdlora", "exclude_modules"}) {
    json bad = j;
    bad[key] = json::array({1});
    expect_error([&] { LoraConfig::from_peft_json(bad, "peft.json"); }, {"peft.json", key});
  }
}

TEST_F(AdapterTest, RejectsEveryInvalidAdapter) {
  const std::string dir = saved_adapter("invalid");
  const std::string cfg_path = dir + "/adapter_config.json";
  const json good = read_json(cfg_path);
  const auto load = [&] { LoraAdapter::load_peft(dir, model); };
  ASSERT_NO_THROW(load());

  // Config errors: each edit of the good config, with a part of the message it must give.
  const std::vector<std::pair<std::function<void(json&)>, std::string>> config_cases = {
      {[](json& j) { j["peft_type"] = "PREFIX_TUNING"; }, "peft_type is 'PREFIX_TUNING'"},
      {[](json& j) { j.erase("peft_type"); }, "peft_type"},
      {[](json& j) { j["task_type"] = "TOKEN_CLS"; }, "task_type is 'TOKEN_CLS'"},
      // A reward model's adapter saves its score head only (tests/rl/test_reward_model.cpp).
      {[](json& j) {
         j["task_type"] = "SEQ_CLS";
         j["modules_to_save"] = {"lm_head"};
       },
       "may save only the 'score' head"},
      {[](json& j) { j["r"] = 0; }, "r = 0"},
      {[](json& j) { j["r"] = "8"; }, "r must be an integer"},
      {[](json& j) { j["lora_dropout"] = 1.0; }, "lora_dropout"},
      {[](json& j) { j["fan_in_fan_out"] = true; }, "fan_in_fan_out"},
      {[](json& j) { j["bias"] = "all"; }, "bias = 'all'"},
      {[](json& j) { j["modules_to_save"] = {"lm_head"}; }, "modules_to_save"},
      {[](json& j) { j["use_dora"] = true; }, "use_dora"},
      {[](json& j) {
         j["rank_pattern"] = {{"q_proj", 4}};
       },
       "rank_pattern"},
      {[](json& j) { j["init_lora_weights"] = "pissa"; }, "init_lora_weights"},
      {[](json& j) { j["target_modules"] = nullptr; }, "target_modules"},
      {[](json& j) {
         j["target_modules"] = {"q_proj", "embed_tokens"};
       },
       "'embed_tokens'"},
      {[](json& j) {
         j["layers_to_transform"] = {0};
         j["target_modules"] = "q_proj";
       },
       "layers_to_transform cannot be combined"},
      {[](json& j) { j["layers_pattern"] = "blocks"; }, "layers_pattern"},
  };
  for (const auto& [edit, part] : config_cases) {
    json j = good;
    edit(j);
    write_json(cfg_path, j);
    expect_error(load, {cfg_path, part});
  }
  write_json(cfg_path, good);
  ASSERT_NO_THROW(load());

  // Tensors that disagree with the config or the model.
  const std::string tensors = dir + "/adapter_model.safetensors";
  const std::string bytes = [&] {
    std::ifstream f(tensors, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  const auto restore = [&] { std::ofstream(tensors, std::ios::binary) << bytes; };
  const std::string qb = "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight";

  rewrite_tensors(dir, [&](auto& t) { t.erase(qb); });
  expect_error(load, {tensors, "missing tensor '" + qb + "'", "[256, 8]"});
  restore();
  rewrite_tensors(dir, [&](auto& t) { t[kQName] = Tensor::zeros({8, 100}, DType::f32); });
  expect_error(load, {tensors, kQName, "shape [8, 100]", "expected [8, 192]"});
  restore();
  rewrite_tensors(dir, [&](auto& t) { t[kQName] = Tensor::zeros({4, 192}, DType::f32); });
  expect_error(load, {tensors, kQName, "rank 4", "r = 8"});
  restore();
  rewrite_tensors(dir, [&](auto& t) {
    t["base_model.model.lm_head.lora_A.weight"] = Tensor::zeros({8, 192}, DType::f32);
  });
  expect_error(load, {tensors, "unexpected tensor 'base_model.model.lm_head.lora_A.weight'"});
  restore();
  rewrite_tensors(dir, [&](auto& t) { t[qb].template ptr<float>()[17] = NAN; });
  expect_error(load, {tensors, qb, "element 17"});
  restore();
  rewrite_tensors(dir, [&](auto& t) { t[qb] = Tensor::zeros({256, 8}, DType::i32); });
  expect_error(load, {tensors, qb, "dtype I32"});
  restore();
  ASSERT_NO_THROW(load());

  // A whole adapter of another rank than the config.
  json r4 = good;
  r4["r"] = 4;
  write_json(cfg_path, r4);
  expect_error(load, {"rank 8", "r = 4"});
  write_json(cfg_path, good);

  // Only safetensors.
  fs::rename(tensors, dir + "/adapter_model.bin");
  expect_error(load, {"adapter_model.bin", "safetensors"});
  fs::remove(dir + "/adapter_model.bin");
  expect_error(load, {"no adapter_model.safetensors"});
  fs::remove(cfg_path);
  expect_error(load, {"no adapter_config.json"});
  fs::remove_all(dir);
}

TEST_F(AdapterTest, RejectsInvalidConfigsAtInit) {
  LoraConfig c = config_of({"q_proj"});
  c.r = 0;
  expect_error([&] { LoraAdapter::init(c, model, 1); }, {"r = 0"});
  c = config_of({"q_proj"});
  c.lora_dropout = -0.1;
  expect_error([&] { LoraAdapter::init(c, model, 1); }, {"lora_dropout"});
  c = config_of({"q_proj"});
  c.init_lora_weights = "pissa";
  expect_error([&] { LoraAdapter::init(c, model, 1); }, {"init_lora_weights"});
  c = config_of({});
  expect_error([&] { LoraAdapter::init(c, model, 1); }, {"exactly one"});
  c = config_of({"all-linear", "q_proj"});
  expect_error([&] { LoraAdapter::init(c, model, 1); }, {"all-linear"});
}

TEST_F(AdapterTest, WeightsAreViewsOfTheTargetedProjections) {
  LoraAdapter a = LoraAdapter::init(config_of({"q_proj", "down_proj"}, 8, 32), model, 1);
  a.check_fits(model);
  for (int64_t l = 0; l < 2; ++l)
    for (int p = 0; p < 7; ++p) {
      const LoraWeights w = a.weights(l, p, Device::cpu);
      if (p == kQ || p == kDown) {
        ASSERT_TRUE(w.active());
        EXPECT_EQ(w.a.data, a.master_a(l, p).data);  // the CPU compute copy is the master
        EXPECT_EQ(w.b.data, a.master_b(l, p).data);
        EXPECT_EQ(w.a.shape, a.master_a(l, p).shape);
        EXPECT_EQ(w.b.shape, a.master_b(l, p).shape);
        EXPECT_EQ(w.a.dtype, DType::f32);
        EXPECT_EQ(w.rank(), 8);
        EXPECT_EQ(w.scale, 4.0f);
      } else {
        EXPECT_FALSE(w.active()) << kProjectionNames[p];
      }
    }
  // Another adapter has views of its own; the model is not involved.
  const LoraAdapter other = LoraAdapter::init(config_of({"k_proj"}), model, 1);
  EXPECT_FALSE(other.weights(0, kQ, Device::cpu).active());
  EXPECT_TRUE(other.weights(0, 1, Device::cpu).active());
  // An adapter for other shapes or another device is refused by name.
  Arena arena;
  Context ctx{Device::cpu, &arena};
  ModelConfig wider = model.config();
  wider.intermediate_size *= 2;
  const Model other_model = Model::random(wider, std::nullopt, ctx, 1);
  expect_error([&] { a.check_fits(other_model); }, {"down_proj", "the model's projection is"});
  expect_error([&] { (void)a.weights(0, kQ, Device::cuda); }, {"call to_device"});
}

TEST_F(AdapterTest, VersionCountsUpdatesAndNbytesCountsMasters) {
  LoraAdapter a = LoraAdapter::init(config_of({"v_proj"}, 2), model, 1);
  EXPECT_EQ(a.version(), 1u);
  a.mark_updated();
  a.mark_updated();
  EXPECT_EQ(a.version(), 3u);
  EXPECT_EQ(a.nbytes(), size_t(2 * 2 * (192 + 128)) * 4);
  Arena arena;
  Context ctx{Device::cpu, &arena};
  a.to_device(ctx);  // CPU: no copy
  EXPECT_EQ(a.nbytes(), size_t(2 * 2 * (192 + 128)) * 4);
}

// The low-rank term equals x (scale B A)^T with the merged delta weight computed separately,
// which is how PEFT merges an adapter.
TEST_F(AdapterTest, ReferenceTermIsTheMergedDelta) {
  LoraAdapter a = LoraAdapter::init(config_of({"o_proj"}, 4, 8), model, 1);
  randomize_b(a, 5);
  const LoraWeights w = a.weights(1, 3, Device::cpu);
  const int64_t m = 3, k = 256, n = 192, r = 4;
  Tensor x = Tensor::empty({m, k}, DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) x.ptr<float>()[i] = normal01(99, uint64_t(i));
  Tensor y = Tensor::zeros({m, n}, DType::f32);
  add_lora_reference(x, w, y);

  Tensor delta = Tensor::zeros({n, k}, DType::f32);  // scale * B A
  for (int64_t o = 0; o < n; ++o)
    for (int64_t c = 0; c < k; ++c) {
      double acc = 0.0;
      for (int64_t j = 0; j < r; ++j)
        acc += double(w.b.ptr<float>()[o * r + j]) * double(w.a.ptr<float>()[j * k + c]);
      delta.ptr<float>()[o * k + c] = float(w.scale * acc);
    }
  Tensor merged = Tensor::zeros({m, n}, DType::f32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t o = 0; o < n; ++o) {
      double acc = 0.0;
      for (int64_t c = 0; c < k; ++c)
        acc += double(x.ptr<float>()[i * k + c]) * double(delta.ptr<float>()[o * k + c]);
      merged.ptr<float>()[i * n + o] = float(acc);
    }
  EXPECT_LE(rel_max_diff(y, merged), f32_reduction_bound(k));
  // Negative control: the term is far from zero, and the wrong scale is caught.
  const Tensor zero = Tensor::zeros({m, n}, DType::f32);
  EXPECT_GT(rel_max_diff(zero, merged), 0.5);
  Tensor y2 = Tensor::zeros({m, n}, DType::f32);
  LoraWeights half = w;
  half.scale *= 0.5f;
  add_lora_reference(x, half, y2);
  EXPECT_GT(rel_max_diff(y2, merged), 0.4);
}

// q, k and v stacked in one weight (LayerWeights::qkv) run as one GEMM whose output is split
// by columns: the logits equal those of the three separate projections bit for bit (each
// output's dot product is the same), with biases and with LoRA on the three. Negative control:
// zeroing the k rows of the stacked buffer changes the logits, so the forward did read it.
namespace {
std::vector<float> all_logits(const Model& m, Context& ctx, const LoraAdapter* adapter = nullptr) {
  const ModelConfig& c = m.config();
  const std::vector<int32_t> ids = {1, 5, 9, 200, 3, 17};
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5};
  KvCache cache(c, 8, ctx);
  Tensor logits = Tensor::empty({int64_t(ids.size()), c.vocab_size}, DType::f32);
  SequenceInput seq{ids, pos, &cache};
  forward(ctx, m, adapter, {&seq, 1}, LogitRows::all, logits);
  return std::vector<float>(logits.ptr<float>(), logits.ptr<float>() + logits.numel());
}
}  // namespace

TEST(RandomModel, StackedQkvGivesTheLogitsOfSeparateProjections) {
  nlohmann::json biased = preset_config_json("llama-tiny");
  biased["attention_bias"] = true;
  nlohmann::json wide = preset_config_json("qwen3-tiny");  // q 256, kv 128 rows: 128x128 blocks
  wide["hidden_size"] = 256;
  wide["num_attention_heads"] = 2;
  wide["num_key_value_heads"] = 1;
  wide["head_dim"] = 128;
  const std::vector<std::pair<nlohmann::json, Fp8Scheme>> cases = {
      {preset_config_json("qwen3-tiny"), Fp8Scheme::off},
      {preset_config_json("qwen3-tiny"), Fp8Scheme::row},
      {biased, Fp8Scheme::row},
      {wide, Fp8Scheme::block}};
  for (const auto& [json, scheme] : cases) {
    SCOPED_TRACE(std::string(scheme_name(scheme)) + " " + json.dump());
    const ModelConfig c = ModelConfig::from_json(json);
    Arena arena;
    Context ctx{Device::cpu, &arena};
    Model stacked = Model::random(c, scheme, ctx, 3, true);
    Model separate = Model::random(c, scheme, ctx, 3, false);
    ASSERT_FALSE(stacked.layers[0].qkv.weight.empty());
    ASSERT_TRUE(separate.layers[0].qkv.weight.empty());
    EXPECT_EQ(stacked.layers[0].k.weight.data,
              stacked.layers[0].qkv.weight.slice_rows(c.q_dim(), c.q_dim() + 1).data);
    EXPECT_EQ(all_logits(stacked, ctx), all_logits(separate, ctx));

    // With LoRA on q, k and v (B randomized: PEFT's zero B would add nothing).
    LoraAdapter a = LoraAdapter::init(config_of({"q_proj", "k_proj", "v_proj"}, 4), stacked, 5);
    randomize_b(a, 6);
    const std::vector<float> with_lora = all_logits(stacked, ctx, &a);
    EXPECT_EQ(with_lora, all_logits(separate, ctx, &a));
    EXPECT_NE(with_lora, all_logits(stacked, ctx));  // the adapter did apply

    // Negative control: the stacked buffer's k rows zeroed in place change the logits, so the
    // stacked model's projections do read that one buffer (the CPU through the k view, a
    // backend's stacked GEMM through qkv).
    const TensorView k_rows =
        stacked.layers[0].qkv.weight.slice_rows(c.q_dim(), c.q_dim() + c.kv_dim());
    std::memset(k_rows.data, 0, k_rows.nbytes());
    EXPECT_NE(all_logits(stacked, ctx), all_logits(separate, ctx));
  }
}

// Widths that are no multiple of 64 (H 72, q 3 x 24, kv 24, I 100): the matrices are padded
// apart in the masters, each stays aligned, and the round trip and views still hold.
TEST(Adapter, OddWidthsArePaddedAndAligned) {
  nlohmann::json cfg = preset_config_json("llama-tiny");
  cfg["hidden_size"] = 72;
  cfg["num_attention_heads"] = 3;
  cfg["num_key_value_heads"] = 1;
  cfg["head_dim"] = 24;
  cfg["intermediate_size"] = 100;
  Arena arena;
  Context ctx{Device::cpu, &arena};
  Model m = Model::random(ModelConfig::from_json(cfg), std::nullopt, ctx, 1);
  LoraAdapter a = LoraAdapter::init(config_of({"all-linear"}, 3), m, 4);
  randomize_b(a, 8);
  int64_t values = 0;
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int p = 0; p < 7; ++p) {
      const TensorView av = a.master_a(l, p), bv = a.master_b(l, p);
      EXPECT_EQ(av.shape, (Shape{3, m.layers[0].projection(p)->in_features()}));
      // 64-element offsets: 256 bytes in the f32 masters (whose base is 64-byte aligned), 128
      // in the bf16 device copy.
      const auto offset = [&](const TensorView& v) {
        return static_cast<const char*>(v.data) - static_cast<const char*>(a.master_params().data);
      };
      EXPECT_EQ(offset(av) % 256, 0);
      EXPECT_EQ(offset(bv) % 256, 0);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(av.data) % 64, 0u);
      values += av.numel() + bv.numel();
    }
  EXPECT_GT(a.master_params().numel(), values);  // there is padding
  const std::string dir = temp_dir("odd");
  a.save_peft(dir, "odd");
  const LoraAdapter b = LoraAdapter::load_peft(dir, m);
  EXPECT_EQ(std::memcmp(a.master_params().data, b.master_params().data, a.master_params().nbytes()),
            0);
  b.check_fits(m);
  EXPECT_EQ(b.weights(1, kDown, Device::cpu).b.data, b.master_b(1, kDown).data);
  EXPECT_EQ(b.weights(1, kDown, Device::cpu).b.shape, (Shape{72, 3}));
  fs::remove_all(dir);
}
