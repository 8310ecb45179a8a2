// tokenizer.json "post_processor": adds BOS/EOS-style tokens around the encoded ids when
// special tokens are requested (TemplateProcessing, BertProcessing, RobertaProcessing;
// ByteLevel only adjusts offsets, so it leaves ids alone).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tokenizer/json_util.h"

namespace fp8rl::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Single-sequence processing: ids in, ids with the template's special tokens out.
  virtual std::vector<int32_t> process(std::vector<int32_t> ids, bool add_special) const = 0;
};

// nullptr for a null config.
// `depth`: how many Sequences hold this one (bounded by kMaxSequenceDepth).
std::unique_ptr<PostProcessor> make_post_processor(const Json& config, int depth = 0);

}  // namespace fp8rl::tok
