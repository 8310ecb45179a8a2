#include "train/sft_batch.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/rng.h"

namespace fp8rl {
namespace {

// Fisher-Yates driven by the counter-based generator: draw i is a pure function of
// (seed, epoch, i), so the permutation depends on nothing else.
std::vector<size_t> epoch_order(size_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  if (!shuffle) return order;
  const uint64_t key = rng_key(seed, uint64_t(epoch));
  for (size_t i = n; i > 1; --i) {
    const uint64_t r = splitmix64(splitmix64(key) ^ uint64_t(i));
    // Lemire's multiply-shift: r scaled to [0, i); the bias (i / 2^64) is negligible.
    const size_t j = size_t((static_cast<unsigned __int128>(r) * i) >> 64);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace

std::vector<std::vector<size_t>> plan_epoch(std::span<const SftExample> examples,
                                            int64_t batch_size, int64_t max_tokens, uint64_t seed,
                                            int64_t epoch, bool shuffle) {
  CHECK(batch_size >= 1, "the batch size must be at least 1, got {}", batch_size);
  CHECK(max_tokens >= 1, "the token budget of a batch must be at least 1, got {}", max_tokens);
  CHECK(epoch >= 0, "the epoch must not be negative, got {}", epoch);
  std::vector<std::vector<size_t>> batches;
  std::vector<size_t> current;
  int64_t tokens = 0;
  for (const size_t i : epoch_order(examples.size(), seed, epoch, shuffle)) {
    const auto n = int64_t(examples[i].input_ids.size());
    if (!current.empty() && (int64_t(current.size()) == batch_size || tokens + n > max_tokens)) {
      batches.push_back(std::move(current));
      current.clear();
      tokens = 0;
    }
    current.push_back(i);
    tokens += n;
  }
  if (!current.empty()) batches.push_back(std::move(current));
  return batches;
}

int64_t max_batch_tokens(std::span<const SftExample> examples, int64_t batch_size,
                         int64_t max_tokens) {
  CHECK(batch_size >= 1 && max_tokens >= 1,
        "the batch size and token budget must be at least 1, got {} and {}", batch_size,
        max_tokens);
  std::vector<int64_t> lengths;
  for (const SftExample& ex : examples) lengths.push_back(int64_t(ex.input_ids.size()));
  const size_t k = std::min(lengths.size(), size_t(batch_size));
  std::partial_sort(lengths.begin(), lengths.begin() + ptrdiff_t(k), lengths.end(),
                    std::greater<>());
  int64_t longest_k = 0;
  for (size_t i = 0; i < k; ++i) longest_k += lengths[i];
  const int64_t longest = k > 0 ? lengths[0] : 0;
  return std::max(longest, std::min(max_tokens, longest_k));
}

SftBatch make_batch(std::span<const SftExample> examples, std::span<const size_t> indices) {
  CHECK(!indices.empty(), "a batch needs at least one example");
  SftBatch b;
  b.cu_seqlens.push_back(0);
  for (const size_t i : indices) {
    CHECK(i < examples.size(), "example {} of a batch is out of range ({} examples)", i,
          examples.size());
    const SftExample& ex = examples[i];
    const size_t n = ex.input_ids.size();
    CHECK(n >= 1 && ex.loss_mask.size() == n,
          "example of line {}: {} tokens and {} mask entries (need equal and at least 1)", ex.line,
          n, ex.loss_mask.size());
    for (size_t t = 0; t < n; ++t) {
      b.input_ids.push_back(ex.input_ids[t]);
      b.positions.push_back(int32_t(t));
      const bool trains = t + 1 < n && ex.loss_mask[t + 1] != 0;
      b.targets.push_back(trains ? ex.input_ids[t + 1] : kIgnoreTarget);
      b.num_targets += trains;
    }
    b.cu_seqlens.push_back(int64_t(b.input_ids.size()));
  }
  return b;
}

}  // namespace fp8rl
