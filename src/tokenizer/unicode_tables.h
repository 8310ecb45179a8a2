// Unicode character data for NFC/NFD normalization, generated into unicode_tables.cpp by
// tools/peers/gen_unicode_tables.py. Every table is sorted for binary search.
#pragma once

#include <cstdint>
#include <span>

namespace fp8rl::tok::unicode_tables {

struct CodePointRange {
  char32_t first, last;
  uint8_t value;
};
struct Decomposition {  // one level; second == 0 for a singleton
  char32_t code_point, first, second;
};
struct Composition {  // primary composites only (composition exclusions left out)
  char32_t first, second, composite;
};

// kQuickCheck values: the forms under which a code point is not a normalization boundary.
inline constexpr uint8_t kUnsafeNfc = 1;
inline constexpr uint8_t kUnsafeNfd = 2;

extern const char kUnicodeVersion[];
extern const char32_t kFirstUnsafeNfc;  // every code point below is a boundary for NFC
extern const char32_t kFirstUnsafeNfd;
extern const std::span<const CodePointRange> kCombiningClasses;
extern const std::span<const Decomposition> kDecompositions;
extern const std::span<const Composition> kCompositions;
extern const std::span<const CodePointRange> kQuickCheck;

}  // namespace fp8rl::tok::unicode_tables
