// Bad input gives an fp8rl::Error that names the problem, never a crash.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/check.h"
#include "fixtures.h"

using fixtures::Json;
using fixtures::load;

namespace {

std::string load_error(const Json& j) {
  try {
    load(j);
  } catch (const fp8rl::Error& e) {
    return e.what();
  }
  return "no error";
}

std::string text_error(const std::string& text) {
  try {
    fp8rl::tok::Tokenizer::from_json_text(text, "t.json");
  } catch (const fp8rl::Error& e) {
    return e.what();
  }
  return "no error";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

}  // namespace

TEST(TokenizerErrors, MalformedFiles) {
  EXPECT_CONTAINS(text_error("{\"model\": "), "t.json: invalid JSON");
  EXPECT_CONTAINS(text_error("[1, 2]"), "t.json: the top level must be a JSON object");
  EXPECT_CONTAINS(text_error("{}"), "missing field 'model'");
  EXPECT_CONTAINS(text_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})"),
                  "the id of 'a' must be an integer");
  EXPECT_CONTAINS(text_error(R"({"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []}})"),
                  "id -3 of 'a' is out of range");
  EXPECT_CONTAINS(text_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})"),
                  "merge 0 'a' must be two tokens separated by one space");
  EXPECT_CONTAINS(text_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}})"),
                  "merge 0 must be a pair of strings");
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  Json j = fixtures::byte_level_json();
  j["model"]["type"] = "Unigram";
  EXPECT_CONTAINS(load_error(j), "unsupported model type \"Unigram\"");
  j = fixtures::byte_level_json();
  j["normalizer"] = {{"type", "Precompiled"}};
  EXPECT_CONTAINS(load_error(j), "normalizer: unsupported type 'Precompiled'");
  j = fixtures::byte_level_json();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_CONTAINS(load_error(j), "pre_tokenizer: unsupported type 'BertPreTokenizer'");
  j = fixtures::byte_level_json();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_CONTAINS(load_error(j), "decoder: unsupported type 'WordPiece'");
  j = fixtures::byte_level_json();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(oops"}}}, {"behavior", "Isolated"}};
  EXPECT_CONTAINS(load_error(j), "invalid regex '(oops'");
  j = fixtures::byte_level_json();
  j["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Sideways"}};
  EXPECT_CONTAINS(load_error(j), "unknown split behavior 'Sideways'");
  j = fixtures::byte_level_json();
  j["model"]["merges"].push_back("q zz");
  EXPECT_CONTAINS(load_error(j), "uses 'zz', which is not in the vocabulary");
  j = fixtures::byte_level_json();
  j["model"]["dropout"] = 0.1;
  EXPECT_CONTAINS(load_error(j), "dropout");
}

TEST(TokenizerErrors, BadTextAndIds) {
  const auto t = load(fixtures::byte_level_json());
  try {
    t.encode("ok \xC3\x28 bad");
    FAIL();
  } catch (const fp8rl::Error& e) {
    EXPECT_CONTAINS(e.what(), "text to encode is not valid UTF-8");
    EXPECT_CONTAINS(e.what(), "byte offset 3");
  }
  try {
    t.decode(std::vector<int32_t>{1, 999999});
    FAIL();
  } catch (const fp8rl::Error& e) {
    EXPECT_CONTAINS(e.what(), "token id 999999 is out of range");
  }
  try {
    t.decode(std::vector<int32_t>{299});
    FAIL();
  } catch (const fp8rl::Error& e) {
    EXPECT_CONTAINS(e.what(), "token id 299 has no token");
  }
}

TEST(TokenizerErrors, MissingFiles) {
  try {
    fp8rl::tok::Tokenizer::from_file("/nonexistent/model");
    FAIL();
  } catch (const fp8rl::Error& e) {
    EXPECT_CONTAINS(e.what(), "no tokenizer file at /nonexistent/model");
  }
  try {
    fp8rl::tok::Tokenizer::from_file(std::filesystem::temp_directory_path());
    FAIL();
  } catch (const fp8rl::Error& e) {
    EXPECT_CONTAINS(e.what(), "a model directory must hold tokenizer.json");
  }
}

// Input nested far beyond any real tokenizer.json is an error, not a stack overflow.
TEST(TokenizerErrors, DeepNestingIsAClearError) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Json j = fixtures::byte_level_json();
  std::string text = j.dump();
  text.insert(text.size() - 1, R"(,"extra":)" + deep);
  EXPECT_CONTAINS(text_error(text), "limit of 256");
  // Sequences inside Sequences: each kind stops at kMaxSequenceDepth.
  const std::pair<const char*, const char*> kinds[] = {{"normalizer", "normalizers"},
                                                       {"pre_tokenizer", "pretokenizers"},
                                                       {"decoder", "decoders"},
                                                       {"post_processor", "processors"}};
  for (const auto& [field, list] : kinds) {
    Json nested = Json{{"type", "Sequence"}, {list, Json::array()}};
    for (int i = 0; i < 40; ++i) nested = Json{{"type", "Sequence"}, {list, Json::array({nested})}};
    j = fixtures::byte_level_json();
    j[field] = nested;
    EXPECT_CONTAINS(load_error(j), "Sequence nested deeper than the limit of 16");
    // Two levels, as real files have, load.
    j[field] = Json{{"type", "Sequence"},
                    {list, Json::array({Json{{"type", "Sequence"}, {list, Json::array()}}})}};
    EXPECT_EQ(load_error(j), "no error") << field;
  }
}

// Ids index dense tables: one huge id must be an error, not a multi-gigabyte allocation.
TEST(TokenizerErrors, HugeIdsAreRejectedBeforeAllocating) {
  EXPECT_CONTAINS(
      text_error(R"({"model": {"type": "BPE", "vocab": {"a": 400000000}, "merges": []}})"),
      "id 400000000 of 'a' is out of range [0, 16777216)");
  Json j = fixtures::byte_level_json();
  j["added_tokens"].push_back({{"id", 400000000}, {"content", "<huge>"}, {"special", true}});
  EXPECT_CONTAINS(load_error(j), "invalid id 400000000");
}
