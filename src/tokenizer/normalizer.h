// tokenizer.json "normalizer": rewrites the text between added tokens before pre-tokenization.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/json_util.h"

namespace fp8rl::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites valid UTF-8 text in place; the result is valid UTF-8.
  virtual void normalize(std::string& text) const = 0;
};

// nullptr for a null config. Supported: NFC, NFD, Replace, Prepend, Append, Strip,
// StripAccents, ByteLevel, Sequence; anything else is an error naming the type.
// `depth`: how many Sequences hold this one (bounded by kMaxSequenceDepth).
std::unique_ptr<Normalizer> make_normalizer(const Json& config, int depth = 0);

}  // namespace fp8rl::tok
