// FP8 checkpoints: fp8rl's own (quantize -> reload) and the other formats it must load as they
// are (bf16/f16 scales, per-tensor static input scales), plus what must be rejected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/quantize.h"
#include "model_test_util.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("fp8rl_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// Copies a checkpoint directory, letting `edit` replace tensors (name -> tensor) and the config.
void rewrite(const std::string& src, const std::string& dst,
             const std::function<void(std::map<std::string, Tensor>&, json&)>& edit) {
  const Checkpoint ck = Checkpoint::open(src);
  std::map<std::string, Tensor> tensors;
  for (const std::string& n : ck.names()) {
    const TensorView v = ck.view(n);
    Tensor t = Tensor::empty(v.shape, v.dtype);
    std::memcpy(t.view().data, v.data, v.nbytes());
    tensors[n] = t;
  }
  json config = read_json(src + "/config.json");
  edit(tensors, config);
  std::vector<std::pair<std::string, TensorView>> views;
  for (auto& [n, t] : tensors) views.emplace_back(n, t.view());
  fs::create_directories(dst);
  write_checkpoint(dst, views);
  std::ofstream(dst + "/config.json") << config.dump(2);
}

struct RoundTrip {
  Fp8Scheme scheme;
  Fp8Format format;
};

class QuantizeRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(QuantizeRoundTrip, ReloadGivesTheOnTheFlyLogits) {
  const auto [scheme, format] = GetParam();
  const std::string out = temp_dir("rt");
  const Model fly = load_model(golden_dir("qwen3"), scheme);
  write_fp8_checkpoint(fly, out, format);
  const Model stored = load_model(out);
  EXPECT_TRUE(stored.prequantized());
  EXPECT_EQ(stored.scheme(), scheme);
  EXPECT_EQ(stored.act_scaling(), matching_act_scaling(scheme));
  const std::vector<int32_t> ids = golden_ids("qwen3");
  EXPECT_EQ(rel_max_diff(prefill_logits(stored, ids), prefill_logits(fly, ids)), 0.0);

  // What other engines read: dtypes, scale names and shapes, the quantization_config.
  const Checkpoint ck = Checkpoint::open(out);
  const std::string p = "model.layers.1.mlp.down_proj.";
  EXPECT_EQ(ck.info(p + "weight").dtype_str, "F8_E4M3");
  const std::string scale = format == Fp8Format::fp8 ? "weight_scale_inv" : "weight_scale";
  const Shape expect_scale = scheme == Fp8Scheme::tensor ? Shape{1}
                             : scheme == Fp8Scheme::row  ? Shape{192, 1}
                                                         : Shape{2, 3};
  EXPECT_EQ(ck.info(p + scale).shape, expect_scale);
  EXPECT_EQ(ck.info("model.embed_tokens.weight").dtype_str, "BF16");
  EXPECT_EQ(read_json(out + "/config.json")["quantization_config"],
            make_quantization_config(scheme, format));
  EXPECT_TRUE(fs::exists(out + "/generation_config.json"));
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantizeRoundTrip,
    ::testing::Values(RoundTrip{Fp8Scheme::tensor, Fp8Format::compressed_tensors},
                      RoundTrip{Fp8Scheme::row, Fp8Format::compressed_tensors},
                      RoundTrip{Fp8Scheme::block, Fp8Format::compressed_tensors},
                      RoundTrip{Fp8Scheme::block, Fp8Format::fp8}),
    [](const auto& info) {
      return std::string(scheme_name(info.param.scheme)) +
             (info.param.format == Fp8Format::fp8 ? "_fp8" : "_compressed_tensors");
    });

// llm-compressor stores scales in the model dtype, Qwen3-FP8 weight_scale_inv in bf16 or f16:
// they are converted to fp32 on load and used as they are.
TEST(FP8Checkpoints, HalfPrecisionScalesAreConverted) {
  const std::string base = temp_dir("base"), half = temp_dir("half");
  write_fp8_checkpoint(load_model(golden_dir("llama"), Fp8Scheme::block), base, Fp8Format::fp8);
  int converted = 0;
  rewrite(base, half, [&](std::map<std::string, Tensor>& t, json&) {
    for (auto& [name, tensor] : t) {
      if (!name.ends_with("weight_scale_inv")) continue;
      const DType dt = (converted++ % 2) ? DType::bf16 : DType::f16;
      Tensor h = Tensor::empty(tensor.shape(), dt);
      convert(tensor.ptr<float>(), DType::f32, h.view().data, dt, size_t(tensor.numel()));
      tensor = h;
    }
  });
  EXPECT_GT(converted, 0);
  const Model a = load_model(base), b = load_model(half);
  const LinearWeight& wa = a.layers[0].q;
  const LinearWeight& wb = b.layers[0].q;
  ASSERT_EQ(wb.scales.dtype, DType::f32);
  const DType stored =
      Checkpoint::open(half).info("model.layers.0.self_attn.q_proj.weight_scale_inv").dtype;
  for (int64_t i = 0; i < wa.scales.numel(); ++i) {
    const float s = wa.scales.ptr<float>()[i];
    const float rounded =
        stored == DType::f16 ? f16_to_f32(f32_to_f16(s)) : bf16_to_f32(f32_to_bf16(s));
    EXPECT_EQ(wb.scales.ptr<float>()[i], rounded);
  }
  const std::vector<int32_t> ids = golden_ids("llama");
  const Tensor la = prefill_logits(a, ids), lb = prefill_logits(b, ids);
  EXPECT_GT(rel_max_diff(lb, la), 0.0);  // the rounded scales are really used
  EXPECT_GE(top1_agreement(lb, la), 0.8);
  fs::remove_all(base);
  fs::remove_all(half);
}

// AutoFP8 / quant_method fp8 with activation_scheme static: per-tensor weight_scale and a
// 0-d input_scale that quantizes activations with a fixed scale.
TEST(FP8Checkpoints, StaticPerTensorInputScale) {
  const std::string base = temp_dir("tbase"), stat = temp_dir("static");
  write_fp8_checkpoint(load_model(golden_dir("mistral"), Fp8Scheme::tensor), base,
                       Fp8Format::compressed_tensors);
  auto make = [&](float input_scale) {
    fs::remove_all(stat);
    rewrite(base, stat, [&](std::map<std::string, Tensor>& t, json& config) {
      std::vector<std::string> names;
      for (auto& [name, tensor] : t)
        if (name.ends_with(".weight_scale")) names.push_back(name);
      for (const std::string& n : names) {
        Tensor s = Tensor::empty(Shape{}, DType::f32);
        s.ptr<float>()[0] = input_scale;
        t[n.substr(0, n.size() - 12) + "input_scale"] = s;
      }
      config["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "static"}};
    });
    return load_model(stat);
  };
  const std::vector<int32_t> ids = golden_ids("mistral");
  const Model m1 = make(0.02f);
  EXPECT_EQ(m1.act_scaling(), ActScaling::static_tensor);
  EXPECT_EQ(m1.layers[1].down.input_scale, 0.02f);
  const Tensor l1 = prefill_logits(m1, ids);
  const Tensor l2 = prefill_logits(make(0.03f), ids);
  EXPECT_GT(rel_max_diff(l1, l2), 0.0);  // the static scale is what quantizes activations
  const Tensor dyn = prefill_logits(load_model(base), ids);
  EXPECT_GE(top1_agreement(l1, dyn), 0.75);
  fs::remove_all(base);
  fs::remove_all(stat);
}

void expect_load_error(const std::string& dir, const std::string& fragment,
                       std::optional<Fp8Scheme> s = std::nullopt);

// A checkpoint must hold exactly its architecture's tensors, tie_word_embeddings must agree
// with the presence of lm_head, and weights must be finite unless allowed.
TEST(Checkpoints, TensorsMustMatchTheDeclaredArchitecture) {
  const std::string bad = temp_dir("arch");
  // A Qwen3 checkpoint labelled Llama: its q/k norms would be ignored.
  rewrite(golden_dir("qwen3"), bad,
          [](auto&, json& c) { c["architectures"] = {"LlamaForCausalLM"}; });
  expect_load_error(bad, "unexpected tensors (4): model.layers.0.self_attn.k_norm.weight");
  expect_load_error(bad, "missing tensors (0): none");
  fs::remove_all(bad);
  rewrite(golden_dir("qwen3"), bad, [](auto& t, json&) {
    t.erase("model.layers.1.mlp.up_proj.weight");
    t.erase("model.norm.weight");
  });
  expect_load_error(bad,
                    "missing tensors (2): model.norm.weight, model.layers.1.mlp.up_proj.weight");
  fs::remove_all(bad);
  rewrite(golden_dir("qwen3"), bad,
          [](auto& t, json&) { t["lm_head.weight"] = t.at("model.embed_tokens.weight"); });
  expect_load_error(bad, "has lm_head.weight but config.json sets tie_word_embeddings: true");
  fs::remove_all(bad);
  // Untied, the same checkpoint loads.
  rewrite(golden_dir("qwen3"), bad, [](auto& t, json& c) {
    t["lm_head.weight"] = t.at("model.embed_tokens.weight");
    c["tie_word_embeddings"] = false;
  });
  EXPECT_NO_THROW(load_model(bad));
  fs::remove_all(bad);
}

TEST(Checkpoints, NonFiniteWeightsAreRejectedUnlessAllowed) {
  const std::string bad = temp_dir("nan");
  const std::string name = "model.layers.1.self_attn.v_proj.weight";
  rewrite(golden_dir("qwen3"), bad, [&](auto& t, json&) {
    Tensor& w = t.at(name);
    ASSERT_EQ(w.view().dtype, DType::bf16);
    w.template ptr<uint16_t>()[77] = 0x7fc0;  // bf16 NaN
  });
  expect_load_error(bad, name + "' of checkpoint");
  expect_load_error(bad, "(element 77)");
  LoadOptions allow;
  allow.allow_nonfinite = true;
  EXPECT_NO_THROW(Model::load(bad, allow));
  fs::remove_all(bad);
  // Inf, in an FP8 quantization-on-load source, is caught before it is quantized.
  rewrite(golden_dir("qwen3"), bad, [&](auto& t, json&) {
    t.at("model.embed_tokens.weight").template ptr<uint16_t>()[5] = 0xff80;  // bf16 -Inf
  });
  expect_load_error(bad, "model.embed_tokens.weight", Fp8Scheme::row);
  fs::remove_all(bad);
}

void expect_load_error(const std::string& dir, const std::string& fragment,
                       std::optional<Fp8Scheme> s) {
  try {
    load_model(dir, s);
    FAIL() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(FP8Checkpoints, InconsistentCheckpointsAreRejected) {
  const std::string base = temp_dir("ebase"), bad = temp_dir("bad");
  write_fp8_checkpoint(load_model(golden_dir("qwen3"), Fp8Scheme::row), base,
                       Fp8Format::compressed_tensors);
  const std::string s = "model.layers.0.self_attn.q_proj.weight_scale";
  rewrite(base, bad, [&](auto&, json& c) { c.erase("quantization_config"); });
  expect_load_error(bad, "no FP8 quantization_config");
  fs::remove_all(bad);
  rewrite(base, bad, [&](auto& t, json&) { t.erase(s); });
  expect_load_error(bad, s);
  fs::remove_all(bad);
  rewrite(base, bad, [&](auto& t, json&) { t[s] = Tensor::zeros({7}, DType::f32); });
  expect_load_error(bad, "expected 256 elements");
  fs::remove_all(bad);
  rewrite(base, bad, [&](auto& t, json&) { t[s].template ptr<float>()[3] = -1.0f; });
  expect_load_error(bad, "scales must be positive");
  fs::remove_all(bad);
  rewrite(base, bad, [&](auto&, json& c) { c["quantization_config"]["quant_method"] = "gptq"; });
  expect_load_error(bad, "quant_method 'gptq' is not supported");
  expect_load_error(base, "already FP8", Fp8Scheme::block);
  fs::remove_all(bad);
  fs::remove_all(base);
}

}  // namespace
