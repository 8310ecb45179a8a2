// A Hugging Face tokenizer.json tokenizer (BPE models: byte-level as GPT-2 / Llama 3 / Qwen,
// SentencePiece-style with byte fallback as Llama 2 / Mistral / Gemma), giving the same ids as
// the `tokenizers` library:
//
//   encode: added tokens are cut out of the raw text first (leftmost longest), each remaining
//           section is normalized, pre-tokenized into words, and each word BPE-encoded; with
//           add_special the post-processor adds its template tokens (BOS/EOS).
//   decode: ids -> token strings (special tokens dropped when asked) -> decoder chain.
//
// A Tokenizer is immutable once built: encode/decode are const and safe to call from several
// threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"

namespace fp8rl::tok {

class Normalizer;
class PreTokenizer;
class PostProcessor;
class Decoder;

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory holding one.
  static Tokenizer from_file(const std::filesystem::path& path);
  // The text of a tokenizer.json; `source` names it in error messages.
  static Tokenizer from_json_text(std::string_view json_text,
                                  std::string_view source = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text must be valid UTF-8 (an fp8rl::Error names the offending byte otherwise). Added tokens
  // in the text are recognised whatever add_special says; add_special only controls the
  // post-processor's tokens, as add_special_tokens does in Hugging Face.
  std::vector<int32_t> encode(std::string_view text, bool add_special = false) const;

  // Every id must exist (an fp8rl::Error names the first that does not). skip_special drops
  // added tokens marked special.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // -1 when the token is unknown. Added tokens first, then the model vocabulary.
  int32_t token_to_id(std::string_view token) const;
  // Empty when the id does not exist.
  std::string_view id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  // One past the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const { return vocab_size_; }
  const std::vector<AddedToken>& added_tokens() const { return added_.tokens(); }

  // For the incremental decoder: whether decoding holds back runs of byte-fallback tokens.
  bool decodes_byte_fallback() const;

 private:
  Tokenizer();
  void encode_section(std::string_view text, bool at_text_start, std::vector<int32_t>& ids,
                      BpeModel::Scratch& scratch) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  AddedVocabulary added_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  int32_t vocab_size_ = 0;
};

}  // namespace fp8rl::tok
