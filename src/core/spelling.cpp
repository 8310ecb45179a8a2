#include "core/spelling.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace fp8rl {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest_spelling(std::string_view name,
                                            std::span<const std::string> candidates) {
  const std::string* best = nullptr;
  size_t best_distance = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(name, c);
    if (d < best_distance) best_distance = d, best = &c;
  }
  if (best == nullptr || best_distance > std::max<size_t>(2, name.size() / 3)) return std::nullopt;
  return *best;
}

std::string counted(int64_t n, std::string_view singular, std::string_view plural) {
  std::string noun(singular);
  if (n != 1 && n != -1) noun = plural.empty() ? noun + "s" : std::string(plural);
  return std::to_string(n) + " " + noun;
}

}  // namespace fp8rl
