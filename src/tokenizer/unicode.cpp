#include "tokenizer/unicode.h"

#include "core/check.h"

namespace fp8rl::tok {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the valid sequence at bytes[i] (1-4), or 0 with `maximal_subpart` set to the
// number of bytes that form the longest prefix of some valid sequence (at least 1).
// Table 3-7 of the Unicode standard: the second byte's range depends on the lead.
int valid_sequence_at(std::string_view bytes, size_t i, size_t& maximal_subpart) {
  const auto b0 = static_cast<uint8_t>(bytes[i]);
  maximal_subpart = 1;
  if (b0 < 0x80) return 1;
  int n;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= bytes.size()) return 0;
    const auto b = static_cast<uint8_t>(bytes[i + k]);
    if (b < lo || b > hi) return 0;
    lo = 0x80;
    hi = 0xBF;
    maximal_subpart = k + 1;
  }
  return n;
}

}  // namespace

size_t find_invalid_utf8(std::string_view bytes) {
  size_t i = 0;
  const size_t n = bytes.size();
  while (i < n) {
    // ASCII runs dominate real text: skip them eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      __builtin_memcpy(&word, bytes.data() + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t subpart;
    const int len = valid_sequence_at(bytes, i, subpart);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view bytes, std::string_view what) {
  const size_t bad = find_invalid_utf8(bytes);
  if (bad == std::string_view::npos) return;
  RAISE("{} is not valid UTF-8: ill-formed byte 0x{:02X} at byte offset {}", what,
        static_cast<uint8_t>(bytes[bad]), bad);
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  size_t i = 0;
  size_t clean_from = 0;
  while (i < bytes.size()) {
    size_t subpart;
    const int len = valid_sequence_at(bytes, i, subpart);
    if (len > 0) {
      i += len;
      continue;
    }
    out.append(bytes.substr(clean_from, i - clean_from));
    append_utf8(out, kReplacementChar);
    i += subpart;
    clean_from = i;
  }
  out.append(bytes.substr(clean_from));
}

size_t incomplete_utf8_suffix(std::string_view bytes) {
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    const auto b = static_cast<uint8_t>(bytes[start]);
    if (b >= 0x80 && b < 0xC0) continue;  // continuation byte: look further back
    if (b < 0xC2 || b > 0xF4) return 0;   // ASCII or a byte that never starts a sequence
    size_t subpart;
    const int len = valid_sequence_at(bytes, start, subpart);
    // Incomplete: not valid yet, but everything up to the end is a valid prefix.
    return (len == 0 && subpart == back && utf8_sequence_length(b) > static_cast<int>(back)) ? back
                                                                                             : 0;
  }
  return 0;
}

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace fp8rl::tok
