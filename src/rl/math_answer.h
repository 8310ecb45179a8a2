// Answers of math completions: the final answer taken from the text, its value as a number,
// and the normalised string form that the answer-match reward compares.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fp8rl {

// The content of the last \boxed{...} whose braces balance (escaped \{ \} do not count), or
// nullopt when there is none. An unclosed last \boxed (a truncated completion) is skipped in
// favour of an earlier closed one.
std::optional<std::string> last_boxed(std::string_view text);

// The text of the last number in `text`: an optional sign ('-' or U+2212 not right after a
// letter, digit or ')'), digits with optional thousands groups ("1,000,000"), an optional
// decimal part, and an optional "/denominator" ("3/4"). nullopt when the text has no digit.
std::optional<std::string> last_number(std::string_view text);

// The final answer of a math completion: the last \boxed{} content, else the last number.
std::optional<std::string> extract_math_answer(std::string_view text);

// The value of `text` when the whole of it is a number, after removing whitespace, '$', '%',
// LaTeX spacing (\, \! \; \ ), \text{...} (units), degrees (^\circ) and a trailing period: decimals
// with or without thousands separators ("1,000" = "1000" = "1000.0" = "1e3"), fractions "3/4" and
// \frac{3}{4} (also \dfrac, \tfrac), each with a sign. nullopt otherwise (and for a zero
// denominator).
std::optional<double> parse_number(std::string_view text);

// Equal within 1e-9 relative to the larger magnitude (exactly equal for zero).
bool numbers_equal(double a, double b);

// Trims, ASCII case-folds, collapses whitespace runs to one space and strips one trailing
// period (after trimming).
std::string normalize_answer(std::string_view text);

}  // namespace fp8rl
