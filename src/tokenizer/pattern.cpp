#include "tokenizer/pattern.h"

#include "tokenizer/unicode.h"

namespace fp8rl::tok {

Regex regex_from_pattern(const Json& pattern, std::string_view where) {
  CHECK(pattern.is_object(), "{}: 'pattern' must be an object with String or Regex", where);
  if (auto it = pattern.find("String"); it != pattern.end() && it->is_string()) {
    return Regex::literal(it->get<std::string>());
  }
  if (auto it = pattern.find("Regex"); it != pattern.end() && it->is_string()) {
    return Regex::from_oniguruma(it->get<std::string>());
  }
  RAISE("{}: 'pattern' must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", where,
        json_excerpt(pattern));
}

std::string replace_all(std::string_view text, const Regex& regex, std::string_view content) {
  std::string out;
  size_t copied = 0;
  regex.for_each_match(text, [&](size_t begin, size_t end) {
    out.append(text.substr(copied, begin - copied));
    out.append(content);
    copied = end;
  });
  if (copied == 0 && out.empty()) return std::string(text);
  out.append(text.substr(copied));
  return out;
}

std::string json_char(const Json& j, std::string_view key, std::string_view where) {
  const std::string s = json_string(j, key, where);
  size_t i = 0;
  CHECK(!s.empty(), "{}: field '{}' must be one character, got an empty string", where, key);
  next_code_point(s, i);
  CHECK(i == s.size(), "{}: field '{}' must be one character, got '{}'", where, key, s);
  return s;
}

}  // namespace fp8rl::tok
