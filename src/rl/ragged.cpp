#include "rl/ragged.h"

#include "core/check.h"

namespace fp8rl {

int64_t check_ragged(std::span<const int64_t> offsets, std::span<const uint8_t> mask,
                     std::string_view what) {
  CHECK(!offsets.empty() && offsets[0] == 0, "{}: offsets must start with 0", what);
  for (size_t i = 1; i < offsets.size(); ++i) {
    CHECK(offsets[i] >= offsets[i - 1], "{}: offsets decrease at {} ({} < {})", what, i, offsets[i],
          offsets[i - 1]);
  }
  const int64_t n = offsets.back();
  CHECK(int64_t(mask.size()) == n, "{}: mask has {} values for {} tokens", what, mask.size(), n);
  for (size_t t = 0; t < mask.size(); ++t) {
    CHECK(mask[t] <= 1, "{}: mask[{}] = {} is not 0 or 1", what, t, int(mask[t]));
  }
  return n;
}

}  // namespace fp8rl
