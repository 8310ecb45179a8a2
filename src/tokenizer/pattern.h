// The "pattern" object of Split, Replace: {"String": "..."} matches literally,
// {"Regex": "..."} is an Oniguruma regex (see regex.h).
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"

namespace fp8rl::tok {

Regex regex_from_pattern(const Json& pattern, std::string_view where);

// Replaces every match of `regex` in text by `content` (tokenizers' NormalizedString::replace).
std::string replace_all(std::string_view text, const Regex& regex, std::string_view content);

}  // namespace fp8rl::tok
