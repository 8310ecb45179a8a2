// GPT-2's reversible byte <-> character map (tokenizers' bytes_char): every byte becomes one
// printable code point, so byte-level BPE vocabularies are plain strings. Printable Latin-1
// bytes map to themselves; the other 68 bytes map to U+0100.. in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace fp8rl::tok {

class ByteLevelAlphabet {
 public:
  constexpr ByteLevelAlphabet() {
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      char_of_[b] = cp;
      // Every mapped code point is below U+0800: one or two UTF-8 bytes.
      Utf8& u = utf8_of_[b];
      if (cp < 0x80) {
        u.length = 1;
        u.bytes[0] = static_cast<char>(cp);
      } else {
        u.length = 2;
        u.bytes[0] = static_cast<char>(0xC0 | (cp >> 6));
        u.bytes[1] = static_cast<char>(0x80 | (cp & 0x3F));
      }
      byte_of_[cp] = static_cast<int16_t>(b);
    }
  }

  constexpr char32_t char_of(uint8_t byte) const { return char_of_[byte]; }
  std::string_view utf8_of(uint8_t byte) const {
    return {utf8_of_[byte].bytes, static_cast<size_t>(utf8_of_[byte].length)};
  }
  // The byte a code point stands for, or -1 when it is not in the alphabet.
  constexpr int byte_of(char32_t cp) const { return cp < kSpan ? byte_of_[cp] : -1; }

 private:
  static constexpr char32_t kSpan = 0x144;  // the 68 remapped bytes end at U+0143
  struct Utf8 {
    char bytes[2] = {};
    int8_t length = 0;
  };
  std::array<char32_t, 256> char_of_{};
  std::array<Utf8, 256> utf8_of_{};
  std::array<int16_t, kSpan> byte_of_ = [] {
    std::array<int16_t, kSpan> a{};
    a.fill(-1);
    return a;
  }();
};

inline constexpr ByteLevelAlphabet kByteLevelAlphabet{};

}  // namespace fp8rl::tok
