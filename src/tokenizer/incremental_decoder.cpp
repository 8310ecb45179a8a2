#include "tokenizer/incremental_decoder.h"

#include "core/check.h"
#include "tokenizer/decoder.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl::tok {

namespace {
constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";
}

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDecoder::push(int32_t id) {
  CHECK(id >= 0 && id < tokenizer_.vocab_size(), "token id {} is out of range (vocabulary size {})",
        id, tokenizer_.vocab_size());
  // A skipped special token contributes nothing; keeping it out of the window keeps the
  // window's first token the same one the full decode sees.
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  window_.push_back(id);
  if (tokenizer_.decodes_byte_fallback() && byte_fallback_value(tokenizer_.id_to_token(id)) >= 0) {
    return {};  // a byte run decodes only as a whole
  }
  std::string text = tokenizer_.decode(window_, skip_special_);
  if (text.size() <= prefix_text_.size() || text.ends_with(kReplacementUtf8)) return {};
  CHECK(text.starts_with(prefix_text_), "incremental decode diverged: '{}' does not extend '{}'",
        text, prefix_text_);
  std::string fresh = text.substr(prefix_text_.size());
  // The ids just emitted become the context of the next window.
  window_.erase(window_.begin(), window_.begin() + static_cast<ptrdiff_t>(prefix_count_));
  prefix_count_ = window_.size();
  prefix_text_ = tokenizer_.decode(window_, skip_special_);
  return fresh;
}

std::string IncrementalDecoder::finish() {
  std::string rest;
  if (!window_.empty()) {
    const std::string text = tokenizer_.decode(window_, skip_special_);
    CHECK(text.starts_with(prefix_text_), "incremental decode diverged: '{}' does not extend '{}'",
          text, prefix_text_);
    rest = text.substr(prefix_text_.size());
  }
  window_.clear();
  prefix_count_ = 0;
  prefix_text_.clear();
  return rest;
}

}  // namespace fp8rl::tok
