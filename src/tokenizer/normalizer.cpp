#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_normalization.h"

namespace fp8rl::tok {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  void normalize(std::string& text) const override { normalize_unicode(text, form_); }

 private:
  NormalizationForm form_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = replace_all(text, pattern_, content_); }

 private:
  Regex pattern_;
  std::string content_;
};

// Prepend and Append leave an empty text empty, as tokenizers does.
class AffixNormalizer final : public Normalizer {
 public:
  AffixNormalizer(std::string affix, bool prepend) : affix_(std::move(affix)), prepend_(prepend) {}
  void normalize(std::string& text) const override {
    if (text.empty()) return;
    if (prepend_) {
      text.insert(0, affix_);
    } else {
      text.append(affix_);
    }
  }

 private:
  std::string affix_;
  bool prepend_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_white_space(next_code_point(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
        size_t next = start;
        if (!is_white_space(next_code_point(text, next))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// Removes non-spacing marks (tokenizers' StripAccents drops combining marks).
class StripAccentsNormalizer final : public Normalizer {
 public:
  StripAccentsNormalizer() : marks_(Regex::from_oniguruma(R"(\p{Mn})")) {}
  void normalize(std::string& text) const override { text = replace_all(text, marks_, ""); }

 private:
  Regex marks_;
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size() * 2);
    for (char c : text) out.append(kByteLevelAlphabet.utf8_of(static_cast<uint8_t>(c)));
    text = std::move(out);
  }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const Json& config, int depth) {
  if (config.is_null()) return nullptr;
  const std::string where = "tokenizer.json normalizer";
  const std::string type = json_type(config, where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfd);
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(
        regex_from_pattern(json_at(config, "pattern", where), where),
        json_string(config, "content", where));
  }
  if (type == "Prepend") {
    return std::make_unique<AffixNormalizer>(json_string(config, "prepend", where), true);
  }
  if (type == "Append") {
    return std::make_unique<AffixNormalizer>(json_string(config, "append", where), false);
  }
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(json_bool_or(config, "strip_left", true, where),
                                             json_bool_or(config, "strip_right", true, where));
  }
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Sequence") {
    check_sequence_depth(depth, where);
    const Json& list = json_at(config, "normalizers", where);
    CHECK(list.is_array(), "{}: 'normalizers' must be a list", where);
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json& step : list) {
      if (auto n = make_normalizer(step, depth + 1)) steps.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  RAISE(
      "{}: unsupported type '{}' (supported: NFC, NFD, Replace, Prepend, Append, Strip, "
      "StripAccents, ByteLevel, Sequence)",
      where, type);
}

}  // namespace fp8rl::tok
