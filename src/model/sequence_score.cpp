#include "model/sequence_score.h"

#include <algorithm>
#include <optional>

#include "core/check.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace fp8rl {

int64_t pooled_position(std::span<const int32_t> ids, std::optional<int64_t> pad_token_id) {
  CHECK(!ids.empty(), "sequence score: an empty sequence has no position to score");
  if (!pad_token_id) return int64_t(ids.size()) - 1;
  for (int64_t i = int64_t(ids.size()) - 1; i >= 0; --i)
    if (ids[size_t(i)] != *pad_token_id) return i;
  return 0;
}

ScorePlan plan_scoring(Context& ctx, const Model& model, const LoraAdapter* adapter,
                       const LinearWeight* head, const ScoreShape& shape) {
  CHECK(shape.sequences > 0 && shape.max_length > 0 && shape.max_batch_tokens > 0,
        "sequence score plan: sequences {}, max_length {} and max_batch_tokens {} must be "
        "positive",
        shape.sequences, shape.max_length, shape.max_batch_tokens);
  const ModelConfig& c = model.config();
  // A batch packs sequences while they fit max_batch_tokens; its first always runs.
  const int64_t tokens = std::min(shape.sequences * shape.max_length,
                                  std::max(shape.max_batch_tokens, shape.max_length));
  const int64_t seqs = std::min(shape.sequences, tokens);
  ScorePlan p;
  p.kv_blocks = (tokens + (kKvBlockSize - 1) * seqs + kKvBlockSize - 1) / kKvBlockSize;
  p.kv_bytes = size_t(p.kv_blocks) * KvPool::block_bytes(c, ctx);
  const KvPool probe(c, 1, ctx);  // the plan does not depend on its size
  p.scratch_bytes = measure_forward_scratch(
      ctx, model, adapter, probe, {tokens, seqs, seqs, std::min(tokens, shape.max_length)}, head);
  return p;
}

std::vector<float> score_sequences(Context& ctx, const Model& model, const LoraAdapter* adapter,
                                   const LinearWeight* head,
                                   std::span<const std::vector<int32_t>> sequences,
                                   const ScoreOptions& options) {
  const ModelConfig& c = model.config();
  CHECK(head != nullptr || c.sequence_classification,
        "sequence score: '{}' ({}) has no score head and none was given", model.dir(),
        c.architecture);
  const int64_t width = head != nullptr ? head->weight.dim(0) : c.output_size();
  CHECK(options.max_batch_tokens > 0, "sequence score: max_batch_tokens must be positive");
  const int64_t b = int64_t(sequences.size());
  std::vector<float> scores(static_cast<size_t>(b * width));
  // Each sequence cut after its pooled position.
  std::vector<int64_t> lengths(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    const std::vector<int32_t>& ids = sequences[size_t(i)];
    lengths[size_t(i)] = pooled_position(ids, options.pad_token_id) + 1;
    for (int64_t j = 0; j < lengths[size_t(i)]; ++j)
      CHECK(ids[size_t(j)] >= 0 && ids[size_t(j)] < c.vocab_size,
            "sequence score: token id {} of sequence {} is outside the vocabulary of '{}' ({} "
            "tokens)",
            ids[size_t(j)], i, model.dir(), c.vocab_size);
    check_context(c, lengths[size_t(i)], fmt::format("sequence {} to score", i));
  }
  for (int64_t first = 0; first < b;) {
    int64_t last = first + 1, tokens = lengths[size_t(first)], blocks = 0;
    while (last < b && tokens + lengths[size_t(last)] <= options.max_batch_tokens)
      tokens += lengths[size_t(last++)];
    for (int64_t i = first; i < last; ++i)
      blocks += (lengths[size_t(i)] + kKvBlockSize - 1) / kKvBlockSize;
    std::optional<KvPool> pool;
    if (options.region != nullptr)
      pool.emplace(
          c, blocks, ctx, KvDType::activation,
          options.region->acquire(options.holder, size_t(blocks) * KvPool::block_bytes(c, ctx)));
    else
      pool.emplace(c, blocks, ctx);
    std::vector<KvCache> caches;
    std::vector<std::vector<int32_t>> positions;
    caches.reserve(size_t(last - first));
    positions.reserve(size_t(last - first));
    std::vector<SequenceInput> batch;
    for (int64_t i = first; i < last; ++i) {
      const int64_t n = lengths[size_t(i)];
      caches.emplace_back(*pool, n);
      positions.emplace_back(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) positions.back()[size_t(j)] = int32_t(j);
      batch.push_back({std::span<const int32_t>(sequences[size_t(i)].data(), size_t(n)),
                       positions.back(), &caches.back()});
    }
    const TensorView out(scores.data() + first * width, DType::f32, {last - first, width});
    forward(ctx, model, adapter, batch, LogitRows::last, out, head);
    first = last;
  }
  return scores;
}

}  // namespace fp8rl
