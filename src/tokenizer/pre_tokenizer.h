// tokenizer.json "pre_tokenizer": cuts normalized text into words (and may rewrite them, as
// ByteLevel and Metaspace do) before the model encodes each word.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_util.h"

namespace fp8rl::tok {

// Words as byte ranges into one text buffer.
struct Words {
  struct Word {
    uint32_t begin, end;
    // The word starts the input text (tokenizers: offsets_original().0 == 0); Metaspace's
    // prepend_scheme "first" acts only there.
    bool at_text_start;
  };
  std::string text;
  std::vector<Word> words;

  std::string_view view(const Word& w) const {
    return std::string_view(text).substr(w.begin, w.end - w.begin);
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `words` by its pre-tokenization; `scratch` is reusable working space.
  virtual void pre_tokenize(Words& words, Words& scratch) const = 0;
};

// nullptr for a null config. Supported: ByteLevel, Split, Metaspace, Digits, Whitespace,
// WhitespaceSplit, Punctuation, Sequence.
// `depth`: how many Sequences hold this one (bounded by kMaxSequenceDepth).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& config, int depth = 0);

}  // namespace fp8rl::tok
