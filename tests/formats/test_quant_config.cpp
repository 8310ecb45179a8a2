// config.json's quantization_config: the formats read, and malformed fields as errors naming
// them (fuzz/regressions/quant_config/).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/check.h"
#include "formats/quant_config.h"

namespace fp8rl {
namespace {

using json = nlohmann::json;

std::string error_of(const json& q) {
  try {
    parse_quantization_config(q);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

json compressed_tensors(const json& weights, const json& acts) {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"config_groups",
           {{"group_0",
             {{"weights", weights}, {"input_activations", acts}, {"targets", {"Linear"}}}}}}};
}

const json kChannel = {{"num_bits", 8},
                       {"type", "float"},
                       {"symmetric", true},
                       {"strategy", "channel"},
                       {"dynamic", false}};
const json kToken = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}};

TEST(QuantConfig, ReadsCompressedTensorsAndFp8) {
  const CheckpointQuant ct = parse_quantization_config(compressed_tensors(kChannel, kToken));
  EXPECT_EQ(ct.weight, Fp8Scheme::row);
  EXPECT_EQ(ct.act, ActScaling::token);
  const CheckpointQuant block = parse_quantization_config({{"quant_method", "fp8"},
                                                           {"activation_scheme", "dynamic"},
                                                           {"weight_block_size", {128, 128}}});
  EXPECT_EQ(block.weight, Fp8Scheme::block);
  EXPECT_EQ(block.weight_scale_name, "weight_scale_inv");
  // null is "not given", as transformers writes unset fields.
  json nulls = kChannel;
  nulls["num_bits"] = nullptr;
  nulls["symmetric"] = nullptr;
  EXPECT_EQ(parse_quantization_config(compressed_tensors(nulls, kToken)).weight, Fp8Scheme::row);
}

// Fuzzer finding (2026-12-01): a field of the wrong type ("symmetric": "float") escaped as
// nlohmann's type_error, which terminated the fuzz target (and reached users as a message
// without the field's name). Each is now an fp8rl::Error naming the field.
TEST(QuantConfig, FieldsOfTheWrongTypeAreErrorsNamingThem) {
  std::ifstream in(std::string(FP8RL_SOURCE_DIR) +
                   "/fuzz/regressions/quant_config/symmetric_is_a_string.json");
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_FALSE(text.str().empty());
  EXPECT_NE(error_of(json::parse(text.str())).find("field 'symmetric' must be true or false"),
            std::string::npos);

  const auto weights_with = [](const char* key, const json& value) {
    json w = kChannel;
    w[key] = value;
    return compressed_tensors(w, kToken);
  };
  EXPECT_NE(error_of(weights_with("symmetric", "yes"))
                .find("config_groups.group_0.weights field "
                      "'symmetric' must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of(weights_with("num_bits", "8")).find("field 'num_bits' must be an integer"),
            std::string::npos);
  // A float is no integer (converting 1e300 to int is undefined behaviour).
  EXPECT_NE(error_of(weights_with("num_bits", 1e300)).find("field 'num_bits' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(weights_with("type", 1)).find("field 'type' must be a string"),
            std::string::npos);
  json q = compressed_tensors(kChannel, kToken);
  q["format"] = 3;
  EXPECT_NE(error_of(q).find("field 'format' must be a string"), std::string::npos);
  EXPECT_NE(error_of({{"quant_method", "fp8"}, {"activation_scheme", false}})
                .find("field 'activation_scheme' must be a string"),
            std::string::npos);
  EXPECT_NE(error_of({{"quant_method", "fp8"}, {"fmt", {1}}}).find("field 'fmt' must be a string"),
            std::string::npos);
  json group = kToken;
  group["strategy"] = "group";
  group["group_size"] = "128";
  EXPECT_NE(
      error_of(compressed_tensors(kChannel, group)).find("field 'group_size' must be an integer"),
      std::string::npos);
  group["group_size"] = 128;  // the control: the same config with an integer
  EXPECT_EQ(parse_quantization_config(compressed_tensors(kChannel, group)).act, ActScaling::group);
}

}  // namespace
}  // namespace fp8rl
