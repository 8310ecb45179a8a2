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
