// BPE model and the encode pipeline on small tokenizers.
#include <gtest/gtest.h>

#include "core/check.h"
#include "fixtures.h"

using fixtures::byte_char;
using fixtures::id_of;
using fixtures::Json;
using fixtures::load;
using Ids = std::vector<int32_t>;

TEST(ByteLevelBpe, MergesByRankAndMapsBytes) {
  const auto t = load(fixtures::byte_level_json());
  const std::string g = byte_char(' ');
  // "hello world" -> GPT-2 regex words "hello", " world" -> merged tokens.
  EXPECT_EQ(t.encode("hello world"), (Ids{id_of(t, "hello"), id_of(t, g + "world")}));
  EXPECT_EQ(t.encode(" the"), (Ids{id_of(t, g + "the")}));
  // 中 is E4 B8 AD: merged through two ranks into one token.
  EXPECT_EQ(t.encode("\u4E2D"),
            (Ids{id_of(t, byte_char(0xE4) + byte_char(0xB8) + byte_char(0xAD))}));
  // Unmerged bytes stay single: "é" is C3 A9.
  EXPECT_EQ(t.encode("\u00E9"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(ByteLevelBpe, DecodesBack) {
  const auto t = load(fixtures::byte_level_json());
  for (const std::string text :
       {"hello world", " the end\n\n", "\u4E2D\u6587 \U0001F600 caf\u00E9", "tabs\tand\r\nlines"}) {
    EXPECT_EQ(t.decode(t.encode(text)), text);
  }
}

TEST(ByteLevelBpe, StringAndPairMergeFormsAgree) {
  Json j = fixtures::byte_level_json();
  Json pairs = Json::array();
  for (const Json& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ');
    pairs.push_back(Json::array({s.substr(0, space), s.substr(space + 1)}));
  }
  const auto a = load(j);
  j["model"]["merges"] = pairs;
  const auto b = load(j);
  for (const char* text : {"hello world the", "\u4E2D hello", "shell hello"}) {
    EXPECT_EQ(a.encode(text), b.encode(text)) << text;
  }
}

TEST(ByteLevelBpe, LowerRankWinsAndLeftmostBreaksTies) {
  // Vocabulary a, b, ab, bb; merges "b b" (rank 0) before "a b" (rank 1): "abb" -> a + bb.
  Json j = fixtures::byte_level_json();
  j["model"]["vocab"]["ab"] = 400;
  j["model"]["vocab"]["bb"] = 401;
  j["model"]["merges"] = Json::array({"b b", "a b"});
  const auto t = load(j);
  EXPECT_EQ(t.encode("abb"), (Ids{'a', 401}));
  // Same rank everywhere: "bbb" -> leftmost pair first: bb + b.
  EXPECT_EQ(t.encode("bbb"), (Ids{401, 'b'}));
  EXPECT_EQ(t.encode("abab"), (Ids{400, 400}));
}

TEST(ByteLevelBpe, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  Json j = fixtures::byte_level_json();
  j["model"]["vocab"]["xyz"] = 500;  // reachable by no merge
  auto t = load(j);
  EXPECT_EQ(t.encode("xyz"), (Ids{'x', 'y', 'z'}));
  j["model"]["ignore_merges"] = true;
  t = load(j);
  EXPECT_EQ(t.encode("xyz"), (Ids{500}));
}

TEST(ByteLevelBpe, PrefixAndSuffixMerges) {
  // continuing_subword_prefix "##" and end_of_word_suffix "</w>" (BERT-/CLIP-style BPE).
  Json vocab = {{"a", 0}, {"##b", 1}, {"##c</w>", 2}, {"a##b", 3}, {"ab", 4}, {"c</w>", 5}};
  Json j = fixtures::byte_level_json();
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  j["decoder"] = nullptr;
  j["post_processor"] = nullptr;
  j["added_tokens"] = Json::array();
  j["model"]["vocab"] = vocab;
  j["model"]["continuing_subword_prefix"] = "##";
  j["model"]["end_of_word_suffix"] = "</w>";
  j["model"]["merges"] = Json::array({Json::array({"a", "##b"})});
  const auto t = load(j);
  // "abc": a, ##b, ##c</w> -> merge a + ##b = "ab" (prefix stripped from the right part).
  EXPECT_EQ(t.encode("abc c"), (Ids{4, 2, 5}));
}

TEST(SentencePieceBpe, PrependsMetaspaceAndFallsBackToBytes) {
  const auto t = load(fixtures::sentencepiece_json());
  EXPECT_EQ(t.encode("hello world"), (Ids{id_of(t, "\u2581hello"), id_of(t, "\u2581world")}));
  EXPECT_EQ(t.encode("hello", /*add_special=*/true), (Ids{1, id_of(t, "\u2581hello")}));
  // "é" is not in the vocabulary: its UTF-8 bytes C3 A9 as <0xC3> <0xA9>.
  EXPECT_EQ(t.encode("\u00E9"), (Ids{id_of(t, "\u2581"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.encode("\u4E2D"), (Ids{id_of(t, "\u2581"), id_of(t, "\u4E2D")}));
}

TEST(SentencePieceBpe, DecodeStripsTheAddedSpaceAndJoinsBytes) {
  const auto t = load(fixtures::sentencepiece_json());
  for (const std::string text : {"hello world", "caf\u00E9 \U0001F600", "ab ab", "\u4E2Dab"}) {
    EXPECT_EQ(t.decode(t.encode(text)), text);
    EXPECT_EQ(t.decode(t.encode(text, true), /*skip_special=*/true), text);
  }
  EXPECT_EQ(t.decode(t.encode("hi", true)), "<s> hi");
}

TEST(SentencePieceBpe, InvalidByteRunsBecomeOneReplacementPerByte) {
  const auto t = load(fixtures::sentencepiece_json());
  const std::string r = "\xEF\xBF\xBD";
  // <0xE4> <0xB8> then a normal token: tokenizers' ByteFallback writes one U+FFFD per byte
  // (a lossy UTF-8 decode would write one).
  EXPECT_EQ(t.decode(Ids{3 + 0xE4, 3 + 0xB8, id_of(t, "a")}), r + r + "a");
  EXPECT_EQ(t.decode(Ids{3 + 0xE4, 3 + 0xB8, 3 + 0xAD}), "\u4E2D");
}

TEST(SentencePieceBpe, UnknownCharactersFuseIntoOneUnk) {
  Json j = fixtures::sentencepiece_json();
  j["model"]["byte_fallback"] = false;
  auto t = load(j);
  EXPECT_EQ(t.encode("ab\u00E9\u00E8ab"), (Ids{id_of(t, "\u2581ab"), 0, id_of(t, "ab")}));
  j["model"]["fuse_unk"] = false;
  t = load(j);
  EXPECT_EQ(t.encode("ab\u00E9\u00E8ab"), (Ids{id_of(t, "\u2581ab"), 0, 0, id_of(t, "ab")}));
  // Without an unk token an unknown character is dropped, as tokenizers does.
  j["model"]["unk_token"] = nullptr;
  t = load(j);
  EXPECT_EQ(t.encode("ab\u00E9"), (Ids{id_of(t, "\u2581ab")}));
}

TEST(Tokenizer, VocabularyQueries) {
  const auto t = load(fixtures::byte_level_json());
  EXPECT_EQ(t.vocab_size(), 302);
  EXPECT_EQ(t.token_to_id("<|end|>"), 300);
  EXPECT_EQ(t.id_to_token(300), "<|end|>");
  EXPECT_EQ(t.id_to_token('a'), "a");
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_FALSE(t.is_special('a'));
  EXPECT_EQ(t.token_to_id("no such token"), -1);
  EXPECT_EQ(t.id_to_token(299), "");  // a hole in the ids
}
