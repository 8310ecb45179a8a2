// Streaming decode: every piece is valid UTF-8 and the pieces add up to the full decode.
#include <gtest/gtest.h>

#include <random>

#include "core/check.h"
#include "fixtures.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/unicode.h"

using namespace fp8rl::tok;
using fixtures::Json;
using fixtures::load;
using Ids = std::vector<int32_t>;

namespace {

// Streams ids and checks the invariants; returns the pieces.
std::vector<std::string> stream(const Tokenizer& t, const Ids& ids, bool skip_special) {
  IncrementalDecoder d(t, skip_special);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(d.push(id));
  pieces.push_back(d.finish());
  std::string all;
  for (const auto& p : pieces) {
    EXPECT_EQ(find_invalid_utf8(p), std::string::npos);
    all += p;
  }
  EXPECT_EQ(all, t.decode(ids, skip_special));
  return pieces;
}

Json metaspace_json() {
  // Mistral-style: Metaspace pre-tokenizer and decoder instead of Prepend/Replace/Strip.
  Json j = fixtures::sentencepiece_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"},
                        {"replacement", "\u2581"},
                        {"prepend_scheme", "first"},
                        {"split", false}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}}}}};
  return j;
}

}  // namespace

TEST(IncrementalDecoder, HoldsBackSplitCharacters) {
  const auto t = load(fixtures::byte_level_json());
  // "é" as two byte tokens: nothing until the second arrives.
  const auto pieces = stream(t, {0xC3, 0xA9, 'a'}, false);
  EXPECT_EQ(pieces[0], "");
  EXPECT_EQ(pieces[1], "\u00E9");
  EXPECT_EQ(pieces[2], "a");
}

TEST(IncrementalDecoder, ByteFallbackRunsWaitForTheirEnd) {
  const auto t = load(fixtures::sentencepiece_json());
  // <0xE4><0xB8><0xAD> is 中; a following <0xE4> would turn the whole run into U+FFFD x4,
  // so nothing of a run is released before a non-byte token (or finish).
  const Ids ids = {3 + 0xE4, 3 + 0xB8, 3 + 0xAD, 3 + 0xE4, fixtures::id_of(t, "a")};
  const auto pieces = stream(t, ids, false);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(pieces[i], "") << i;
  EXPECT_EQ(pieces[4], "\uFFFD\uFFFD\uFFFD\uFFFDa");
}

TEST(IncrementalDecoder, FirstTokenRulesMatchTheFullDecode) {
  for (const Json& j : {fixtures::sentencepiece_json(), metaspace_json()}) {
    const auto t = load(j);
    for (bool special : {false, true}) {
      for (const char* text : {"hello world", " hello  world ", "ab\u00E9 \u4E2D"}) {
        for (bool skip : {false, true}) stream(t, t.encode(text, special), skip);
      }
    }
  }
}

TEST(IncrementalDecoder, RandomIdSequences) {
  std::mt19937 rng(1234);
  for (const Json& j :
       {fixtures::byte_level_json(), fixtures::sentencepiece_json(), metaspace_json()}) {
    const auto t = load(j);
    std::vector<int32_t> valid;
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
      if (!t.id_to_token(id).empty()) valid.push_back(id);
    }
    for (int trial = 0; trial < 300; ++trial) {
      Ids ids(rng() % 40);
      for (auto& id : ids) id = valid[rng() % valid.size()];
      stream(t, ids, trial % 2 == 0);
    }
  }
}

TEST(IncrementalDecoder, FinishResetsTheStream) {
  const auto t = load(fixtures::byte_level_json());
  IncrementalDecoder d(t, false);
  EXPECT_EQ(d.push(0xC3), "");
  EXPECT_EQ(d.finish(), "\uFFFD");  // an unfinished character is released as U+FFFD
  EXPECT_EQ(d.push('h'), "h");
  EXPECT_EQ(d.finish(), "");
}

TEST(IncrementalDecoder, RejectsUnknownIds) {
  const auto t = load(fixtures::byte_level_json());
  IncrementalDecoder d(t, false);
  EXPECT_THROW(d.push(100000), fp8rl::Error);
  EXPECT_THROW(d.push(-1), fp8rl::Error);
}
