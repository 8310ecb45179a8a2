// Unicode normalization forms C and D (UAX #15), the `NFC`/`NFD` normalizers of tokenizer.json.
#pragma once

#include <string>

namespace fp8rl::tok {

enum class NormalizationForm { kNfc, kNfd };

// Normalizes valid UTF-8 text in place. Text that is already normalized (the common case) is
// detected by a quick check and left untouched without a copy.
void normalize_unicode(std::string& text, NormalizationForm form);

// The Unicode version of the tables (for messages and docs).
const char* unicode_normalization_version();

}  // namespace fp8rl::tok
