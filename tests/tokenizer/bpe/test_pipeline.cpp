// Normalizers, pre-tokenizers, added tokens, post-processors and decoders, one at a time.
#include <gtest/gtest.h>

#include "core/check.h"
#include "fixtures.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"

using namespace fp8rl::tok;
using fixtures::id_of;
using fixtures::Json;
using fixtures::load;
using Ids = std::vector<int32_t>;
using Strings = std::vector<std::string>;

namespace {

Strings pre_tokenize(const Json& config, const std::string& text) {
  auto p = make_pre_tokenizer(config);
  Words words, scratch;
  words.text = text;
  words.words.push_back({0, static_cast<uint32_t>(text.size()), true});
  p->pre_tokenize(words, scratch);
  Strings out;
  for (const auto& w : words.words) out.emplace_back(words.view(w));
  return out;
}

std::string normalize(const Json& config, std::string text) {
  make_normalizer(config)->normalize(text);
  return text;
}

Strings decode_chain(const Json& config, Strings tokens) {
  make_decoder(config)->decode_chain(tokens);
  return tokens;
}

Json split(const std::string& pattern, const std::string& behavior, bool invert = false,
           bool regex = true) {
  return {{"type", "Split"},
          {"pattern", {{regex ? "Regex" : "String", pattern}}},
          {"behavior", behavior},
          {"invert", invert}};
}

}  // namespace

TEST(Regex, TranslatesOnigurumaClasses) {
  const std::string ws =
      R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  EXPECT_EQ(translate_oniguruma_pattern(R"(\s+)"), "[" + ws + "]+");
  EXPECT_EQ(translate_oniguruma_pattern(R"((?!\S))"), "(?![^" + ws + "])");
  EXPECT_EQ(translate_oniguruma_pattern(R"(\u00e9\p{Lt})"), R"(\x{00e9}\p{Lt})");
  EXPECT_EQ(translate_oniguruma_pattern(R"([\]\s])"), R"([\])" + ws + "]");
  EXPECT_EQ(translate_oniguruma_pattern(R"(a\.b)"), R"(a\.b)");
}

TEST(Regex, PropertiesFollowUnicode16) {
  // Letters and digits assigned after PCRE2's Unicode 14 are added to \p{L} and \p{N}.
  const std::string letters = translate_oniguruma_pattern(R"(\p{L}+)");
  EXPECT_TRUE(letters.starts_with(R"([\p{L}\x{)")) << letters;
  EXPECT_NE(letters.find(R"(\x{11F04})"), std::string::npos);
  const std::string in_class = translate_oniguruma_pattern(R"([^\s\p{L}\p{N}])");
  EXPECT_TRUE(in_class.starts_with("[^" + std::string(R"(\t-\r)"))) << in_class;
  EXPECT_EQ(in_class.find('['), 0u);  // the additions stay inside the one class
  EXPECT_EQ(translate_oniguruma_pattern(R"([\P{L}])"), R"([\P{L}])");
  auto full_match = [](const char* pattern, const std::string& text) {
    bool whole = false;
    Regex::from_oniguruma(pattern).for_each_match(
        text, [&](size_t b, size_t e) { whole = whole || (b == 0 && e == text.size()); });
    return whole;
  };
  EXPECT_TRUE(full_match(R"(\p{L}+)", "a\U00011F04\U00016100"));  // Kawi, Gurung Khema
  EXPECT_TRUE(full_match(R"(\p{N})", "\U00011BF1"));              // a Sunuwar digit
  EXPECT_TRUE(full_match(R"(\pL)", "\U0001E4D0"));                // Nag Mundari
  EXPECT_TRUE(full_match(R"(\P{L})", "1"));
  EXPECT_FALSE(full_match(R"(\P{L})", "\U00011F04"));
  EXPECT_TRUE(full_match(R"([^\p{L}])", "1"));
  EXPECT_FALSE(full_match(R"([^\p{L}])", "\U00011F04"));
}

TEST(Regex, WhiteSpaceFollowsOniguruma) {
  const Regex ws = Regex::from_oniguruma(R"(\s)");
  auto matches = [&](const std::string& s) {
    int n = 0;
    ws.for_each_match(s, [&](size_t, size_t) { ++n; });
    return n;
  };
  EXPECT_EQ(matches("\u0085"), 1);  // NEL: whitespace for Oniguruma (not for JavaScript)
  EXPECT_EQ(matches("\uFEFF"), 0);  // BOM: not whitespace for Oniguruma (it is for JavaScript)
  EXPECT_EQ(matches("\u180E"), 0);  // no longer a space since Unicode 6.3 (PCRE2 says it is)
  EXPECT_EQ(matches("\u3000\u00A0 \t"), 4);
}

TEST(Regex, EmptyMatchesAdvanceLikeOniguruma) {
  std::vector<std::pair<size_t, size_t>> m;
  Regex::from_oniguruma("x*").for_each_match("axxb", [&](size_t b, size_t e) {
    m.push_back({b, e});
  });
  // Empty at 0, "xx" at 1-3, the empty match at 3 right after it is skipped, empty at 4.
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {1, 3}, {4, 4}}));
}

TEST(Regex, BadPatternIsAClearError) {
  try {
    Regex::from_oniguruma("(unclosed");
    FAIL();
  } catch (const fp8rl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid regex '(unclosed'"), std::string::npos);
  }
  EXPECT_THROW(Regex::from_oniguruma("[a-z&&[^b]]"), fp8rl::Error);
}

TEST(PreTokenizer, SplitBehaviors) {
  const std::string text = "a-b--c-";
  EXPECT_EQ(pre_tokenize(split("-", "Removed", false, false), text), (Strings{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize(split("-", "Isolated", false, false), text),
            (Strings{"a", "-", "b", "-", "-", "c", "-"}));
  EXPECT_EQ(pre_tokenize(split("-", "MergedWithPrevious", false, false), text),
            (Strings{"a-", "b-", "-", "c-"}));
  EXPECT_EQ(pre_tokenize(split("-", "MergedWithNext", false, false), text),
            (Strings{"a", "-b", "-", "-c", "-"}));
  EXPECT_EQ(pre_tokenize(split("-", "Contiguous", false, false), text),
            (Strings{"a", "-", "b", "--", "c", "-"}));
  // invert: the matches are the words.
  EXPECT_EQ(pre_tokenize(split(R"(\p{L}+)", "Removed", true), "ab, cd!"), (Strings{"ab", "cd"}));
}

TEST(PreTokenizer, Gpt2AndQwenRegexes) {
  const Json gpt2 = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  // The words come back in byte-level alphabet: "Ġ" is a space.
  EXPECT_EQ(pre_tokenize(gpt2, "I'm here  now"),
            (Strings{"I", "'m", "\u0120here", "\u0120", "\u0120now"}));
  const Json qwen = split(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
      "Isolated");
  EXPECT_EQ(pre_tokenize(qwen, "It'S 2024!\n\n  ok"),
            (Strings{"It", "'S", " ", "2", "0", "2", "4", "!\n\n", " ", " ok"}));
}

TEST(PreTokenizer, ByteLevelPrefixSpace) {
  const Json p = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}};
  EXPECT_EQ(pre_tokenize(p, "hi"), (Strings{"\u0120hi"}));
  EXPECT_EQ(pre_tokenize(p, " hi"), (Strings{"\u0120hi"}));
}

TEST(PreTokenizer, Metaspace) {
  Json m = {{"type", "Metaspace"},
            {"replacement", "\u2581"},
            {"prepend_scheme", "always"},
            {"split", true}};
  EXPECT_EQ(pre_tokenize(m, "Hey  friend!"), (Strings{"\u2581Hey", "\u2581", "\u2581friend!"}));
  m["split"] = false;
  EXPECT_EQ(pre_tokenize(m, "Hey friend"), (Strings{"\u2581Hey\u2581friend"}));
  m["prepend_scheme"] = "never";
  EXPECT_EQ(pre_tokenize(m, "Hey"), (Strings{"Hey"}));
  // Old files: add_prefix_space false means never.
  const Json old = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}};
  EXPECT_EQ(pre_tokenize(old, "Hey you"), (Strings{"Hey", "\u2581you"}));
}

TEST(PreTokenizer, DigitsWhitespacePunctuation) {
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", true}}, "a123b"),
            (Strings{"a", "1", "2", "3", "b"}));
  EXPECT_EQ(pre_tokenize({{"type", "Digits"}, {"individual_digits", false}}, "a123b4"),
            (Strings{"a", "123", "b", "4"}));
  EXPECT_EQ(pre_tokenize({{"type", "WhitespaceSplit"}}, " a\u3000b\tc "), (Strings{"a", "b", "c"}));
  EXPECT_EQ(pre_tokenize({{"type", "Whitespace"}}, "Hey, friend!!"),
            (Strings{"Hey", ",", "friend", "!!"}));
  EXPECT_EQ(pre_tokenize({{"type", "Punctuation"}}, "a,b.."), (Strings{"a", ",", "b", ".", "."}));
  const Json seq = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(pre_tokenize(seq, "ab12 c3"), (Strings{"ab", "1", "2", "c", "3"}));
}

TEST(Normalizer, Kinds) {
  EXPECT_EQ(normalize({{"type", "NFC"}}, "e\u0301"), "\u00E9");
  EXPECT_EQ(normalize({{"type", "NFD"}}, "\u00E9"), "e\u0301");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}},
                      "a b  c"),
            "a\u2581b\u2581\u2581c");
  EXPECT_EQ(normalize({{"type", "Replace"}, {"pattern", {{"Regex", R"(\s+)"}}}, {"content", " "}},
                      "a \t\n b"),
            "a b");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", "\u2581"}}, "x"), "\u2581x");
  EXPECT_EQ(normalize({{"type", "Prepend"}, {"prepend", "\u2581"}}, ""), "");
  EXPECT_EQ(
      normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, "\u3000 x \n"),
      "x \n");
  EXPECT_EQ(
      normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}, " \u00A0x\u2003"),
      "x");
  EXPECT_EQ(normalize({{"type", "StripAccents"}}, "e\u0301a\u0300"), "ea");
  const Json seq = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  EXPECT_EQ(normalize(seq, "a b"), "\u2581a\u2581b");
}

TEST(Decoder, Kinds) {
  EXPECT_EQ(decode_chain({{"type", "ByteLevel"}}, {"\u0120hi", "<|im_end|>", "\u00E4\u00B8"}),
            (Strings{" hi<|im_end|>\xEF\xBF\xBD"}));
  EXPECT_EQ(decode_chain({{"type", "ByteFallback"}}, {"<0x61>", "b", "<0xE5>", "<0x8F>", "<0xAB>"}),
            (Strings{"a", "b", "\u53EB"}));
  EXPECT_EQ(decode_chain({{"type", "ByteFallback"}}, {"<0xE5>", "<0x8F>", "a"}),
            (Strings{"\uFFFD", "\uFFFD", "a"}));
  EXPECT_EQ(decode_chain({{"type", "Strip"}, {"content", "H"}, {"start", 1}, {"stop", 0}},
                         {"Hey", " friend!", "HHH"}),
            (Strings{"ey", " friend!", "HH"}));
  EXPECT_EQ(decode_chain({{"type", "Strip"}, {"content", "y"}, {"start", 0}, {"stop", 1}},
                         {"Hey", " friend!"}),
            (Strings{"He", " friend!"}));
  // Metaspace drops every replacement character of the first token, as tokenizers does.
  EXPECT_EQ(
      decode_chain({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}},
                   {"\u2581Hey", "\u2581friend!", "\u2581\u2581x"}),
      (Strings{"Hey", " friend!", "  x"}));
  EXPECT_EQ(
      decode_chain({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}},
                   {"\u2581Hey"}),
      (Strings{" Hey"}));
  EXPECT_EQ(decode_chain({{"type", "Fuse"}}, {"a", "b"}), (Strings{"ab"}));
}

TEST(PostProcessor, TemplatesAndWrappers) {
  const Json templ = {{"type", "TemplateProcessing"},
                      {"single",
                       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                        {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
                      {"special_tokens",
                       {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}},
                        {"</s>", {{"id", "</s>"}, {"ids", {2}}, {"tokens", {"</s>"}}}}}}};
  EXPECT_EQ(make_post_processor(templ)->process({7, 8}, true), (Ids{1, 7, 8, 2}));
  EXPECT_EQ(make_post_processor(templ)->process({7, 8}, false), (Ids{7, 8}));
  const Json roberta = {{"type", "RobertaProcessing"}, {"cls", {"<s>", 0}}, {"sep", {"</s>", 2}}};
  EXPECT_EQ(make_post_processor(roberta)->process({5}, true), (Ids{0, 5, 2}));
  const Json seq = {{"type", "Sequence"},
                    {"processors", {{{"type", "ByteLevel"}, {"trim_offsets", false}}, templ}}};
  EXPECT_EQ(make_post_processor(seq)->process({9}, true), (Ids{1, 9, 2}));
  Json bad = templ;
  bad["special_tokens"].erase("</s>");
  EXPECT_THROW(make_post_processor(bad), fp8rl::Error);
}

TEST(AddedTokens, MatchedLeftmostLongestBeforeNormalization) {
  Json j = fixtures::byte_level_json();
  j["added_tokens"].push_back({{"id", 302},
                               {"content", "<|end|>x"},
                               {"special", false},
                               {"normalized", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"single_word", false}});
  const auto t = load(j);
  EXPECT_EQ(t.encode("a<|end|>b"), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(t.encode("a<|end|>xb"), (Ids{'a', 302, 'b'}));
  EXPECT_EQ(t.encode("<x><|end|><x>"), (Ids{301, 300, 301}));
  EXPECT_EQ(t.encode("<|end|"), (Ids{'<', '|', 'e', 'n', 'd', '|'}));
  // Special or not, added tokens in the text are recognised with or without add_special.
  EXPECT_EQ(t.encode("<x>", true), (Ids{301}));
}

TEST(AddedTokens, StripAndSingleWord) {
  Json j = fixtures::byte_level_json();
  auto token = [](int id, const char* content, bool lstrip, bool rstrip, bool single_word) {
    return Json{{"id", id},
                {"content", content},
                {"special", true},
                {"normalized", false},
                {"lstrip", lstrip},
                {"rstrip", rstrip},
                {"single_word", single_word}};
  };
  j["added_tokens"] =
      Json::array({token(300, "<L>", true, false, false), token(301, "<R>", false, true, false),
                   token(302, "tok", false, false, true)});
  const auto t = load(j);
  EXPECT_EQ(t.encode("a  <L>b"), (Ids{'a', 300, 'b'}));
  EXPECT_EQ(t.encode("a<R> \u3000 b"), (Ids{'a', 301, 'b'}));
  EXPECT_EQ(t.encode("tok"), (Ids{302}));
  EXPECT_EQ(t.encode("a tok."), (Ids{'a', id_of(t, fixtures::byte_char(' ')), 302, '.'}));
  EXPECT_EQ(t.encode("atok"), (Ids{'a', 't', 'o', 'k'}));
  EXPECT_EQ(t.encode("toks"), (Ids{'t', 'o', 'k', 's'}));
}

TEST(AddedTokens, NormalizedTokensMatchTheNormalizedText) {
  Json j = fixtures::sentencepiece_json();
  j["added_tokens"].push_back({{"id", 400},
                               {"content", "x y"},
                               {"special", false},
                               {"normalized", true},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"single_word", false}});
  const auto t = load(j);
  // The token's content is normalized too ("▁x▁y"), then found in the normalized text.
  EXPECT_EQ(t.encode("ab x y"), (Ids{id_of(t, "\u2581ab"), 400}));
}
