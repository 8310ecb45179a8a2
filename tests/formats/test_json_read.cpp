// The JSON reading policy (formats/json_read.h) and the input-file rule (core/input_file.h):
// inputs nested far beyond any real file, FIFOs and directories in place of files, and a
// 200k-tensor safetensors header are clean errors or fast successes, never a crash or a hang.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>

#include "core/check.h"
#include "core/input_file.h"
#include "formats/json_read.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"
#include "formats/safetensors_header.h"
#include "test_util.h"

using namespace fp8rl;
using fp8rl::test::expect_error;
using fp8rl::test::ScratchDir;

namespace {

// 100k levels: deep enough that a recursive parser, copy or dump overflows the stack.
constexpr int kDeep = 100'000;

std::string deep_array(int depth) {
  return std::string(size_t(depth), '[') + std::string(size_t(depth), ']');
}

std::string deep_object(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += R"({"a":)";
  s += "1";
  s += std::string(size_t(depth), '}');
  return s;
}

const char* kTinyConfig = R"({"architectures":["LlamaForCausalLM"],"vocab_size":64,
  "hidden_size":16,"intermediate_size":32,"num_hidden_layers":2,"num_attention_heads":2,
  "num_key_value_heads":1,"max_position_embeddings":128,"rms_norm_eps":1e-6})";

}  // namespace

TEST(JsonRead, ParsesNormalText) {
  const nlohmann::json j = parse_json_text(R"({"a":[1,2,{"b":null}],"c":"x"})", "t");
  EXPECT_EQ(j["a"][2].size(), 1u);
  EXPECT_EQ(j["c"], "x");
  const nlohmann::ordered_json o = parse_ordered_json_text(R"({"z":1,"a":2})", "t");
  EXPECT_EQ(o.begin().key(), "z");  // file order kept
}

TEST(JsonRead, DeepNestingIsAnErrorWithPositionAndLimit) {
  expect_error([] { parse_json_text(deep_array(kDeep), "deep.json"); },
               {"deep.json", "limit of 256", "byte 256", "line 1"});
  expect_error([] { parse_json_text("{\n\n" + deep_object(kDeep).substr(1), "d"); },
               {"limit of 256", "line 3"});
  expect_error([] { parse_ordered_json_text(deep_array(kDeep), "o"); }, {"limit of 256"});
  // The limit is the limit: 256 levels parse, 257 do not.
  EXPECT_NO_THROW(parse_json_text(deep_array(256), "t"));
  expect_error([] { parse_json_text(deep_array(257), "t"); }, {"limit of 256"});
  // Brackets inside strings do not count.
  EXPECT_NO_THROW(parse_json_text("[\"" + std::string(1000, '[') + "\\\"[\"]", "t"));
}

TEST(JsonRead, SizeNulAndDuplicateRules) {
  JsonLimits small;
  small.max_bytes = 4;
  expect_error([&] { parse_json_text("[1,2,3]", "t", small); }, {"7 bytes", "limit of 4"});
  expect_error([] { parse_json_text(std::string("[1]\0[2]", 7), "t"); }, {"NUL byte at byte 3"});
  expect_error([] { parse_json_text(R"({"a":{"k":1,"k":2}})", "t"); },
               {"duplicate key 'k'", "object 'a'"});
  JsonLimits keep;
  keep.reject_duplicate_keys = false;
  EXPECT_EQ(parse_json_text(R"({"k":1,"k":2})", "t", keep)["k"], 2);
  expect_error([] { parse_json_text("[1,", "broken.json"); }, {"broken.json is not valid JSON"});
}

TEST(JsonRead, ExcerptIsBounded) {
  const nlohmann::json big = nlohmann::json(std::string(1 << 20, 'x'));
  EXPECT_LE(json_excerpt(big).size(), 83u);
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) list.push_back(i);
  const std::string e = json_excerpt(list, 20);
  EXPECT_EQ(e, "[0,1,2,3,4,5,6,7,8,9...");
  EXPECT_EQ(json_excerpt(nlohmann::json{{"a", 1}}), R"({"a":1})");
  // Nesting within the parse limit prints with a depth cap, not a full recursion.
  const nlohmann::json deep = parse_json_text(deep_array(200), "t");
  EXPECT_EQ(json_excerpt(deep), "[[[[[[[[[...]]]]]]]]]");
}

// A cut never splits a UTF-8 character: half of one is not a string nlohmann can write (its
// dump threw type_error 316 out of an error message; found by fuzz_run_config).
TEST(JsonRead, ExcerptCutsAtACharacterBoundary) {
  const std::string two_byte = "\xC2\xA0";  // U+00A0
  for (size_t prefix = 0; prefix < 4; ++prefix) {
    std::string text(prefix, 'a');
    for (int i = 0; i < 20; ++i) text += two_byte;
    for (size_t max = 1; max < 12; ++max) {
      std::string e;
      ASSERT_NO_THROW(e = json_excerpt(nlohmann::json(text), max)) << prefix << " " << max;
      EXPECT_LE(e.size(), max + 3);
      EXPECT_NO_THROW((void)nlohmann::json(e).dump()) << "not UTF-8: " << e;
      ASSERT_NO_THROW(json_excerpt(nlohmann::json{{text, 1}}, max));
      ASSERT_NO_THROW(json_excerpt(nlohmann::ordered_json{{text, 1}}, max));
    }
  }
  EXPECT_EQ(json_excerpt(nlohmann::json("\xC2\xA0\xC2\xA0"), 4), "\"\xC2\xA0...");
}

TEST(JsonRead, DeepNestingInEveryFormatsFile) {
  ScratchDir dir;
  // config.json
  fp8rl::test::write_bytes(dir / "config.json", deep_object(kDeep));
  expect_error([&] { ModelConfig::load(dir.str()); }, {"config.json", "limit of 256"});
  // quantization_config inside a config.json
  std::string cfg = kTinyConfig;
  cfg.insert(cfg.size() - 1, R"(,"quantization_config":)" + deep_array(kDeep));
  fp8rl::test::write_bytes(dir / "config.json", cfg);
  expect_error([&] { ModelConfig::load(dir.str()); }, {"limit of 256"});
  // a safetensors header value
  const std::string header = R"({"__metadata__":{"k":)" + deep_array(kDeep) + "}}";
  expect_error([&] { parse_safetensors_header(header, 0, "x.safetensors"); },
               {"x.safetensors", "limit of 256"});
  // a checkpoint index
  fp8rl::test::write_bytes(dir / "model.safetensors.index.json",
                           R"({"weight_map":)" + deep_object(kDeep) + "}");
  expect_error([&] { Checkpoint::open(dir.str()); }, {"index.json", "limit of 256"});
}

TEST(InputFile, FifoAndDirectoryFailFast) {
  ScratchDir dir;
  ASSERT_EQ(::mkfifo((dir / "config.json").c_str(), 0600), 0);
  // Without O_NONBLOCK this open() would wait forever for a writer.
  expect_error([&] { ModelConfig::load(dir.str()); }, {"config.json", "is not a regular file"});
  expect_error([&] { read_json_file(dir / "config.json"); }, {"is not a regular file"});
  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
  expect_error([&] { SafetensorsFile::open(dir / "model.safetensors"); },
               {"is not a regular file"});
  expect_error([&] { read_input_file(dir.str(), "text", 100); },
               {"is not a regular file (a directory)"});
  expect_error([&] { InputLines(dir / "config.json", "--jsonl", 100); },
               {"--jsonl", "is not a regular file"});
  expect_error([&] { read_input_file(dir / "missing", "text", 100); }, {"cannot open"});
}

TEST(InputFile, ReadsWithinLimitsAndSplitsLines) {
  ScratchDir dir;
  fp8rl::test::write_bytes(dir / "t.txt", "ab\n\ncd");
  EXPECT_EQ(read_input_file(dir / "t.txt", "text", 6), "ab\n\ncd");
  expect_error([&] { read_input_file(dir / "t.txt", "text", 5); }, {"6 bytes", "limit of 5"});
  InputLines lines(dir / "t.txt", "lines", 2);
  std::string line;
  std::vector<std::string> got;
  while (lines.next(line)) got.push_back(line);
  EXPECT_EQ(got, (std::vector<std::string>{"ab", "", "cd"}));
  fp8rl::test::write_bytes(dir / "long.txt", "ok\n" + std::string(100000, 'x') + "\n");
  InputLines long_lines(dir / "long.txt", "lines", 1000);
  EXPECT_TRUE(long_lines.next(line));
  expect_error([&] { long_lines.next(line); }, {"line 2", "limit of 1000"});
}

// MoE checkpoints hold tens of thousands of tensors; nlohmann's callback parser made this
// quadratic (200k tensors took minutes). The bound is generous: it only catches a quadratic.
// Measured: 1.5-2.5 s in a release build on a shared 2-core machine, 17 s under ASan + UBSan
// in a Debug build (tests/asan.sh), hence the larger bound there.
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
constexpr double kHeaderParseSeconds = 100.0;
#else
constexpr double kHeaderParseSeconds = 10.0;
#endif

TEST(SafetensorsHeader, TwoHundredThousandTensorsParseFast) {
  constexpr int kTensors = 200'000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i) {
    if (i) header += ',';
    header += fmt::format(R"("t{:06d}":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}})", i,
                          4 * i, 4 * i + 4);
  }
  header += "}";
  const auto start = std::chrono::steady_clock::now();
  const SafetensorsHeader h = parse_safetensors_header(header, size_t(4) * kTensors, "many");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(h.tensors.size(), size_t(kTensors));
  EXPECT_LT(seconds, kHeaderParseSeconds);
  std::printf("200k-tensor header: %.3f s\n", seconds);
}
