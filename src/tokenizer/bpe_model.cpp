#include "tokenizer/bpe_model.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace fp8rl::tok {

namespace {
constexpr size_t kMaxCachedWordBytes = 256;
}  // namespace

BpeModel BpeModel::from_json(TokenizerJson& file) {
  const std::string where = "model";
  const Json& model = json_at(file.root, "model", "tokenizer.json");
  CHECK(model.is_object(), "{}: expected an object", where);
  if (auto t = model.find("type"); t != model.end()) {
    CHECK(t->is_string() && t->get<std::string>() == "BPE",
          "{}: unsupported model type {} (only BPE is supported)", where, json_excerpt(*t));
  }
  CHECK(file.has_vocab, "{}: 'vocab' must be an object of token -> id", where);
  CHECK(file.has_merges, "{}: 'merges' must be a list", where);
  BpeModel m;
  int64_t max_id = -1;
  for (const auto& e : file.vocab) max_id = std::max(max_id, e.id);
  m.token_offsets_.assign(static_cast<size_t>(max_id + 1), {0, UINT32_MAX});
  for (const auto& e : file.vocab) m.token_offsets_[e.id] = {e.offset, e.length};
  // The map's keys view the token bytes: take the buffer over, never copy it again.
  m.token_bytes_ = std::move(file.vocab_bytes);
  m.vocab_.reserve(file.vocab.size());
  for (size_t id = 0; id < m.token_offsets_.size(); ++id) {
    if (m.token_offsets_[id].second == UINT32_MAX) continue;
    m.vocab_.insert(m.id_to_token(static_cast<int32_t>(id)), static_cast<int32_t>(id));
  }

  m.byte_fallback_ = json_bool_or(model, "byte_fallback", false, where);
  m.fuse_unk_ = json_bool_or(model, "fuse_unk", false, where);
  m.ignore_merges_ = json_bool_or(model, "ignore_merges", false, where);
  m.continuing_subword_prefix_ = json_string_or(model, "continuing_subword_prefix", "", where);
  m.end_of_word_suffix_ = json_string_or(model, "end_of_word_suffix", "", where);
  if (auto d = model.find("dropout"); d != model.end() && !d->is_null()) {
    CHECK(d->is_number() && d->get<double>() == 0.0,
          "{}: BPE dropout is a training feature and is not supported", where);
  }
  if (const std::string unk = json_string_or(model, "unk_token", "", where); !unk.empty()) {
    m.unk_id_ = m.vocab_.find(unk);
    CHECK(m.unk_id_ >= 0, "{}: unk_token '{}' is not in the vocabulary", where, unk);
  }
  m.ascii_ids_.assign(128, -1);
  for (int b = 0; b < 128; ++b) m.ascii_ids_[b] = m.vocab_.find(std::string(1, char(b)));
  m.byte_fallback_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) {
    m.byte_fallback_ids_[b] = m.vocab_.find(fmt::format("<0x{:02X}>", b));
  }

  m.merges_.reserve(file.merges.size());
  const size_t prefix_len = m.continuing_subword_prefix_.size();
  std::string merged;
  for (size_t rank = 0; rank < file.merges.size(); ++rank) {
    const std::string_view left = file.merge_left(file.merges[rank]);
    const std::string_view right = file.merge_right(file.merges[rank]);
    const int32_t left_id = m.vocab_.find(left);
    const int32_t right_id = m.vocab_.find(right);
    CHECK(left_id >= 0, "{}: merge {} uses '{}', which is not in the vocabulary", where, rank,
          left);
    CHECK(right_id >= 0, "{}: merge {} uses '{}', which is not in the vocabulary", where, rank,
          right);
    CHECK(right.size() >= prefix_len, "{}: merge {} right part '{}' lacks the prefix '{}'", where,
          rank, right, m.continuing_subword_prefix_);
    merged.assign(left);
    merged.append(right.substr(prefix_len));
    const int32_t merged_id = m.vocab_.find(merged);
    CHECK(merged_id >= 0, "{}: merge {} produces '{}', which is not in the vocabulary", where, rank,
          merged);
    m.merges_.insert(left_id, right_id, {static_cast<int32_t>(rank), merged_id});
  }
  return m;
}

std::string_view BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit()) return {};
  const auto [offset, length] = token_offsets_[id];
  if (length == UINT32_MAX) return {};
  return std::string_view(token_bytes_.data() + offset, length);
}

int32_t BpeModel::char_id(std::string_view ch) const {
  if (ch.size() == 1 && static_cast<uint8_t>(ch[0]) < 0x80) return ascii_ids_[ch[0]];
  return vocab_.find(ch);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids,
                           Scratch& scratch) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const int32_t id = vocab_.find(word); id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  // A one-character word needs no cache.
  if (word.size() == 1) {
    const int32_t id = char_id(word);
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  const auto hit = scratch.cache.find(word);
  if (hit != scratch.cache.end()) {
    const auto [offset, count] = hit->second;
    ids.insert(ids.end(), scratch.cached_ids.begin() + offset,
               scratch.cached_ids.begin() + offset + count);
    return;
  }
  const size_t first = ids.size();
  merge_symbols(word, ids, scratch);
  // Long words (whole lines for tokenizers without a pre-tokenizer) rarely repeat.
  if (word.size() > kMaxCachedWordBytes) return;
  const auto offset = static_cast<uint32_t>(scratch.cached_ids.size());
  scratch.cached_ids.insert(scratch.cached_ids.end(), ids.begin() + first, ids.end());
  scratch.cache.emplace(std::string(word),
                        std::pair{offset, static_cast<uint32_t>(ids.size() - first)});
}

void BpeModel::merge_symbols(std::string_view word, std::vector<int32_t>& ids,
                             Scratch& scratch) const {
  auto& symbols = scratch.symbols;
  symbols.clear();
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };
  // Initial symbols: one per character (tokenizers' merge_word), with the subword prefix on
  // all but the first and the word suffix on the last; unknown characters become byte tokens
  // (byte_fallback) or the unk token, runs of unk fused into one when fuse_unk is set.
  bool pending_unk = false;
  std::string affixed;
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    i += utf8_sequence_length(static_cast<uint8_t>(word[i]));
    std::string_view ch = word.substr(start, i - start);
    if ((start > 0 && !continuing_subword_prefix_.empty()) ||
        (i == word.size() && !end_of_word_suffix_.empty())) {
      affixed.clear();
      if (start > 0) affixed += continuing_subword_prefix_;
      affixed += ch;
      if (i == word.size()) affixed += end_of_word_suffix_;
      ch = affixed;
    }
    if (const int32_t id = char_id(ch); id >= 0) {
      if (pending_unk) add(unk_id_);
      pending_unk = false;
      add(id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char b : ch) all = all && byte_fallback_ids_[static_cast<uint8_t>(b)] >= 0;
      if (all) {
        if (pending_unk) add(unk_id_);
        pending_unk = false;
        for (char b : ch) add(byte_fallback_ids_[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    // Without an unk token the character is dropped, as tokenizers does.
    if (unk_id_ >= 0) {
      if (pending_unk && !fuse_unk_) add(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) add(unk_id_);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  // Merge the lowest-ranked adjacent pair, leftmost first, until no pair has a merge
  // (tokenizers' Word::merge_all without dropout).
  auto& heap = scratch.heap;
  heap.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    const MergeMap::Merge mg = merges_.find(symbols[i].id, symbols[i + 1].id);
    if (mg.rank >= 0) heap.push_back({mg.rank, static_cast<int32_t>(i), mg.merged_id});
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Scratch::Candidate top = heap.back();
    heap.pop_back();
    Scratch::Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Scratch::Symbol& right = symbols[left.next];
    // Stale entry: the pair at this position changed since it was queued.
    if (merges_.find(left.id, right.id).merged_id != top.merged_id) continue;
    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      const MergeMap::Merge mg = merges_.find(symbols[left.prev].id, left.id);
      if (mg.rank >= 0) {
        heap.push_back({mg.rank, left.prev, mg.merged_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (left.next >= 0) {
      const MergeMap::Merge mg = merges_.find(left.id, symbols[left.next].id);
      if (mg.rank >= 0) {
        heap.push_back({mg.rank, top.pos, mg.merged_id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace fp8rl::tok
