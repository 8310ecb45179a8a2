// SamplingParams: validation names the key and its range; JSON reading by vLLM's key names.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/check.h"
#include "engine/sampling_params.h"

namespace fp8rl {
namespace {

// The message of the error `p.validate()` raises ("" when it passes).
std::string validation_error(const SamplingParams& p) {
  try {
    p.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SamplingParams, DefaultsAreValidAndMatchVllm) {
  const SamplingParams p;
  EXPECT_EQ(validation_error(p), "");
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.temperature, 1.0);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 1.0);
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_FALSE(p.seed.has_value());
}

TEST(SamplingParams, ValidateNamesKeyAndRange) {
  struct Bad {
    void (*set)(SamplingParams&);
    const char* key;
    const char* range;
  };
  const Bad bad[] = {
      {[](SamplingParams& p) { p.temperature = -0.1; }, "temperature", ">= 0"},
      {[](SamplingParams& p) { p.top_p = 0.0; }, "top_p", "(0, 1]"},
      {[](SamplingParams& p) { p.top_p = 1.5; }, "top_p", "(0, 1]"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k", ">= -1"},
      {[](SamplingParams& p) { p.min_p = -0.5; }, "min_p", "[0, 1]"},
      {[](SamplingParams& p) { p.min_p = 1.01; }, "min_p", "[0, 1]"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0; }, "repetition_penalty", "> 0"},
      {[](SamplingParams& p) { p.n = 0; }, "n must", ">= 1"},
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens", ">= 1"},
      {[](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens", "[0, max_tokens"},
      {[](SamplingParams& p) { p.min_tokens = 17; }, "min_tokens", "[0, max_tokens = 16]"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs", "[0, 20]"},
      {[](SamplingParams& p) { p.logprobs = -1; }, "logprobs", "[0, 20]"},
  };
  for (const Bad& b : bad) {
    SamplingParams p;
    b.set(p);
    const std::string e = validation_error(p);
    EXPECT_NE(e.find(b.key), std::string::npos) << b.key << ": " << e;
    EXPECT_NE(e.find(b.range), std::string::npos) << b.key << ": " << e;
  }
  // The edges of each range are valid.
  SamplingParams p;
  p.temperature = 0;
  p.top_p = 1.0;
  p.top_k = -1;
  p.min_p = 1.0;
  p.min_tokens = p.max_tokens;
  p.logprobs = 20;
  EXPECT_EQ(validation_error(p), "");
}

TEST(SamplingParams, FromJsonReadsVllmKeys) {
  const auto j = nlohmann::json::parse(R"({
    "n": 4, "temperature": 0.7, "top_k": 20, "top_p": 0.95, "min_p": 0.05,
    "repetition_penalty": 1.1, "max_tokens": 256, "min_tokens": 3,
    "stop_token_ids": [151645, 151643], "stop": ["</answer>", "\n\n"], "seed": 42,
    "ignore_eos": true, "logprobs": 5, "processed_logprobs": true})");
  const SamplingParams p = sampling_params_from_json(j, SamplingParams{});
  EXPECT_EQ(p.n, 4);
  EXPECT_EQ(p.temperature, 0.7);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_EQ(p.top_p, 0.95);
  EXPECT_EQ(p.min_p, 0.05);
  EXPECT_EQ(p.repetition_penalty, 1.1);
  EXPECT_EQ(p.max_tokens, 256);
  EXPECT_EQ(p.min_tokens, 3);
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{151645, 151643}));
  EXPECT_EQ(p.stop, (std::vector<std::string>{"</answer>", "\n\n"}));
  ASSERT_TRUE(p.seed.has_value());
  EXPECT_EQ(*p.seed, 42u);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_TRUE(p.processed_logprobs);
  EXPECT_EQ(validation_error(p), "");
}

TEST(SamplingParams, FromJsonKeepsDefaultsForAbsentKeys) {
  SamplingParams d;
  d.temperature = 0.3;
  d.max_tokens = 99;
  d.stop = {"x"};
  const SamplingParams p =
      sampling_params_from_json(nlohmann::json::parse(R"({"top_k": 5, "temperature": null,
      "stop": "END"})"),
                                d);
  EXPECT_EQ(p.temperature, 0.3);
  EXPECT_EQ(p.max_tokens, 99);
  EXPECT_EQ(p.top_k, 5);
  EXPECT_EQ(p.stop, std::vector<std::string>{"END"});  // one string, as vLLM accepts
}

TEST(SamplingParams, FromJsonTypeErrorsNameTheKey) {
  const char* bad[][2] = {
      {R"({"temperature": "hot"})", "temperature"},
      {R"({"top_k": 2.5})", "top_k"},
      {R"({"n": true})", "'n'"},
      {R"({"ignore_eos": 1})", "ignore_eos"},
      {R"({"stop_token_ids": [1, "2"]})", "stop_token_ids"},
      {R"({"stop": [1]})", "stop"},
      {R"({"seed": -3})", "seed"},
      {R"({"logprobs": "5"})", "logprobs"},
      {R"({"max_tokens": 1e20})", "max_tokens"},
  };
  for (const auto& [text, key] : bad) {
    try {
      sampling_params_from_json(nlohmann::json::parse(text), SamplingParams{});
      ADD_FAILURE() << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << text << ": " << e.what();
    }
  }
  EXPECT_THROW(sampling_params_from_json(nlohmann::json::array(), SamplingParams{}), Error);
}

// A key that sets nothing is an error naming it, with the key it misspells; every known key
// (the control) is accepted.
TEST(SamplingParams, FromJsonRefusesUnknownKeys) {
  for (const auto& [text, part] : std::vector<std::pair<const char*, const char*>>{
           {R"({"temprature": 0.5})", "unknown key 'temprature' (did you mean 'temperature'?)"},
           {R"({"max_new_tokens": 8})", "unknown key 'max_new_tokens'"},
           {R"({"id": "row-3"})", "unknown key 'id'"}}) {
    try {
      sampling_params_from_json(nlohmann::json::parse(text), SamplingParams{});
      ADD_FAILURE() << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(sampling_params_from_json(
      nlohmann::json::parse(R"({"n": 2, "temperature": 0.5, "top_k": 3, "top_p": 0.9,
      "min_p": 0.1, "repetition_penalty": 1.1, "max_tokens": 4, "min_tokens": 1,
      "ignore_eos": true, "logprobs": 2, "processed_logprobs": true, "stop_token_ids": [1],
      "stop": "x", "seed": 5})"),
      SamplingParams{}));
}

// sampling_param_keys() is exactly what the reader takes: each key alone is accepted (null keeps
// the default), and the list holds the keys above.
TEST(SamplingParams, KeysAreTheReadersKeys) {
  const std::vector<std::string>& keys = sampling_param_keys();
  EXPECT_EQ(keys.size(), 14u);
  for (const char* k : {"n", "temperature", "max_tokens", "stop", "stop_token_ids", "seed"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  for (const std::string& k : keys)
    EXPECT_NO_THROW(sampling_params_from_json(nlohmann::json{{k, nullptr}}, SamplingParams{})) << k;
}

}  // namespace
}  // namespace fp8rl
