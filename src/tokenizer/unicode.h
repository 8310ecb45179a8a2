// UTF-8 helpers shared by every tokenizer stage. Text inside the tokenizer is always valid
// UTF-8: input is checked once at the boundary (check_utf8), so the hot loops decode without
// re-validating.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fp8rl::tok {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Number of bytes of the sequence a lead byte starts (1 for ASCII and for invalid leads).
inline int utf8_sequence_length(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point at s[i] of valid UTF-8 and advances i past it.
inline char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  const int n = utf8_sequence_length(b0);
  char32_t cp = b0 & (0x7F >> n);
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append_utf8(std::string& out, char32_t cp);

// Byte offset of the first ill-formed UTF-8 sequence (overlongs, surrogates and code points
// above U+10FFFF included), or npos when the text is valid.
size_t find_invalid_utf8(std::string_view bytes);

// Throws fp8rl::Error naming `what` and the byte offset when bytes are not valid UTF-8.
void check_utf8(std::string_view bytes, std::string_view what);

// Appends bytes with every ill-formed subsequence replaced by U+FFFD, one per maximal subpart
// (the practice of the Unicode standard, WHATWG TextDecoder and Rust's from_utf8_lossy).
void append_utf8_lossy(std::string& out, std::string_view bytes);

// Length of the trailing bytes that form a proper prefix of a valid sequence (0 to 3): text
// that may still complete when more bytes arrive.
size_t incomplete_utf8_suffix(std::string_view bytes);

// Unicode White_Space, the set Rust's char::is_whitespace and Oniguruma's \s use.
bool is_white_space(char32_t cp);

}  // namespace fp8rl::tok
