// Characters to add to PCRE2's \p{...} classes so that they mean what they mean in Unicode 16.0,
// the Unicode of the Oniguruma that Hugging Face tokenizers uses (our PCRE2 knows Unicode 14.0:
// without these, a letter of a script added since then would not be \p{L}). Generated into
// unicode_properties.cpp by tools/peers/gen_unicode_properties.mjs.
#pragma once

#include <span>

namespace fp8rl::tok {

struct PropertyRange {
  char32_t first, last;
};

struct PropertyAddition {
  const char* name;  // a general category ("L", "Nd", ...), "Alphabetic", or a script ("Han")
  std::span<const PropertyRange> ranges;
};

std::span<const PropertyAddition> unicode_property_additions();

// Every character assigned in Unicode 16.0 but not in PCRE2's Unicode 14.0, sorted: text with
// none of them matches the same with or without the additions.
std::span<const PropertyRange> unicode_newer_assigned();

}  // namespace fp8rl::tok
