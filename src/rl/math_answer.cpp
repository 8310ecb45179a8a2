#include "rl/math_answer.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace fp8rl {

namespace {

constexpr std::string_view kUnicodeMinus = "\xE2\x88\x92";  // U+2212

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alnum(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Index one past the '}' that closes the '{' at `open`, or npos when it never closes.
size_t closing_brace(std::string_view text, size_t open) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      ++i;  // \{ and \} are literal braces
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// Digits [i, end) with thousands groups: returns the end of the integer part at `i`.
size_t scan_integer(std::string_view t, size_t i) {
  const size_t start = i;
  while (i < t.size() && is_digit(t[i])) ++i;
  if (i - start > 3) return i;
  // ",ddd" groups, each exactly three digits and not followed by another digit.
  size_t end = i;
  while (end + 3 < t.size() && t[end] == ',' && is_digit(t[end + 1]) && is_digit(t[end + 2]) &&
         is_digit(t[end + 3]) && (end + 4 >= t.size() || !is_digit(t[end + 4]))) {
    end += 4;
  }
  return end;
}

// An unsigned decimal at `i` (integer part, optional ".digits"); returns its end.
size_t scan_decimal(std::string_view t, size_t i) {
  i = scan_integer(t, i);
  if (i + 1 < t.size() && t[i] == '.' && is_digit(t[i + 1])) {
    ++i;
    while (i < t.size() && is_digit(t[i])) ++i;
  }
  return i;
}

// "12", "1,000", "1000.5", ".5", "1e3", "-2" as a whole: the value, or nullopt.
std::optional<double> parse_decimal(std::string_view s) {
  std::string plain;
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return std::nullopt;
  // Thousands separators must form proper groups: "1,000" yes, "1,00" no.
  if (s.find(',') != std::string_view::npos) {
    const size_t int_end = scan_integer(s, 0);
    const std::string_view int_part = s.substr(0, int_end);
    if (int_part.find(',') == std::string_view::npos) return std::nullopt;
    for (char c : int_part) {
      if (c != ',') plain += c;
    }
    s.remove_prefix(int_end);
    if (s.find(',') != std::string_view::npos) return std::nullopt;
  }
  plain += s;
  if (plain.empty() || !(is_digit(plain[0]) || plain[0] == '.')) return std::nullopt;
  double value = 0.0;
  const char* first = plain.data();
  const char* last = plain.data() + plain.size();
  const auto [ptr, ec] = std::from_chars(first, last, value, std::chars_format::general);
  if (ec != std::errc() || ptr != last || !std::isfinite(value)) return std::nullopt;
  return negative ? -value : value;
}

// Removes every "\text{...}" / "\mbox{...}" / "\mathrm{...}" group (units, words).
std::string drop_text_groups(std::string s) {
  for (std::string_view command : {"\\text{", "\\mbox{", "\\mathrm{"}) {
    for (size_t at = s.find(command); at != std::string::npos; at = s.find(command, at)) {
      const size_t end = closing_brace(s, at + command.size() - 1);
      if (end == std::string::npos) break;
      s.erase(at, end - at);
    }
  }
  return s;
}

std::string clean_number_text(std::string_view text) {
  std::string s = drop_text_groups(std::string(text));
  for (std::string_view degrees : {"^{\\circ}", "^\\circ"}) {
    for (size_t at = s.find(degrees); at != std::string::npos; at = s.find(degrees, at)) {
      s.erase(at, degrees.size());
    }
  }
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (is_space(c) || c == '$' || c == '%') continue;
    if (c == '\\' && i + 1 < s.size()) {
      const char n = s[i + 1];
      if (n == ',' || n == '!' || n == ';' || n == ' ' || n == '$' || n == '%' || n == ':') {
        ++i;
        continue;
      }
    }
    if (s.compare(i, 3, "{,}") == 0) {  // LaTeX thousands separator "1{,}000"
      out += ',';
      i += 2;
      continue;
    }
    if (s.compare(i, kUnicodeMinus.size(), kUnicodeMinus) == 0) {
      out += '-';
      i += kUnicodeMinus.size() - 1;
      continue;
    }
    out += c;
  }
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

std::optional<double> parse_clean(std::string_view s, int depth) {
  if (s.empty() || depth > 4) return std::nullopt;
  // A sign in front of a fraction.
  if ((s[0] == '-' || s[0] == '+') && s.size() > 1 && !is_digit(s[1]) && s[1] != '.') {
    const auto v = parse_clean(s.substr(1), depth + 1);
    if (!v) return std::nullopt;
    return s[0] == '-' ? -*v : *v;
  }
  // Surrounding braces or parentheses: "{3}", "(3)".
  if ((s.front() == '{' && s.back() == '}' && closing_brace(s, 0) == s.size()) ||
      (s.front() == '(' && s.back() == ')' && s.find_first_of("()", 1) == s.size() - 1)) {
    return parse_clean(s.substr(1, s.size() - 2), depth + 1);
  }
  for (std::string_view frac : {"\\frac", "\\dfrac", "\\tfrac"}) {
    if (!s.starts_with(frac)) continue;
    const size_t num_open = frac.size();
    if (num_open >= s.size() || s[num_open] != '{') return std::nullopt;
    const size_t num_end = closing_brace(s, num_open);
    if (num_end == std::string_view::npos || num_end >= s.size() || s[num_end] != '{') {
      return std::nullopt;
    }
    const size_t den_end = closing_brace(s, num_end);
    if (den_end != s.size()) return std::nullopt;
    const auto num = parse_clean(s.substr(num_open + 1, num_end - num_open - 2), depth + 1);
    const auto den = parse_clean(s.substr(num_end + 1, den_end - num_end - 2), depth + 1);
    if (!num || !den || *den == 0.0) return std::nullopt;
    return *num / *den;
  }
  const size_t slash = s.find('/');
  if (slash != std::string_view::npos) {
    if (s.find('/', slash + 1) != std::string_view::npos) return std::nullopt;
    const auto num = parse_decimal(s.substr(0, slash));
    const auto den = parse_decimal(s.substr(slash + 1));
    if (!num || !den || *den == 0.0) return std::nullopt;
    return *num / *den;
  }
  return parse_decimal(s);
}

}  // namespace

std::optional<std::string> last_boxed(std::string_view text) {
  constexpr std::string_view kBoxed = "\\boxed";
  std::optional<std::string> found;
  for (size_t at = text.find(kBoxed); at != std::string_view::npos;
       at = text.find(kBoxed, at + 1)) {
    size_t open = at + kBoxed.size();
    while (open < text.size() && is_space(text[open])) ++open;
    if (open >= text.size() || text[open] != '{') continue;
    const size_t end = closing_brace(text, open);
    if (end == std::string_view::npos) continue;
    found = std::string(text.substr(open + 1, end - open - 2));
  }
  return found;
}

std::optional<std::string> last_number(std::string_view t) {
  std::optional<std::string> found;
  size_t i = 0;
  while (i < t.size()) {
    const bool starts = is_digit(t[i]) || (t[i] == '.' && i + 1 < t.size() && is_digit(t[i + 1]));
    if (!starts) {
      ++i;
      continue;
    }
    size_t end = scan_decimal(t, i);
    if (end + 1 < t.size() && t[end] == '/' && is_digit(t[end + 1])) {
      end = scan_decimal(t, end + 1);
    }
    // The sign: '-' (or U+2212) not glued to a preceding word, number or bracket.
    std::string sign;
    size_t before = i;
    if (before >= 1 && t[before - 1] == '-') {
      before -= 1;
      sign = "-";
    } else if (before >= kUnicodeMinus.size() &&
               t.substr(before - kUnicodeMinus.size(), kUnicodeMinus.size()) == kUnicodeMinus) {
      before -= kUnicodeMinus.size();
      sign = "-";
    }
    if (!sign.empty() && before > 0 && (is_alnum(t[before - 1]) || t[before - 1] == ')')) {
      sign.clear();
    }
    found = sign + std::string(t.substr(i, end - i));
    i = end;
  }
  return found;
}

std::optional<std::string> extract_math_answer(std::string_view text) {
  if (auto boxed = last_boxed(text)) return boxed;
  return last_number(text);
}

std::optional<double> parse_number(std::string_view text) {
  return parse_clean(clean_number_text(text), 0);
}

bool numbers_equal(double a, double b) {
  if (a == b) return true;
  return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b));
}

std::string normalize_answer(std::string_view text) {
  std::string out;
  bool pending_space = false;
  for (char c : text) {
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
  }
  if (!out.empty() && out.back() == '.') out.pop_back();
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace fp8rl
