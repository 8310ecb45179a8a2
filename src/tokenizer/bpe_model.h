// The BPE model of tokenizer.json (tokenizers' models::bpe): vocabulary, ranked merges, and
// the per-word merge loop, for byte-level vocabularies (GPT-2, Llama 3, Qwen) and
// SentencePiece-style ones with byte fallback (Llama 2, Mistral, Gemma).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/flat_maps.h"
#include "tokenizer/json_util.h"
#include "tokenizer/tokenizer_json.h"

namespace fp8rl::tok {

class BpeModel {
 public:
  // Builds the model from the parsed file (type BPE; merges in both the "a b" string form and
  // the ["a", "b"] pair form). Takes over the file's vocabulary storage.
  static BpeModel from_json(TokenizerJson& file);

  BpeModel(BpeModel&&) noexcept = default;
  BpeModel& operator=(BpeModel&&) noexcept = default;

  // Per-call memory: the word cache and merge work space. One per thread.
  struct Scratch {
    struct Symbol {
      int32_t id;
      int32_t prev, next;  // linked list over the symbol array; -1 ends it
      bool alive;
    };
    struct Candidate {
      int32_t rank, pos, merged_id;
      // std heap is a max-heap: the lowest rank, then the leftmost position, comes out first.
      bool operator<(const Candidate& o) const {
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    struct Hash {
      using is_transparent = void;
      size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    // Words repeat heavily in real text: their ids are cached for the duration of one encode.
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> cache;
    std::vector<int32_t> cached_ids;
  };

  // Appends the ids of one word.
  void encode_word(std::string_view word, std::vector<int32_t>& ids, Scratch& scratch) const;

  int32_t token_to_id(std::string_view token) const { return vocab_.find(token); }  // -1: none
  // The token of an id, or an empty view when the vocabulary has no such id.
  std::string_view id_to_token(int32_t id) const;
  // One past the largest id of the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(token_offsets_.size()); }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  BpeModel() = default;
  void merge_symbols(std::string_view word, std::vector<int32_t>& ids, Scratch& scratch) const;
  int32_t char_id(std::string_view ch) const;

  std::vector<char> token_bytes_;  // all vocabulary strings back to back; a vector so that
                                   // moving the model keeps the map's views valid
  std::vector<std::pair<uint32_t, uint32_t>> token_offsets_;  // id -> (offset, length)
  StringIdMap vocab_;                                         // keys view token_bytes_
  MergeMap merges_;
  std::vector<int32_t> ascii_ids_;          // id of each one-byte token, -1: none
  std::vector<int32_t> byte_fallback_ids_;  // id of "<0xXX>", -1: none
  int32_t unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
};

}  // namespace fp8rl::tok
