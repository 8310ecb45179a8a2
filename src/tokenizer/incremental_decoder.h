// Streaming detokenization: feed generated ids one at a time, get text as soon as it is final.
//
// Guarantees: every returned piece is valid UTF-8 that never needs to be taken back (no half
// of a multi-byte character, no byte-fallback run cut short), and the concatenation of all
// pieces plus finish() equals tokenizer.decode(all ids, skip_special).
//
// How: like tokenizers' DecodeStream, it decodes a short window of recent ids, which keeps
// the context the decoders need (a Metaspace or Strip decoder treats the first token of its
// input specially), and emits only the window's text beyond what was already emitted. Text
// that ends in U+FFFD, or a trailing run of "<0xXX>" tokens, is held back until later tokens
// settle it; finish() releases whatever is left.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp8rl::tok {

class Tokenizer;

class IncrementalDecoder {
 public:
  // The tokenizer must outlive the decoder.
  IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special);

  // Adds one id; returns the text that became final (often empty).
  std::string push(int32_t id);
  // Returns the remaining text; the decoder is then empty and can start a new stream.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> window_;  // ids whose text is not all final yet, after `prefix_count_`
  size_t prefix_count_ = 0;      // leading ids of window_ kept only as context
  std::string prefix_text_;      // decode of those context ids
};

}  // namespace fp8rl::tok
