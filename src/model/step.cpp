#include "model/step.h"

#include <algorithm>

namespace fp8rl {

void StepInput::add_sequence(std::span<const int32_t> tokens, int64_t first_position,
                             std::span<const int32_t> block_table, int64_t block_size,
                             Logits logits) {
  const int64_t s = num_seqs(), n = int64_t(tokens.size());
  CHECK(n > 0, "step: sequence {} has no new tokens", s);
  CHECK(first_position >= 0, "step: sequence {} starts at position {}", s, first_position);
  const int64_t context = first_position + n;
  CHECK(context <= int64_t(block_table.size()) * block_size,
        "step: sequence {} reaches position {} but its {} blocks hold {} slots", s, context - 1,
        block_table.size(), int64_t(block_table.size()) * block_size);
  const int64_t row0 = num_tokens();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = first_position + i;
    ids.push_back(tokens[size_t(i)]);
    positions.push_back(int32_t(p));
    slot_mapping.push_back(
        int32_t(block_table[size_t(p / block_size)] * block_size + p % block_size));
  }
  if (logits == Logits::all)
    for (int64_t i = 0; i < n; ++i) logit_rows.push_back(int32_t(row0 + i));
  else if (logits == Logits::last)
    logit_rows.push_back(int32_t(row0 + n - 1));
  cu_q.push_back(int32_t(row0 + n));
  context_lens.push_back(int32_t(context));
  table_ids_.insert(table_ids_.end(), block_table.begin(), block_table.end());
  table_ends_.push_back(table_ids_.size());
  max_query_len = std::max(max_query_len, n);
  max_context_len = std::max(max_context_len, context);
}

void StepInput::add_padding_sequence(int32_t null_block) {
  const int64_t row = num_tokens();
  ids.push_back(0);
  positions.push_back(0);
  slot_mapping.push_back(-1);
  logit_rows.push_back(int32_t(row));
  cu_q.push_back(int32_t(row + 1));
  context_lens.push_back(1);
  table_ids_.push_back(null_block);
  table_ends_.push_back(table_ids_.size());
  max_query_len = std::max<int64_t>(max_query_len, 1);
  max_context_len = std::max<int64_t>(max_context_len, 1);
}

void StepInput::pad_to_width(int64_t width, int64_t block_size) {
  min_width_ = std::max(min_width_, width);
  max_context_len = std::max(max_context_len, width * block_size);
}

void StepInput::pack_block_tables() {
  if (table_ends_.empty()) return;  // packed already, or built directly
  blocks_per_seq = min_width_;
  for (size_t s = 0, begin = 0; s < table_ends_.size(); begin = table_ends_[s++])
    blocks_per_seq = std::max(blocks_per_seq, int64_t(table_ends_[s] - begin));
  block_tables.assign(size_t(num_seqs() * blocks_per_seq), 0);
  for (size_t s = 0, begin = 0; s < table_ends_.size(); begin = table_ends_[s++])
    std::copy(table_ids_.begin() + long(begin), table_ids_.begin() + long(table_ends_[s]),
              block_tables.begin() + long(s) * blocks_per_seq);
  table_ids_.clear();
  table_ends_.clear();
}

void StepInput::validate(const ModelConfig& c, int64_t pool_blocks, int64_t block_size) const {
  CHECK(num_tokens() > 0 && num_seqs() > 0, "step: empty batch");
  for (int64_t t = 0; t < num_tokens(); ++t) {
    const int32_t id = ids[size_t(t)];
    CHECK(id >= 0 && id < c.vocab_size, "token id {} is outside the vocabulary [0, {})", id,
          c.vocab_size);
    CHECK(positions[size_t(t)] < c.max_context, "position {} is past the model's context: {}",
          positions[size_t(t)], context_description(c));
    CHECK(slot_mapping[size_t(t)] >= -1 && slot_mapping[size_t(t)] < pool_blocks * block_size,
          "step: slot {} is outside the KV pool of {} blocks", slot_mapping[size_t(t)],
          pool_blocks);
  }
  for (int32_t r : logit_rows)
    CHECK(r >= 0 && r < num_tokens(), "step: logit row {} outside [0, {})", r, num_tokens());
  for (int32_t b : block_tables)
    CHECK(b >= 0 && b < pool_blocks, "step: block {} is outside the KV pool of {} blocks", b,
          pool_blocks);
}

StepInput step_of_shape(const StepShape& shape, int64_t block_size) {
  StepInput in;
  const int64_t seqs = std::max<int64_t>(1, std::min(shape.seqs, shape.tokens));
  const int64_t first = shape.tokens - (seqs - 1);
  const int64_t context = std::max(shape.max_context, first);
  const std::vector<int32_t> table(size_t((context + block_size - 1) / block_size), 0);
  const std::vector<int32_t> ids(size_t(first), 0);
  int64_t rows_left = shape.logit_rows;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t n = s == 0 ? first : 1;
    const auto logits = rows_left >= n  ? StepInput::Logits::all
                        : rows_left > 0 ? StepInput::Logits::last
                                        : StepInput::Logits::none;
    rows_left -= logits == StepInput::Logits::all ? n : logits == StepInput::Logits::last ? 1 : 0;
    in.add_sequence({ids.data(), size_t(n)}, context - n, table, block_size, logits);
  }
  return in;
}

int64_t step_elements(const StepInput& in) {
  const int64_t t = in.num_tokens(), s = in.num_seqs();
  const int64_t tables = std::max<int64_t>(int64_t(in.block_tables.size()), s * in.blocks_per_seq);
  return 3 * t + (s + 1) + s + tables + in.num_logit_rows() + 7 * 16 +  // 7 parts, 16-aligned
         (in.has_prefixes ? shared_prefix_elements(s) : 0);
}

int64_t shared_prefix_elements(int64_t seqs) {
  return (seqs / 2 + 1) + seqs + seqs / 2 + seqs + 4 * 16;  // 4 parts, 16-aligned
}

StepBatch upload_step(Context& ctx, StepInput& in, const TensorView& storage,
                      const TensorView& staging) {
  in.pack_block_tables();
  const int64_t need = step_elements(in);
  CHECK(storage.dtype == DType::i32 && storage.rank() == 1 && storage.dim(0) >= need &&
            storage.device == ctx.device,
        "step storage: need {} i32 on {}, got {} {} on {}", need, device_name(ctx.device),
        dtype_name(storage.dtype), storage.shape.str(), device_name(storage.device));
  CHECK(staging.empty() || (staging.dtype == DType::i32 && staging.rank() == 1 &&
                            staging.dim(0) >= need && staging.device == Device::cpu),
        "step staging: need {} i32 on the host, got {} {}", need, dtype_name(staging.dtype),
        staging.shape.str());
  // One host buffer, one transfer; each part starts 16 elements (64 bytes) aligned.
  std::vector<int32_t> own;
  if (staging.empty()) own.resize(size_t(need));
  int32_t* host = staging.empty() ? own.data() : staging.ptr<int32_t>();
  int64_t used = 0;
  StepBatch b;
  auto part = [&](const std::vector<int32_t>& v, Shape shape) {
    const int64_t off = (used + 15) / 16 * 16;
    std::fill(host + used, host + off, 0);
    std::copy(v.begin(), v.end(), host + off);
    used = off + int64_t(v.size());
    return TensorView(storage.ptr<int32_t>() + off, DType::i32, shape, storage.device);
  };
  const int64_t t = in.num_tokens(), s = in.num_seqs();
  b.ids = part(in.ids, {t});
  b.positions = part(in.positions, {t});
  b.slot_mapping = part(in.slot_mapping, {t});
  b.logit_rows = part(in.logit_rows, {in.num_logit_rows()});
  b.attn.cu_q = part(in.cu_q, {s + 1});
  b.attn.context_lens = part(in.context_lens, {s});
  b.attn.block_tables = part(in.block_tables, {s, in.blocks_per_seq});
  b.attn.num_seqs = s;
  b.attn.max_query_len = in.max_query_len;
  b.attn.max_context_len = in.max_context_len;
  if (in.has_prefixes) {
    const int64_t groups = s / 2;
    CHECK(int64_t(in.prefix_cu_members.size()) == groups + 1 &&
              int64_t(in.prefix_members.size()) == s && int64_t(in.prefix_lens.size()) == groups &&
              int64_t(in.prefix_len_of_seq.size()) == s,
          "step: a shared-prefix description of {} groups, {} members, {} lengths, {} sequence "
          "lengths for {} sequences",
          in.prefix_cu_members.size(), in.prefix_members.size(), in.prefix_lens.size(),
          in.prefix_len_of_seq.size(), s);
    b.attn.prefix_cu_members = part(in.prefix_cu_members, {groups + 1});
    b.attn.prefix_members = part(in.prefix_members, {s});
    b.attn.prefix_lens = part(in.prefix_lens, {groups});
    b.attn.prefix_len_of_seq = part(in.prefix_len_of_seq, {s});
  }
  CHECK(used <= need, "step upload: {} elements laid out, {} planned", used, need);
  ops::copy(ctx, TensorView(host, DType::i32, {used}),
            TensorView(storage.data, DType::i32, {used}, storage.device));
  return b;
}

}  // namespace fp8rl
