// "Did you mean ...?" for names users type (config keys, flags, reward fields): the candidate
// nearest by edit distance, when it is close enough to be a typo.
#pragma once

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

}  // namespace fp8rl
