// The slice of Python's str semantics that chat templates reach: UTF-8 <-> code points, Python's
// whitespace (str.isspace / str.strip / str.split), printable characters (repr), full case
// mappings (upper, lower, title, capitalize) and str.splitlines. Text is UTF-8 everywhere;
// invalid UTF-8 bytes decode to U+FFFD so that no input can make an index run past the text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fp8rl::jinja {

// The code point at text[i], advancing i past it (U+FFFD and one byte for malformed input).
char32_t utf8_next(std::string_view text, std::size_t& i);
// Code points of a UTF-8 string.
std::u32string utf8_decode(std::string_view text);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(std::u32string_view cps);
// Number of code points (Python len()).
std::size_t utf8_length(std::string_view text);

bool py_isspace(char32_t cp);
bool py_isprintable(char32_t cp);
bool py_iscased(char32_t cp);

// str.isupper() (upper) / str.islower(): a cased character exists and all map to themselves.
bool py_iscase(std::string_view text, bool upper);

std::string py_upper(std::string_view text);
std::string py_lower(std::string_view text);
std::string py_title(std::string_view text);       // str.title()
std::string py_capitalize(std::string_view text);  // str.capitalize()

// str.strip/lstrip/rstrip: with chars == nullptr, Python whitespace; else any of chars' code
// points.
enum class StripSide { both, left, right };
std::string py_strip(std::string_view text, const std::string* chars, StripSide side);

// str.splitlines() (without keepends).
std::vector<std::string> py_splitlines(std::string_view text);

namespace unicode_data {
struct CaseRow {
  char32_t cp;
  const char* upper;  // "" when the code point maps to itself
  const char* lower;
  const char* title;
};
struct CodeRange {
  char32_t begin, end;  // [begin, end)
};
extern const CaseRow kCaseRows[];
extern const std::size_t kCaseRowCount;
extern const CodeRange kCasedRanges[];
extern const std::size_t kCasedRangeCount;
extern const CodeRange kNonPrintableRanges[];
extern const std::size_t kNonPrintableRangeCount;
}  // namespace unicode_data

}  // namespace fp8rl::jinja
