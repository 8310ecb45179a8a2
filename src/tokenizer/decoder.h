// tokenizer.json "decoder": turns token strings back into text (tokenizers' decode_chain).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_util.h"

namespace fp8rl::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings; the decoded text is their concatenation.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // Whether this decoder (or a step of it) is ByteFallback, whose output for a run of
  // "<0xXX>" tokens is only known once the run has ended.
  virtual bool has_byte_fallback() const { return false; }
};

// nullptr for a null config. Supported: ByteLevel, ByteFallback, Fuse, Replace, Strip,
// Metaspace, Sequence.
// `depth`: how many Sequences hold this one (bounded by kMaxSequenceDepth).
std::unique_ptr<Decoder> make_decoder(const Json& config, int depth = 0);

// "<0x41>" -> 0x41; -1 for any other token.
int byte_fallback_value(std::string_view token);

}  // namespace fp8rl::tok
