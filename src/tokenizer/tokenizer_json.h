// Parsing of tokenizer.json. The model's vocab and merges (150k to 500k entries) are streamed
// straight into flat arrays through nlohmann's SAX interface; only the small remaining
// sections become a JSON DOM. A DOM of the whole file costs more than all the rest of loading.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/json_util.h"

namespace fp8rl::tok {

struct TokenizerJson {
  // The file, with model.vocab and model.merges replaced by null.
  Json root;

  // model.vocab in file order: token strings back to back in vocab_bytes.
  struct VocabEntry {
    uint32_t offset, length;
    int64_t id;
  };
  bool has_vocab = false;
  std::vector<char> vocab_bytes;
  std::vector<VocabEntry> vocab;

  // model.merges in file order (rank = index), "a b" strings already split at their space.
  struct MergeEntry {
    uint32_t left_offset, left_length, right_offset, right_length;
  };
  bool has_merges = false;
  std::vector<char> merge_bytes;
  std::vector<MergeEntry> merges;

  std::string_view vocab_token(const VocabEntry& e) const {
    return {vocab_bytes.data() + e.offset, e.length};
  }
  std::string_view merge_left(const MergeEntry& m) const {
    return {merge_bytes.data() + m.left_offset, m.left_length};
  }
  std::string_view merge_right(const MergeEntry& m) const {
    return {merge_bytes.data() + m.right_offset, m.right_length};
  }
};

// Throws fp8rl::Error naming `source` on malformed JSON or a malformed vocab/merges section.
TokenizerJson parse_tokenizer_json(std::string_view text, std::string_view source);

}  // namespace fp8rl::tok
