// Added tokens of tokenizer.json ("added_tokens"): matched in the raw text before
// normalization (normalized: false) or in the normalized text (normalized: true), leftmost
// longest first, with single_word / lstrip / rstrip as tokenizers' AddedVocabulary applies them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_util.h"

namespace fp8rl::tok {

class Normalizer;
class Regex;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A piece of text: an added token (token >= 0, its id) or plain text (token == -1).
struct Section {
  uint32_t begin, end;
  int32_t token;
};

class AddedVocabulary {
 public:
  AddedVocabulary();
  // `normalizer` (may be null) normalizes the content of normalized tokens for matching.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  AddedVocabulary(AddedVocabulary&&) noexcept;
  AddedVocabulary& operator=(AddedVocabulary&&) noexcept;
  ~AddedVocabulary();

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // The added token with this id, or nullptr.
  const AddedToken* find_id(int32_t id) const;
  // The id of an added token's content, or -1.
  int32_t find_content(std::string_view content) const;

  // Cuts text into sections covering it; `normalized` picks which token set to match.
  void split(std::string_view text, bool normalized, std::vector<Section>& out) const;
  bool has_normalized_tokens() const { return !normalized_trie_.empty(); }

 private:
  // A byte trie over token contents, searched leftmost-longest.
  struct Trie {
    struct Node {
      uint32_t first_edge = 0, edge_count = 0;
      int32_t token = -1;  // index into tokens_ when a content ends here
    };
    struct Edge {
      uint8_t byte;
      uint32_t node;
    };
    std::vector<Node> nodes;
    std::vector<Edge> edges;
    bool first_byte[256] = {};
    bool empty() const { return nodes.size() <= 1; }
    void build(const std::vector<std::pair<std::string, int32_t>>& entries);
    // Length of the longest token starting at text[i] and its index, or {0, -1}.
    std::pair<size_t, int32_t> longest_at(std::string_view text, size_t i) const;
  };

  bool is_word_char(std::string_view text, size_t at) const;
  bool ends_with_word_char(std::string_view text, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::vector<int32_t> index_of_id_;  // id -> index into tokens_, -1: not an added token
  std::unordered_map<std::string, int32_t> id_of_content_;
  Trie raw_trie_;
  Trie normalized_trie_;
  std::unique_ptr<Regex> word_char_;  // Unicode \w, only when a token is single_word
};

}  // namespace fp8rl::tok
