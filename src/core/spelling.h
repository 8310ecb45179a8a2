// The spelling of what users read and type: "did you mean ...?" for names (config keys, flags,
// reward fields), the candidate nearest by edit distance when it is close enough to be a typo;
// counts with their nouns in the right number.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace fp8rl {

// Levenshtein distance (insertions, deletions, substitutions of bytes).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `name`, or nullopt when even it is more than
// max(2, |name| / 3) edits away (a typo is a few edits; further away it is noise).
std::optional<std::string> nearest_spelling(std::string_view name,
                                            std::span<const std::string> candidates);

// A count with its noun in the number it takes: "1 step", "3 steps" (`plural` empty: the
// singular with an s).
std::string counted(int64_t n, std::string_view singular, std::string_view plural = {});

}  // namespace fp8rl
