// RoPE scaling read from config.json: YaRN's frequencies and attention factor against
// transformers' _compute_yarn_parameters written out here, the context it gives, and the rope
// types fp8rl refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "formats/model_config.h"
#include "model/forward.h"
#include "model/rope.h"
#include "model_test_util.h"

using namespace fp8rl;
using json = nlohmann::json;

namespace {

// A tiny config with head_dim `d` (2 heads) and the given rope spelling: transformers 5's
// rope_parameters (rope_theta inside), or transformers 4's rope_theta + rope_scaling.
json tiny_config(int64_t d, const json& rope, bool v4, int64_t max_positions = 256) {
  json c = {{"architectures", {"Qwen3ForCausalLM"}},
            {"vocab_size", 64},
            {"hidden_size", 2 * d},
            {"intermediate_size", 32},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 2},
            {"num_key_value_heads", 1},
            {"head_dim", d},
            {"max_position_embeddings", max_positions},
            {"dtype", "float32"}};
  if (v4) {
    json scaling = rope;
    c["rope_theta"] = scaling.value("rope_theta", 10000.0);
    scaling.erase("rope_theta");
    c["rope_scaling"] = scaling;
  } else {
    c["rope_parameters"] = rope;
  }
  return c;
}

const RopeConfig& rope_of(const ModelConfig& c) {
  return c.layers.at(0).rope;
}

// transformers' _compute_yarn_parameters, written out: the correction range in doubles (Python
// floats), the frequencies and the ramp in fp32 (torch tensors).
std::vector<float> hf_yarn_inv_freq(int64_t dim, double base, double factor, int64_t original,
                                    double beta_fast, double beta_slow, bool truncate) {
  auto find_correction_dim = [&](double num_rotations) {
    return (double(dim) * std::log(double(original) / (num_rotations * 2 * M_PI))) /
           (2 * std::log(base));
  };
  double low = find_correction_dim(beta_fast);
  double high = find_correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  std::vector<float> out;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float pos_freqs = std::pow(float(base), float(2 * i) / float(dim));
    const float inv_freq_extrapolation = 1.0f / pos_freqs;
    const float inv_freq_interpolation = 1.0f / (float(factor) * pos_freqs);
    const float linear = (float(i) - float(low)) / float(high - low);
    const float ramp = std::min(std::max(linear, 0.0f), 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    out.push_back(inv_freq_interpolation * (1.0f - extrapolation_factor) +
                  inv_freq_extrapolation * extrapolation_factor);
  }
  return out;
}

// head_dim 8, theta 10000, factor 4, original 32, by hand: pos_freqs 10000^(2i/8) = 1, 10, 100,
// 1000; the correction dims are 8 ln(32 / (32 * 2 pi)) / (2 ln 10000) = -0.80 (beta_fast 32,
// floored then clamped: 0) and 8 ln(32 / (2 pi)) / (2 ln 10000) = 0.71 (beta_slow 1, ceiled:
// 1), so the ramp (i - 0) / 1 keeps frequency 0 (extrapolation) and divides the rest by 4.
// Attention factor 0.1 ln 4 + 1.
TEST(RopeYarn, HandDerivedSmallHead) {
  for (bool v4 : {false, true}) {
    SCOPED_TRACE(v4 ? "rope_scaling" : "rope_parameters");
    const json rope = {{"rope_type", "yarn"},
                       {"rope_theta", 10000.0},
                       {"factor", 4.0},
                       {"original_max_position_embeddings", 32}};
    const ModelConfig c = ModelConfig::from_json(tiny_config(8, rope, v4));
    const RopeConfig& r = rope_of(c);
    ASSERT_EQ(int(r.type), int(RopeConfig::Type::yarn));
    const std::vector<float> f = rope_inv_freq(r, 8);
    ASSERT_EQ(f.size(), 4u);
    EXPECT_FLOAT_EQ(f[0], 1.0f);
    EXPECT_FLOAT_EQ(f[1], 0.025f);
    EXPECT_FLOAT_EQ(f[2], 0.0025f);
    EXPECT_FLOAT_EQ(f[3], 0.00025f);
    EXPECT_DOUBLE_EQ(r.attention_factor, 0.1 * std::log(4.0) + 1.0);
    EXPECT_NEAR(r.attention_factor, 1.1386294, 1e-7);
    // factor 4 x original 32 = 128 < max_position_embeddings 256: the config's own bound.
    EXPECT_EQ(c.max_context, 256);
  }
}

// A ramp with fractional steps (head_dim 16, original 2048: dims 2.02 -> 2 and 5.03 -> 6), and
// every optional key, against the formula written out; the attention factor from each source.
TEST(RopeYarn, MatchesTransformersFormula) {
  struct Case {
    json extra;
    double beta_fast, beta_slow;
    bool truncate;
    double attention_factor;
  };
  const double f4 = 0.1 * std::log(4.0) + 1.0;
  const std::vector<Case> cases = {
      {json::object(), 32, 1, true, f4},
      {{{"beta_fast", 16}, {"beta_slow", 2}}, 16, 2, true, f4},
      {{{"beta_fast", 0}, {"beta_slow", nullptr}}, 32, 1, true, f4},  // falsy: the defaults
      {{{"truncate", false}}, 32, 1, false, f4},
      {{{"attention_factor", 1.5}}, 32, 1, true, 1.5},
      {{{"mscale", 0.707}, {"mscale_all_dim", 1.0}},
       32,
       1,
       true,
       (0.1 * 0.707 * std::log(4.0) + 1.0) / (0.1 * 1.0 * std::log(4.0) + 1.0)},
      {{{"mscale", 1.0}}, 32, 1, true, f4},  // mscale alone: the plain default
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.extra.dump());
    json rope = {{"rope_type", "yarn"},
                 {"rope_theta", 10000.0},
                 {"factor", 4.0},
                 {"original_max_position_embeddings", 2048}};
    rope.update(k.extra);
    const ModelConfig c = ModelConfig::from_json(tiny_config(16, rope, false, 8192));
    const RopeConfig& r = rope_of(c);
    const std::vector<float> ours = rope_inv_freq(r, 16);
    const std::vector<float> hf =
        hf_yarn_inv_freq(16, 10000.0, 4.0, 2048, k.beta_fast, k.beta_slow, k.truncate);
    ASSERT_EQ(ours.size(), hf.size());
    for (size_t i = 0; i < hf.size(); ++i) EXPECT_EQ(ours[i], hf[i]) << i;
    EXPECT_NEAR(r.attention_factor, k.attention_factor, 1e-12);
  }
  // The default case really blends: frequency 3 lies a quarter of the way along the ramp.
  const std::vector<float> hf = hf_yarn_inv_freq(16, 10000.0, 4.0, 2048, 32, 1, true);
  const float pos3 = std::pow(10000.0f, 6.0f / 16.0f);
  EXPECT_NEAR(hf[3], 0.25f / (4.0f * pos3) + 0.75f / pos3, 1e-9f);
}

// What transformers 5.17 itself returned (ROPE_INIT_FUNCTIONS["yarn"] on a Qwen3Config of this
// head, run once on the GPU machine): the fractional-ramp case with mscale / mscale_all_dim.
TEST(RopeYarn, EqualsTransformersOutput) {
  const json rope = {{"rope_type", "yarn"}, {"rope_theta", 10000.0},
                     {"factor", 4.0},       {"original_max_position_embeddings", 2048},
                     {"mscale", 0.707},     {"mscale_all_dim", 1.0}};
  const RopeConfig r = rope_of(ModelConfig::from_json(tiny_config(16, rope, false, 8192)));
  const std::vector<float> hf = {0x1.0p+0f,      0x1.43d136p-2f,  0x1.99999ap-4f,  0x1.a4f66p-6f,
                                 0x1.999998p-8f, 0x1.6aace2p-10f, 0x1.0624dep-12f, 0x1.4b96cp-14f};
  EXPECT_EQ(rope_inv_freq(r, 16), hf);
  EXPECT_DOUBLE_EQ(r.attention_factor, 0.964326914892074);
}

// The control: the same head under the default and llama3 ropes gives other frequencies (the
// tests above would pass vacuously if yarn fell through to the default), and no attention
// factor.
TEST(RopeYarn, OtherTypesDiffer) {
  const json yarn = {{"rope_type", "yarn"},
                     {"rope_theta", 10000.0},
                     {"factor", 4.0},
                     {"original_max_position_embeddings", 32}};
  // llama3 over 32 original positions happens to split this head as yarn does; over 256 the
  // wavelength 2 pi * 10 stays (yarn divides it).
  const json llama3 = {{"rope_type", "llama3"},   {"rope_theta", 10000.0},
                       {"factor", 4.0},           {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 256}};
  const json plain = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  const std::vector<float> y =
      rope_inv_freq(rope_of(ModelConfig::from_json(tiny_config(8, yarn, false))), 8);
  for (const json& other : {llama3, plain}) {
    SCOPED_TRACE(other.dump());
    const ModelConfig c = ModelConfig::from_json(tiny_config(8, other, false));
    const std::vector<float> f = rope_inv_freq(rope_of(c), 8);
    EXPECT_NE(f, y);
    EXPECT_EQ(rope_of(c).attention_factor, 1.0);
    EXPECT_EQ(c.max_context, c.max_position_embeddings);
  }
  // The default's frequencies, by hand: 1 / 10000^(2i/8).
  const std::vector<float> d =
      rope_inv_freq(rope_of(ModelConfig::from_json(tiny_config(8, plain, false))), 8);
  EXPECT_FLOAT_EQ(d[1], 0.1f);
  EXPECT_NE(d[1], y[1]);
}

// transformers 5 fills what rope_parameters leaves out: original_max_position_embeddings from
// max_position_embeddings (or from a top-level field, which wins), a null factor as their ratio.
TEST(RopeYarn, TransformersFallbacks) {
  const json base = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0}};
  {
    const ModelConfig c = ModelConfig::from_json(tiny_config(8, base, false, 32));
    EXPECT_EQ(rope_of(c).original_max_position_embeddings, 32);
    EXPECT_EQ(c.max_context, 128);  // 4 x 32
    json explicit_rope = base;
    explicit_rope["original_max_position_embeddings"] = 32;
    const ModelConfig e = ModelConfig::from_json(tiny_config(8, explicit_rope, false, 32));
    EXPECT_EQ(rope_inv_freq(rope_of(c), 8), rope_inv_freq(rope_of(e), 8));
  }
  {
    json j = tiny_config(8, base, true, 256);
    j["rope_scaling"]["original_max_position_embeddings"] = 64;
    j["original_max_position_embeddings"] = 32;
    EXPECT_EQ(rope_of(ModelConfig::from_json(j)).original_max_position_embeddings, 32);
  }
  {
    json rope = base;
    rope["factor"] = nullptr;
    rope["original_max_position_embeddings"] = 64;
    const RopeConfig r = rope_of(ModelConfig::from_json(tiny_config(8, rope, false, 256)));
    EXPECT_DOUBLE_EQ(r.factor, 4.0);  // 256 / 64
    EXPECT_DOUBLE_EQ(r.attention_factor, 0.1 * std::log(4.0) + 1.0);
  }
}

void expect_rope_error(const json& c, const std::string& fragment) {
  try {
    ModelConfig::from_json(c);
    FAIL() << "expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// The rope types of released checkpoints that fp8rl does not run are an error naming the type
// and the supported ones, in both spellings; so is a yarn set without its factor.
TEST(RopeYarn, UnsupportedTypesAreNamed) {
  for (const char* type : {"dynamic", "longrope", "proportional"}) {
    for (bool v4 : {false, true}) {
      const json rope = {{"rope_type", type}, {"rope_theta", 10000.0}, {"factor", 2.0}};
      expect_rope_error(tiny_config(8, rope, v4),
                        fmt::format("rope type '{}' is not supported (supported: default, linear, "
                                    "llama3, yarn)",
                                    type));
    }
  }
  expect_rope_error(tiny_config(8, {{"type", "dynamic"}, {"factor", 2.0}}, true), "'dynamic'");
  expect_rope_error(tiny_config(8, {{"rope_type", "yarn"}, {"rope_theta", 10000.0}}, false),
                    "yarn rope needs a 'factor'");
  expect_rope_error(
      tiny_config(8, {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", -1.0}}, false),
      "yarn rope needs a positive 'factor'");
}

// YaRN extends the context to factor x original when that is past max_position_embeddings
// (Qwen's recipe); the one length check names both numbers.
TEST(RopeYarn, ContextAndItsCheck) {
  const json rope = {{"rope_type", "yarn"},
                     {"rope_theta", 1000000.0},
                     {"factor", 4.0},
                     {"original_max_position_embeddings", 32768}};
  const ModelConfig c = ModelConfig::from_json(tiny_config(8, rope, false, 40960));
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.max_context, 131072);
  EXPECT_NO_THROW(check_context(c, 131072, "x"));
  try {
    check_context(c, 131073, "max_prompt_length 1 plus max_completion_length 131072");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "max_prompt_length 1 plus max_completion_length 131072 (131073 tokens) "
                  "exceeds the model's context of 131072 positions (yarn factor 4 x "
                  "original_max_position_embeddings 32768)"),
              std::string::npos)
        << e.what();
  }
  const ModelConfig plain = ModelConfig::from_json(
      tiny_config(8, {{"rope_type", "default"}, {"rope_theta", 10000.0}}, false, 40960));
  EXPECT_THROW(check_context(plain, 40961, "x"), Error);
  // A factor whose product passes the most positions fp8rl takes (2^28) is capped, and the
  // check says so instead of printing a product that is not the number.
  json huge = rope;
  huge["factor"] = 1.0e6;
  const ModelConfig capped = ModelConfig::from_json(tiny_config(8, huge, false, 40960));
  EXPECT_EQ(capped.max_context, int64_t{1} << 28);
  try {
    check_context(capped, (int64_t{1} << 28) + 1, "x");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("capped at the most positions fp8rl takes"),
              std::string::npos)
        << e.what();
  }
  try {
    check_context(c, 131073, "x");
    FAIL() << "expected an error";
  } catch (const Error& e) {  // control: an uncapped context does not say it
    EXPECT_EQ(std::string(e.what()).find("capped"), std::string::npos) << e.what();
  }
}

// The attention factor enters through the softmax scale (transformers multiplies cos and sin by
// it, so q.k by its square), and it changes the forward's logits.
TEST(RopeYarn, AttentionFactorScalesTheScores) {
  const json rope = {{"rope_type", "yarn"},
                     {"rope_theta", 10000.0},
                     {"factor", 4.0},
                     {"original_max_position_embeddings", 32}};
  json unit = rope;
  unit["attention_factor"] = 1.0;
  Arena arena;
  Context ctx{Device::cpu, &arena};
  const Model m =
      Model::random(ModelConfig::from_json(tiny_config(8, rope, false)), std::nullopt, ctx, 7);
  const Model u =
      Model::random(ModelConfig::from_json(tiny_config(8, unit, false)), std::nullopt, ctx, 7);
  const double af = 0.1 * std::log(4.0) + 1.0;
  EXPECT_FLOAT_EQ(attention_params(m.config(), m.layers[0]).scale,
                  float(1.0 / std::sqrt(8.0) * af * af));
  EXPECT_FLOAT_EQ(attention_params(u.config(), u.layers[0]).scale, float(1.0 / std::sqrt(8.0)));
  const std::vector<int32_t> ids = {3, 9, 27, 17, 51, 2, 40, 33};
  const Tensor a = test::prefill_logits(m, ids), b = test::prefill_logits(u, ids);
  EXPECT_GT(test::rel_max_diff(a, b), 1e-4);
}

}  // namespace
