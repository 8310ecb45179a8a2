#include <gtest/gtest.h>

#include "rl/math_answer.h"

namespace fp8rl {
namespace {

TEST(MathAnswer, LastBoxedTakesTheLastBalancedOne) {
  EXPECT_EQ(last_boxed("a \\boxed{1} b \\boxed{\\frac{3}{4}} c"), "\\frac{3}{4}");
  EXPECT_EQ(last_boxed("\\boxed {x^{2}}"), "x^{2}");
  // An unclosed last \boxed (a truncated completion) falls back to the earlier closed one.
  EXPECT_EQ(last_boxed("\\boxed{7} then \\boxed{8"), "7");
  // Escaped braces do not count.
  EXPECT_EQ(last_boxed("\\boxed{\\{1\\}}"), "\\{1\\}");
  EXPECT_EQ(last_boxed("no box here 12"), std::nullopt);
  EXPECT_EQ(last_boxed("\\boxed 5"), std::nullopt);
}

TEST(MathAnswer, LastNumberReadsSignsGroupsDecimalsFractions) {
  EXPECT_EQ(last_number("I have 3 apples and 12 pears."), "12");
  EXPECT_EQ(last_number("total: $1,000,000 dollars"), "1,000,000");
  EXPECT_EQ(last_number("x = -4.5"), "-4.5");
  EXPECT_EQ(last_number("x = \xE2\x88\x92"
                        "7"),
            "-7");                           // U+2212 minus
  EXPECT_EQ(last_number("pages 3-4"), "4");  // a range, not a negative
  EXPECT_EQ(last_number("so 3/4 of it"), "3/4");
  EXPECT_EQ(last_number("the list 1,2,3"), "3");  // commas that are not thousands groups
  EXPECT_EQ(last_number("1,0000"), "0000");       // "1,000" would be followed by a digit
  EXPECT_EQ(last_number("value .5"), ".5");
  EXPECT_EQ(last_number("no digits"), std::nullopt);
}

TEST(MathAnswer, ParseNumberAcceptsEquivalentSpellings) {
  for (const char* s : {"1000", "1,000", "1000.0", "1{,}000", " $1000. ", "1e3", "\\$1,000",
                        "1000\\text{ dollars}", "(1000)", "{1000}"}) {
    const auto v = parse_number(s);
    ASSERT_TRUE(v.has_value()) << s;
    EXPECT_EQ(*v, 1000.0) << s;
  }
  EXPECT_EQ(parse_number("3/4"), 0.75);
  EXPECT_EQ(parse_number("\\frac{3}{4}"), 0.75);
  EXPECT_EQ(parse_number("\\dfrac{3}{4}"), 0.75);
  EXPECT_EQ(parse_number("-\\frac{3}{4}"), -0.75);
  EXPECT_EQ(parse_number("\\frac{-3}{4}"), -0.75);
  EXPECT_EQ(parse_number("-3/4"), -0.75);
  EXPECT_EQ(parse_number("50\\%"), 50.0);
  EXPECT_EQ(parse_number("90^\\circ"), 90.0);
  EXPECT_EQ(parse_number("90^{\\circ}"), 90.0);
}

TEST(MathAnswer, ParseNumberRejectsNonNumbers) {
  for (const char* s : {"", "abc", "x+1", "1,00", "12,34", "1/0", "\\frac{1}{0}", "1/2/3", "1.2.3",
                        "\\frac{1}", "3 apples", "--"}) {
    EXPECT_FALSE(parse_number(s).has_value()) << s;
  }
}

TEST(MathAnswer, NumbersEqualIsRelative) {
  EXPECT_TRUE(numbers_equal(0.75, 3.0 / 4.0));
  EXPECT_TRUE(numbers_equal(1e12, 1e12 * (1 + 5e-10)));
  EXPECT_FALSE(numbers_equal(1e12, 1e12 * (1 + 5e-9)));
  EXPECT_TRUE(numbers_equal(0.0, 0.0));
  EXPECT_FALSE(numbers_equal(0.0, 1e-300));
  EXPECT_FALSE(numbers_equal(1.0, -1.0));
}

TEST(MathAnswer, NormalizeAnswer) {
  EXPECT_EQ(normalize_answer("  The  Answer\tIS\n Paris. "), "the answer is paris");
  EXPECT_EQ(normalize_answer("Paris"), "paris");
  EXPECT_EQ(normalize_answer("a.."), "a.");  // one trailing period only
  EXPECT_EQ(normalize_answer(""), "");
  EXPECT_NE(normalize_answer("Paris"), normalize_answer("Pari s"));
}

}  // namespace
}  // namespace fp8rl
