// config.json parsing: transformers 4 and 5 field names agree, and bad configs name the field.
#include <gtest/gtest.h>

#include <fstream>

#include "formats/model_config.h"
#include "model/presets.h"
#include "test_util.h"

using namespace fp8rl;
using json = nlohmann::json;

namespace {

json golden_config(const std::string& arch) {
  std::ifstream f(fp8rl::test::golden_dir(arch) + "/config.json");
  return json::parse(f);
}

// The transformers-4 spelling of a transformers-5 config.
json to_v4(json c) {
  json rp = c["rope_parameters"];
  c.erase("rope_parameters");
  if (rp.contains("full_attention")) {  // Gemma 3
    c["rope_theta"] = rp["full_attention"]["rope_theta"];
    c["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"];
    json scaling = rp["full_attention"];
    scaling.erase("rope_theta");
    c["rope_scaling"] = scaling;
    c.erase("layer_types");
    c["sliding_window_pattern"] = 2;  // [sliding, full]
  } else {
    c["rope_theta"] = rp["rope_theta"];
    rp.erase("rope_theta");
    if (rp["rope_type"] != "default") c["rope_scaling"] = rp;
  }
  return c;
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].sliding, b.layers[i].sliding) << i;
    EXPECT_EQ(int(a.layers[i].rope.type), int(b.layers[i].rope.type)) << i;
    EXPECT_EQ(a.layers[i].rope.theta, b.layers[i].rope.theta) << i;
    EXPECT_EQ(a.layers[i].rope.factor, b.layers[i].rope.factor) << i;
  }
  EXPECT_EQ(a.attention_scale, b.attention_scale);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
}

TEST(ModelConfig, TransformersV4AndV5FieldsAgree) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "mistral", "gemma3"}) {
    SCOPED_TRACE(arch);
    const json v5 = golden_config(arch);
    expect_same(ModelConfig::from_json(v5), ModelConfig::from_json(to_v4(v5)));
  }
}

TEST(ModelConfig, ArchitectureSwitches) {
  const ModelConfig g = ModelConfig::from_json(golden_config("gemma3"));
  EXPECT_TRUE(g.norm_plus_one && g.sandwich_norms && g.qk_norm);
  EXPECT_DOUBLE_EQ(g.embedding_scale, std::sqrt(192.0));
  EXPECT_DOUBLE_EQ(g.attention_scale, 1.0 / std::sqrt(24.0));
  EXPECT_TRUE(g.layers[0].sliding && !g.layers[1].sliding);
  EXPECT_EQ(g.layers[0].rope.theta, 10000.0);
  EXPECT_EQ(int(g.layers[1].rope.type), int(RopeConfig::Type::linear));
  const ModelConfig q2 = ModelConfig::from_json(golden_config("qwen2"));
  EXPECT_TRUE(q2.qkv_bias && !q2.o_bias);
  const ModelConfig l = ModelConfig::from_json(golden_config("llama"));
  EXPECT_EQ(int(l.layers[0].rope.type), int(RopeConfig::Type::llama3));
  EXPECT_FALSE(l.tie_word_embeddings);
  const ModelConfig m = ModelConfig::from_json(golden_config("mistral"));
  EXPECT_TRUE(m.layers[0].sliding && m.sliding_window == 8);
}

TEST(ModelConfig, EveryPresetParses) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelConfig c = preset_config(name);
    EXPECT_GT(c.num_layers, 0);
  }
  EXPECT_EQ(preset_config("qwen3-8b").intermediate_size, 12288);
  EXPECT_THROW(preset_config("qwen3-9000b"), Error);
}

void expect_error(json c, const std::string& fragment) {
  try {
    ModelConfig::from_json(c);
    FAIL() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, BadConfigsNameTheProblem) {
  const json good = golden_config("qwen3");
  json c = good;
  c["architectures"] = {"BertForMaskedLM"};
  expect_error(c, "architecture 'BertForMaskedLM' is not supported");
  c = good;
  c.erase("hidden_size");
  expect_error(c, "missing required field 'hidden_size'");
  c = good;
  c["num_hidden_layers"] = "two";
  expect_error(c, "'num_hidden_layers' must be an integer");
  c = good;
  c["num_attention_heads"] = 0;
  expect_error(c, "num_attention_heads = 0 is outside [1, 4096]");
  c = good;
  c["num_key_value_heads"] = 3;
  expect_error(c, "multiple of num_key_value_heads");
  c = good;
  c["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 10000.0}};
  expect_error(c, "rope type 'dynamic' is not supported");
  c = good;
  c["layer_types"] = {"full_attention"};
  expect_error(c, "'layer_types' must list 2 layer types");
  c = good;
  c["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error(c, "'sliding_window' is not set");
  c = good;
  c["hidden_act"] = "relu";
  expect_error(c, "activation 'relu' is not supported");
  c = good;
  c["rms_norm_eps"] = -1.0;
  expect_error(c, "rms_norm_eps must be positive");
  expect_error(json::array(), "top level must be an object");
}

// Qwen3-MoE: which layers are sparse (mlp_only_layers, decoder_sparse_step, as transformers
// decides), both spellings of the expert count, and bad values named by their key.
TEST(ModelConfig, MoeFieldsAndSparseLayers) {
  json c = preset_config_json("qwen3-moe-tiny");
  c["num_hidden_layers"] = 4;
  c["mlp_only_layers"] = {2};
  c["decoder_sparse_step"] = 1;
  c["num_experts_per_tok"] = 3;
  c["norm_topk_prob"] = false;
  const ModelConfig m = ModelConfig::from_json(c);
  EXPECT_EQ(m.arch, Arch::qwen3_moe);
  EXPECT_TRUE(m.qk_norm && m.has_moe());
  EXPECT_EQ(m.moe.num_experts, 4);
  EXPECT_EQ(m.moe.top_k, 3);
  EXPECT_EQ(m.moe.intermediate_size, 96);
  EXPECT_FALSE(m.moe.norm_topk_prob);
  const bool want[] = {true, true, false, true};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(m.layers[size_t(i)].moe, want[i]) << i;
  // decoder_sparse_step 2: layers 1 and 3 ((i + 1) % 2 == 0), minus mlp_only_layers.
  c["decoder_sparse_step"] = 2;
  c["mlp_only_layers"] = {3};
  const ModelConfig s = ModelConfig::from_json(c);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.layers[size_t(i)].moe, i == 1) << i;
  // transformers 5 spells the expert count num_local_experts; the same config results.
  json v5 = preset_config_json("qwen3-moe-tiny");
  v5["num_local_experts"] = v5["num_experts"];
  v5.erase("num_experts");
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  const ModelConfig a = ModelConfig::from_json(v5);
  const ModelConfig b = ModelConfig::from_json(preset_config_json("qwen3-moe-tiny"));
  expect_same(a, b);
  EXPECT_EQ(a.moe.num_experts, b.moe.num_experts);
  EXPECT_EQ(a.layers[0].moe, b.layers[0].moe);
  EXPECT_EQ(a.layers[1].moe, b.layers[1].moe);
  // No experts: every layer dense, the expert fields unread (transformers' reading).
  json dense = preset_config_json("qwen3-moe-tiny");
  dense["num_experts"] = 0;
  dense.erase("num_experts_per_tok");
  EXPECT_FALSE(ModelConfig::from_json(dense).has_moe());
  // Qwen3-MoE has no max_window_layers: use_sliding_window slides every layer.
  json sliding = preset_config_json("qwen3-moe-tiny");
  sliding["use_sliding_window"] = true;
  sliding["sliding_window"] = 8;
  const ModelConfig w = ModelConfig::from_json(sliding);
  EXPECT_TRUE(w.layers[0].sliding && w.layers[1].sliding);
  // YaRN on an MoE config (Qwen3-30B-A3B's model card: factor 4 over 32768 positions).
  json yarn = preset_config_json("qwen3-moe-tiny");
  yarn["max_position_embeddings"] = 32768;
  yarn["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  const ModelConfig y = ModelConfig::from_json(yarn);
  EXPECT_TRUE(y.has_moe() && y.layers[0].moe && !y.layers[1].moe);
  EXPECT_EQ(y.max_context, 131072);
  for (const LayerConfig& l : y.layers) EXPECT_EQ(l.rope.type, RopeConfig::Type::yarn);
}

TEST(ModelConfig, BadMoeFieldsNameTheKey) {
  const json good = preset_config_json("qwen3-moe-tiny");
  json c = good;
  c.erase("num_experts");
  expect_error(c, "missing required field 'num_experts' (or 'num_local_experts')");
  c = good;
  c["num_local_experts"] = 8;
  expect_error(c, "'num_experts' (4) and 'num_local_experts' (8) disagree");
  c = good;
  c["num_experts_per_tok"] = 5;
  expect_error(c, "num_experts_per_tok = 5 is outside [1, 4]");
  c = good;
  c["num_experts_per_tok"] = 0;
  expect_error(c, "num_experts_per_tok = 0 is outside [1, 4]");
  c = good;
  c.erase("num_experts_per_tok");
  expect_error(c, "missing required field 'num_experts_per_tok'");
  c = good;
  c["moe_intermediate_size"] = 0;
  expect_error(c, "moe_intermediate_size = 0 is outside [1, ");
  c = good;
  c["num_experts"] = -1;
  expect_error(c, "num_experts = -1 is outside [0, 4096]");
  c = good;
  c["decoder_sparse_step"] = 0;
  expect_error(c, "decoder_sparse_step = 0 is outside [1, 4096]");
  c = good;
  c["mlp_only_layers"] = {0, 2};
  expect_error(c, "mlp_only_layers[1] = 2 is not a layer index in [0, 2)");
  c = good;
  c["mlp_only_layers"] = "1";
  expect_error(c, "'mlp_only_layers' must be a list of layer indices");
  c = good;
  c["norm_topk_prob"] = 1;
  expect_error(c, "'norm_topk_prob' must be true or false");
  EXPECT_NO_THROW(ModelConfig::from_json(good));
}

// Sizes come from the input: out-of-range values are rejected, with the value and the allowed
// range, before anything is allocated from them.
TEST(ModelConfig, AbsurdSizesAreRejectedWithTheirRange) {
  const json good = golden_config("qwen3");
  json c = good;
  c["num_hidden_layers"] = 1000000000;
  expect_error(c, "num_hidden_layers = 1000000000 is outside [1, 4096]");
  c = good;
  c["num_attention_heads"] = 4096;
  c["num_key_value_heads"] = 1;
  c["head_dim"] = 4096;  // 2^24: a product that must not pass unchecked
  expect_error(c, "num_attention_heads x head_dim = 16777216 is outside [1, 1048576]");
  c = good;
  c["max_position_embeddings"] = 0;
  expect_error(c, "max_position_embeddings = 0 is outside [1, ");
  c = good;
  c["max_position_embeddings"] = -5;
  expect_error(c, "max_position_embeddings = -5 is outside");
  c = good;
  c["vocab_size"] = 1e300;  // an integral double far outside int64
  expect_error(c, "'vocab_size' must be an integer");
  c = good;
  c["hidden_size"] = uint64_t(18446744073709551615ull);
  expect_error(c, "'hidden_size' = 18446744073709551615 is outside the int64 range");
  c = good;
  c["intermediate_size"] = int64_t(1) << 40;
  expect_error(c, "intermediate_size = 1099511627776 is outside [1, 1048576]");
  c = good;
  c["num_key_value_heads"] = 8;
  expect_error(c, "num_key_value_heads = 8 is outside [1, 4]");
  c = good;
  c["dtype"] = "float8_e4m3fn";
  expect_error(c, "dtype 'float8_e4m3fn' is not supported");
  // The golden itself still parses: the bounds reject nothing real.
  EXPECT_NO_THROW(ModelConfig::from_json(good));
}

}  // namespace
