#include "tokenizer/jinja/unicode.h"

#include "tokenizer/unicode.h"

#include <algorithm>

namespace fp8rl::jinja {
namespace {

constexpr char32_t kReplacement = 0xFFFD;

// Decodes one code point at text[i], advancing i; malformed sequences yield U+FFFD for one byte.
char32_t decode_one(std::string_view text, std::size_t& i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int extra = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    extra = 1, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    extra = 2, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    extra = 3, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++i;
    return kReplacement;
  }
  for (int k = 1; k <= extra; ++k) {
    if (i + k >= text.size() || (byte(i + k) & 0xC0) != 0x80) {
      ++i;
      return kReplacement;
    }
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) {
    ++i;
    return kReplacement;
  }
  i += extra + 1;
  return cp;
}

bool in_ranges(const unicode_data::CodeRange* ranges, std::size_t n, char32_t cp) {
  const auto* end = ranges + n;
  const auto* it =
      std::upper_bound(ranges, end, cp, [](char32_t c, const auto& r) { return c < r.begin; });
  return it != ranges && cp < (it - 1)->end;
}

const unicode_data::CaseRow* case_row(char32_t cp) {
  const auto* begin = unicode_data::kCaseRows;
  const auto* end = begin + unicode_data::kCaseRowCount;
  const auto* it =
      std::lower_bound(begin, end, cp, [](const auto& r, char32_t c) { return r.cp < c; });
  return it != end && it->cp == cp ? it : nullptr;
}

enum class CaseKind { upper, lower, title };

void append_mapped(std::string& out, char32_t cp, CaseKind kind) {
  if (cp < 0x80) {
    char c = static_cast<char>(cp);
    if (kind == CaseKind::lower) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    } else if (c >= 'a' && c <= 'z') {
      c = static_cast<char>(c - 'a' + 'A');
    }
    out.push_back(c);
    return;
  }
  const auto* row = case_row(cp);
  const char* mapped = nullptr;
  if (row != nullptr) {
    mapped = kind == CaseKind::upper   ? row->upper
             : kind == CaseKind::lower ? row->lower
                                       : row->title;
  }
  if (mapped != nullptr && mapped[0] != '\0') {
    out += mapped;
  } else {
    utf8_append(out, cp);
  }
}

std::string map_all(std::string_view text, CaseKind kind) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) append_mapped(out, decode_one(text, i), kind);
  return out;
}

}  // namespace

char32_t utf8_next(std::string_view text, std::size_t& i) {
  return decode_one(text, i);
}

std::u32string utf8_decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) out.push_back(decode_one(text, i));
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  tok::append_utf8(out, cp);
}

std::string utf8_encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8_append(out, cp);
  return out;
}

std::size_t utf8_length(std::string_view text) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < text.size();) {
    decode_one(text, i);
    ++n;
  }
  return n;
}

bool py_isspace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool py_isprintable(char32_t cp) {
  if (cp >= 0x20 && cp < 0x7F) return true;
  return !in_ranges(unicode_data::kNonPrintableRanges, unicode_data::kNonPrintableRangeCount, cp);
}

bool py_iscased(char32_t cp) {
  return in_ranges(unicode_data::kCasedRanges, unicode_data::kCasedRangeCount, cp);
}

bool py_iscase(std::string_view text, bool upper) {
  bool any_cased = false;
  for (std::size_t i = 0; i < text.size();) {
    const char32_t cp = decode_one(text, i);
    if (!py_iscased(cp)) continue;
    std::string one;
    utf8_append(one, cp);
    if ((upper ? py_upper(one) : py_lower(one)) != one) return false;
    any_cased = true;
  }
  return any_cased;
}

std::string py_upper(std::string_view text) {
  return map_all(text, CaseKind::upper);
}
std::string py_lower(std::string_view text) {
  return map_all(text, CaseKind::lower);
}

std::string py_title(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool previous_is_cased = false;
  for (std::size_t i = 0; i < text.size();) {
    const char32_t cp = decode_one(text, i);
    append_mapped(out, cp, previous_is_cased ? CaseKind::lower : CaseKind::title);
    previous_is_cased = py_iscased(cp);
  }
  return out;
}

std::string py_capitalize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool first = true;
  for (std::size_t i = 0; i < text.size();) {
    append_mapped(out, decode_one(text, i), first ? CaseKind::title : CaseKind::lower);
    first = false;
  }
  return out;
}

std::string py_strip(std::string_view text, const std::string* chars, StripSide side) {
  const std::u32string cps = utf8_decode(text);
  const std::u32string set = chars != nullptr ? utf8_decode(*chars) : std::u32string();
  const auto strippable = [&](char32_t cp) {
    return chars == nullptr ? py_isspace(cp) : set.find(cp) != std::u32string::npos;
  };
  std::size_t begin = 0, end = cps.size();
  if (side != StripSide::right) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (side != StripSide::left) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  return utf8_encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> py_splitlines(std::string_view text) {
  const std::u32string cps = utf8_decode(text);
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                          c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) continue;
    lines.push_back(utf8_encode(std::u32string_view(cps).substr(start, i - start)));
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(utf8_encode(std::u32string_view(cps).substr(start)));
  return lines;
}

}  // namespace fp8rl::jinja
