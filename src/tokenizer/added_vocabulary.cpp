#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <map>

#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace fp8rl::tok {

namespace {

// Start of the code point that ends at `end` (end > 0).
size_t previous_boundary(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  return start;
}

}  // namespace

void AddedVocabulary::Trie::build(const std::vector<std::pair<std::string, int32_t>>& entries) {
  // Build with ordered maps, then flatten to sorted edge arrays.
  std::vector<std::map<uint8_t, uint32_t>> children(1);
  std::vector<int32_t> token_at(1, -1);
  for (const auto& [content, token] : entries) {
    if (content.empty()) continue;
    uint32_t node = 0;
    for (char c : content) {
      const auto b = static_cast<uint8_t>(c);
      auto it = children[node].find(b);
      if (it == children[node].end()) {
        const auto fresh = static_cast<uint32_t>(children.size());
        children[node][b] = fresh;
        children.emplace_back();
        token_at.push_back(-1);
        node = fresh;
      } else {
        node = it->second;
      }
    }
    // Same content twice: the first listed wins (special tokens are listed first).
    if (token_at[node] < 0) token_at[node] = token;
    first_byte[static_cast<uint8_t>(content[0])] = true;
  }
  nodes.assign(children.size(), Node{});
  edges.clear();
  for (size_t n = 0; n < children.size(); ++n) {
    nodes[n].first_edge = static_cast<uint32_t>(edges.size());
    nodes[n].edge_count = static_cast<uint32_t>(children[n].size());
    nodes[n].token = token_at[n];
    for (const auto& [b, child] : children[n]) edges.push_back({b, child});
  }
}

std::pair<size_t, int32_t> AddedVocabulary::Trie::longest_at(std::string_view text,
                                                             size_t i) const {
  std::pair<size_t, int32_t> best{0, -1};
  uint32_t node = 0;
  for (size_t j = i; j < text.size(); ++j) {
    const Node& n = nodes[node];
    const Edge* begin = edges.data() + n.first_edge;
    const Edge* end = begin + n.edge_count;
    const auto b = static_cast<uint8_t>(text[j]);
    const Edge* e =
        std::lower_bound(begin, end, b, [](const Edge& x, uint8_t v) { return x.byte < v; });
    if (e == end || e->byte != b) break;
    node = e->node;
    if (nodes[node].token >= 0) best = {j + 1 - i, nodes[node].token};
  }
  return best;
}

AddedVocabulary::AddedVocabulary() = default;
AddedVocabulary::AddedVocabulary(AddedVocabulary&&) noexcept = default;
AddedVocabulary& AddedVocabulary::operator=(AddedVocabulary&&) noexcept = default;
AddedVocabulary::~AddedVocabulary() = default;

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  bool any_single_word = false;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.id >= static_cast<int32_t>(index_of_id_.size())) index_of_id_.resize(t.id + 1, -1);
    index_of_id_[t.id] = static_cast<int32_t>(i);
    id_of_content_.emplace(t.content, t.id);
    any_single_word = any_single_word || t.single_word;
  }
  if (any_single_word) word_char_ = std::make_unique<Regex>(Regex::from_oniguruma(R"(^\w)"));
  std::vector<std::pair<std::string, int32_t>> raw, normalized;
  // tokenizers lists special tokens before the others in its matchers.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < tokens_.size(); ++i) {
      const AddedToken& t = tokens_[i];
      if (t.special != (pass == 0)) continue;
      if (!t.normalized) {
        raw.emplace_back(t.content, static_cast<int32_t>(i));
      } else {
        std::string content = t.content;
        if (normalizer) normalizer->normalize(content);
        normalized.emplace_back(std::move(content), static_cast<int32_t>(i));
      }
    }
  }
  raw_trie_.build(raw);
  normalized_trie_.build(normalized);
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(index_of_id_.size()) || index_of_id_[id] < 0) {
    return nullptr;
  }
  return &tokens_[index_of_id_[id]];
}

int32_t AddedVocabulary::find_content(std::string_view content) const {
  auto it = id_of_content_.find(std::string(content));
  return it == id_of_content_.end() ? -1 : it->second;
}

bool AddedVocabulary::is_word_char(std::string_view text, size_t at) const {
  size_t end = at;
  next_code_point(text, end);
  bool word = false;
  word_char_->for_each_match(text.substr(at, end - at), [&](size_t, size_t) { word = true; });
  return word;
}

bool AddedVocabulary::ends_with_word_char(std::string_view text, size_t end) const {
  return is_word_char(text, previous_boundary(text, end));
}

void AddedVocabulary::split(std::string_view text, bool normalized,
                            std::vector<Section>& out) const {
  out.clear();
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  const auto n = static_cast<uint32_t>(text.size());
  if (trie.empty()) {
    if (n > 0) out.push_back({0, n, -1});
    return;
  }
  uint32_t start_offset = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!trie.first_byte[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    const auto [length, index] = trie.longest_at(text, i);
    if (length == 0) {
      ++i;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = i, stop = i + length;
    if (token.single_word) {
      const bool start_ok = start == 0 || !ends_with_word_char(text, start);
      const bool stop_ok = stop == text.size() || !is_word_char(text, stop);
      if (!start_ok || !stop_ok) {
        // Discarded, but its text stays consumed: the matcher resumes after it, as
        // tokenizers' non-overlapping find_iter does.
        i = stop;
        continue;
      }
    }
    if (token.lstrip) {
      // Take the whitespace before the token, but not past the previous match.
      while (start > start_offset) {
        const size_t prev = previous_boundary(text, start);
        size_t k = prev;
        if (!is_white_space(next_code_point(text, k))) break;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t k = stop;
        if (!is_white_space(next_code_point(text, k))) break;
        stop = k;
      }
    }
    if (start_offset < start) out.push_back({start_offset, static_cast<uint32_t>(start), -1});
    out.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop), token.id});
    start_offset = static_cast<uint32_t>(stop);
    i = stop;
  }
  if (start_offset < n) out.push_back({start_offset, n, -1});
}

}  // namespace fp8rl::tok
