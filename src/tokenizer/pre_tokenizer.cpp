#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace fp8rl::tok {

namespace {

// tokenizers' SplitDelimiterBehavior: what becomes of the matched delimiters.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

SplitBehavior parse_behavior(const std::string& name, std::string_view where) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  RAISE(
      "{}: unknown split behavior '{}' (Removed, Isolated, MergedWithPrevious, "
      "MergedWithNext, Contiguous)",
      where, name);
}

struct Span {
  uint32_t begin, end;
  bool is_match;
};

// Splits every word of `words` on the matches of `regex`, as NormalizedString::split does:
// the word is cut into alternating match / non-match spans, spans are merged or dropped by
// `behavior`, and empty pieces vanish.
void split_words(Words& words, const Regex& regex, SplitBehavior behavior, bool invert,
                 std::vector<Span>& spans, std::vector<Words::Word>& out) {
  out.clear();
  for (const Words::Word& w : words.words) {
    const std::string_view s = words.view(w);
    spans.clear();
    uint32_t prev = 0;
    regex.for_each_match(s, [&](size_t b, size_t e) {
      if (prev != b) spans.push_back({prev, static_cast<uint32_t>(b), invert});
      spans.push_back({static_cast<uint32_t>(b), static_cast<uint32_t>(e), !invert});
      prev = static_cast<uint32_t>(e);
    });
    if (prev != s.size()) spans.push_back({prev, static_cast<uint32_t>(s.size()), invert});

    // Merge spans by behavior (in place, into the front of `spans`).
    size_t n = 0;
    switch (behavior) {
      case SplitBehavior::kRemoved:
        for (const Span& sp : spans) {
          if (!sp.is_match) spans[n++] = sp;
        }
        break;
      case SplitBehavior::kIsolated:
        n = spans.size();
        break;
      case SplitBehavior::kContiguous: {
        bool previous_match = false;
        for (const Span& sp : spans) {
          if (n > 0 && sp.is_match == previous_match) {
            spans[n - 1].end = sp.end;
          } else {
            spans[n++] = sp;
          }
          previous_match = sp.is_match;
        }
        break;
      }
      case SplitBehavior::kMergedWithPrevious: {
        bool previous_match = false;
        for (const Span& sp : spans) {
          if (n > 0 && sp.is_match && !previous_match) {
            spans[n - 1].end = sp.end;
          } else {
            spans[n++] = sp;
          }
          previous_match = sp.is_match;
        }
        break;
      }
      case SplitBehavior::kMergedWithNext: {
        // The mirror image of MergedWithPrevious: walk from the end.
        std::vector<Span> reversed;
        bool previous_match = false;
        for (size_t i = spans.size(); i-- > 0;) {
          const Span& sp = spans[i];
          if (!reversed.empty() && sp.is_match && !previous_match) {
            reversed.back().begin = sp.begin;
          } else {
            reversed.push_back(sp);
          }
          previous_match = sp.is_match;
        }
        for (size_t i = reversed.size(); i-- > 0;) spans[n++] = reversed[i];
        break;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (spans[i].begin == spans[i].end) continue;
      out.push_back({w.begin + spans[i].begin, w.begin + spans[i].end,
                     w.at_text_start && spans[i].begin == 0});
    }
  }
  words.words.swap(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(Words& words, Words& scratch) const override {
    std::vector<Span> spans;
    split_words(words, regex_, behavior_, invert_, spans, scratch.words);
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's word regex, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(Regex::from_oniguruma(kGpt2Pattern)) : nullptr) {
  }

  void pre_tokenize(Words& words, Words& scratch) const override {
    if (add_prefix_space_) prepend_spaces(words, scratch);
    if (regex_) {
      std::vector<Span> spans;
      split_words(words, *regex_, SplitBehavior::kIsolated, false, spans, scratch.words);
    }
    // Map every byte of every word to its alphabet character.
    scratch.text.clear();
    scratch.text.reserve(words.text.size() * 2);
    scratch.words.clear();
    for (const Words::Word& w : words.words) {
      const auto begin = static_cast<uint32_t>(scratch.text.size());
      for (char c : words.view(w)) {
        scratch.text.append(kByteLevelAlphabet.utf8_of(static_cast<uint8_t>(c)));
      }
      scratch.words.push_back({begin, static_cast<uint32_t>(scratch.text.size()), w.at_text_start});
    }
    std::swap(words, scratch);
  }

 private:
  static void prepend_spaces(Words& words, Words& scratch) {
    scratch.text.clear();
    scratch.words.clear();
    for (const Words::Word& w : words.words) {
      const auto begin = static_cast<uint32_t>(scratch.text.size());
      const std::string_view s = words.view(w);
      if (s.empty() || s[0] != ' ') scratch.text.push_back(' ');
      scratch.text.append(s);
      scratch.words.push_back({begin, static_cast<uint32_t>(scratch.text.size()), w.at_text_start});
    }
    std::swap(words, scratch);
  }

  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

// Metaspace: spaces become the replacement character (U+2581 usually), one is prepended by
// prepend_scheme, and with split the word is cut before every replacement character.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)),
        prepend_(prepend),
        split_(split),
        replacement_regex_(Regex::literal(replacement_)) {}

  void pre_tokenize(Words& words, Words& scratch) const override {
    scratch.text.clear();
    scratch.words.clear();
    for (const Words::Word& w : words.words) {
      const auto begin = static_cast<uint32_t>(scratch.text.size());
      const std::string_view s = words.view(w);
      const bool starts_with_replacement =
          s.starts_with(replacement_) || (!s.empty() && s[0] == ' ');
      const bool prepend =
          !starts_with_replacement &&
          (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && w.at_text_start));
      if (prepend) scratch.text.append(replacement_);
      for (char c : s) {
        if (c == ' ') {
          scratch.text.append(replacement_);
        } else {
          scratch.text.push_back(c);
        }
      }
      scratch.words.push_back({begin, static_cast<uint32_t>(scratch.text.size()), w.at_text_start});
    }
    std::swap(words, scratch);
    if (split_) {
      std::vector<Span> spans;
      split_words(words, replacement_regex_, SplitBehavior::kMergedWithNext, false, spans,
                  scratch.words);
    }
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
  Regex replacement_regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(Words& words, Words& scratch) const override {
    for (const auto& step : steps_) step->pre_tokenize(words, scratch);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

std::unique_ptr<PreTokenizer> split_on(std::string_view pattern, SplitBehavior behavior,
                                       bool invert = false) {
  return std::make_unique<SplitPreTokenizer>(Regex::from_oniguruma(pattern), behavior, invert);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& config, int depth) {
  if (config.is_null()) return nullptr;
  const std::string where = "tokenizer.json pre_tokenizer";
  const std::string type = json_type(config, where);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(
        json_bool_or(config, "add_prefix_space", true, where),
        json_bool_or(config, "use_regex", true, where));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(
        regex_from_pattern(json_at(config, "pattern", where), where),
        parse_behavior(json_string(config, "behavior", where), where),
        json_bool_or(config, "invert", false, where));
  }
  if (type == "Metaspace") {
    using Prepend = MetaspacePreTokenizer::Prepend;
    Prepend prepend = Prepend::kAlways;
    const std::string scheme = json_string_or(config, "prepend_scheme", "always", where);
    if (scheme == "first") {
      prepend = Prepend::kFirst;
    } else if (scheme == "never") {
      prepend = Prepend::kNever;
    } else {
      CHECK(scheme == "always", "{}: unknown Metaspace prepend_scheme '{}'", where, scheme);
    }
    // Files from before prepend_scheme existed say add_prefix_space: false for "never".
    if (!json_bool_or(config, "add_prefix_space", true, where)) prepend = Prepend::kNever;
    return std::make_unique<MetaspacePreTokenizer>(json_char(config, "replacement", where), prepend,
                                                   json_bool_or(config, "split", true, where));
  }
  if (type == "Digits") {
    return split_on(R"(\p{N})", json_bool_or(config, "individual_digits", false, where)
                                    ? SplitBehavior::kIsolated
                                    : SplitBehavior::kContiguous);
  }
  if (type == "Whitespace") return split_on(R"(\w+|[^\w\s]+)", SplitBehavior::kRemoved, true);
  if (type == "WhitespaceSplit") return split_on(R"(\s)", SplitBehavior::kRemoved);
  if (type == "Punctuation") {
    return split_on(R"([\p{P}!-/:-@\[-`{-~])",
                    parse_behavior(json_string_or(config, "behavior", "Isolated", where), where));
  }
  if (type == "Sequence") {
    check_sequence_depth(depth, where);
    const Json& list = json_at(config, "pretokenizers", where);
    CHECK(list.is_array(), "{}: 'pretokenizers' must be a list", where);
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json& step : list) {
      if (auto p = make_pre_tokenizer(step, depth + 1)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  RAISE(
      "{}: unsupported type '{}' (supported: ByteLevel, Split, Metaspace, Digits, Whitespace, "
      "WhitespaceSplit, Punctuation, Sequence)",
      where, type);
}

}  // namespace fp8rl::tok
