// UTF-8 helpers and Unicode normalization.
#include <gtest/gtest.h>

#include <string>

#include "core/check.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_normalization.h"

using namespace fp8rl::tok;

TEST(Utf8, FindsIllFormedSequences) {
  EXPECT_EQ(find_invalid_utf8("plain ascii text, long enough for the word loop"),
            std::string::npos);
  EXPECT_EQ(find_invalid_utf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80"), std::string::npos);
  EXPECT_EQ(find_invalid_utf8("ab\x80"), 2u);               // lone continuation
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);             // overlong
  EXPECT_EQ(find_invalid_utf8("x\xED\xA0\x80"), 1u);        // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);     // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("abcdefghij\xE4\xB8"), 10u);  // truncated at the end
}

TEST(Utf8, CheckNamesTheOffset) {
  try {
    check_utf8("hello\xFFworld", "input");
    FAIL() << "expected an error";
  } catch (const fp8rl::Error& e) {
    EXPECT_NE(std::string(e.what()).find("input is not valid UTF-8"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("offset 5"), std::string::npos);
  }
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  auto lossy = [](std::string_view s) {
    std::string out;
    append_utf8_lossy(out, s);
    return out;
  };
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("ok"), "ok");
  EXPECT_EQ(lossy("\xE4\xB8"), r);  // one truncated sequence: one U+FFFD
  EXPECT_EQ(lossy("\xE4\xB8x"), r + "x");
  EXPECT_EQ(lossy("\x80\x80"), r + r);  // each stray continuation byte
  EXPECT_EQ(lossy("\xF0\x9F\x98"), r);
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);  // surrogates: ED is not followed by A0
  EXPECT_EQ(lossy("a\xC3\xA9\xFFz"), "a\xC3\xA9" + r + "z");
}

TEST(Utf8, IncompleteSuffix) {
  EXPECT_EQ(incomplete_utf8_suffix("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("ab\xE4"), 1u);
  EXPECT_EQ(incomplete_utf8_suffix("ab\xE4\xB8"), 2u);
  EXPECT_EQ(incomplete_utf8_suffix("ab\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_suffix("\xC0"), 0u);  // never a valid lead
  EXPECT_EQ(incomplete_utf8_suffix("\x80"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("\xE0\x80"), 0u);  // E0 needs A0..BF next
}

TEST(Utf8, WhiteSpaceIsTheUnicodeProperty) {
  for (char32_t cp :
       {0x09, 0x0A, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A, 0x2028, 0x202F, 0x3000}) {
    EXPECT_TRUE(is_white_space(cp)) << std::hex << uint32_t(cp);
  }
  for (char32_t cp : {0x08, 0x1C, 0x200B, 0x180E, 0xFEFF, 0x2060, 0x41}) {
    EXPECT_FALSE(is_white_space(cp)) << std::hex << uint32_t(cp);
  }
}

namespace {
struct NormalizationCase {
  const char* input;
  const char* nfc;
  const char* nfd;
};
// Expected values from Python's unicodedata.normalize.
const NormalizationCase kCases[] = {
    {"e\u0301", "\u00E9", "e\u0301"},
    {"a\u0323\u0301", "\u1EA1\u0301", "a\u0323\u0301"},
    {"a\u0301\u0323", "\u1EA1\u0301", "a\u0323\u0301"},
    {"\u212B", "\u00C5", "A\u030A"},
    {"\u2126", "\u03A9", "\u03A9"},
    {"\u1100\u1161\u11A8", "\uAC01", "\u1100\u1161\u11A8"},
    {"\uAC00\u11A8", "\uAC01", "\u1100\u1161\u11A8"},
    {"\u0344", "\u0308\u0301", "\u0308\u0301"},
    {"\u1E9B\u0323", "\u1E9B\u0323", "\u017F\u0323\u0307"},
    {"\u0F73", "\u0F71\u0F72", "\u0F71\u0F72"},
    {"Q\u0307\u0323", "Q\u0323\u0307", "Q\u0323\u0307"},
    {"\u00C5\u0301", "\u01FA", "A\u030A\u0301"},
    {"\u0958", "\u0915\u093C", "\u0915\u093C"},
    {"\u2ADC", "\u2ADD\u0338", "\u2ADD\u0338"},
    {"\u09C7\u09BE", "\u09CB", "\u09C7\u09BE"},
    {"\u0301abc", "\u0301abc", "\u0301abc"},
    {"x\u0301\u0301\u0301", "x\u0301\u0301\u0301", "x\u0301\u0301\u0301"},
    {"\U0001D15E", "\U0001D157\U0001D165", "\U0001D157\U0001D165"},
    {"\uFB01", "\uFB01", "\uFB01"},
    {"\u01D6\u0323", "\u1EE5\u0308\u0304", "u\u0323\u0308\u0304"},
};
}  // namespace

TEST(Normalization, MatchesPythonUnicodedata) {
  for (const auto& c : kCases) {
    for (const std::string prefix : {"", "text ", "\u4E2D"}) {
      std::string nfc = prefix + c.input + " end";
      normalize_unicode(nfc, NormalizationForm::kNfc);
      EXPECT_EQ(nfc, prefix + c.nfc + " end") << c.input;
      std::string nfd = prefix + c.input + " end";
      normalize_unicode(nfd, NormalizationForm::kNfd);
      std::string expected_prefix = prefix;
      EXPECT_EQ(nfd, expected_prefix + c.nfd + " end") << c.input;
    }
  }
}

TEST(Normalization, LeavesNormalizedTextAlone) {
  const std::string text = "Plain ASCII, caf\u00E9, \u4E2D\u6587, \uD55C\uAD6D\uC5B4, \U0001F600";
  std::string s = text;
  normalize_unicode(s, NormalizationForm::kNfc);
  EXPECT_EQ(s, text);
}

TEST(Normalization, IsIdempotent) {
  for (const auto& c : kCases) {
    for (auto form : {NormalizationForm::kNfc, NormalizationForm::kNfd}) {
      std::string once = c.input;
      normalize_unicode(once, form);
      std::string twice = once;
      normalize_unicode(twice, form);
      EXPECT_EQ(once, twice) << c.input;
    }
  }
}
