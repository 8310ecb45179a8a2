// Regular expressions of tokenizer.json (Split pre-tokenizers, Replace normalizers/decoders).
//
// Hugging Face tokenizers compiles these patterns with Oniguruma; we compile them with PCRE2
// (UTF + Unicode properties, JIT) after translating the few constructs whose meaning differs:
// \s and \S are rewritten to Unicode White_Space (Oniguruma's set; PCRE2 adds U+180E),
// \w/\W to Oniguruma's Word (Alphabetic, marks, decimal digits, connector punctuation, joiners),
// \h/\H to hexadecimal digits, \uHHHH to \x{HHHH}, and \p{...} gets the characters Unicode
// 16.0 (Oniguruma's) adds over PCRE2's Unicode 14.0. Those additions slow matching down, so
// each pattern is compiled twice and the extended one runs only on text that holds a
// character assigned after Unicode 14.0.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace fp8rl::tok {

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern; a pattern PCRE2 rejects is an fp8rl::Error naming it.
  static Regex from_oniguruma(std::string_view pattern);
  // Matches `text` literally.
  static Regex literal(std::string_view text);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  const std::string& pattern() const { return pattern_; }

  struct Compiled;

  // Calls on_match(begin, end) with byte offsets for every match in valid UTF-8 `text`, left to
  // right, as Oniguruma's find_iter does: an empty match right where the previous match ended
  // is skipped by advancing one character.
  template <typename OnMatch>
  void for_each_match(std::string_view text, OnMatch&& on_match) const;

 private:
  // PCRE2 match data for one for_each_match call (freed by its destructor).
  class Scratch {
   public:
    Scratch();
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    void* data;
  };

  Regex(std::string pattern, std::unique_ptr<Compiled> compiled,
        std::unique_ptr<Compiled> extended);
  // The compiled pattern to run on `text`.
  const Compiled& choose(std::string_view text) const;
  // Finds the first match at or after `from`; false when none.
  bool find(const Compiled& code, std::string_view text, size_t from, Scratch& scratch,
            size_t& begin, size_t& end) const;

  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;  // PCRE2's own Unicode data
  std::unique_ptr<Compiled> extended_;  // with the Unicode 16.0 additions; null when none
};

// Exposed for tests: the PCRE2 pattern an Oniguruma pattern is translated to, with or without
// the Unicode 16.0 additions to \p{...}.
std::string translate_oniguruma_pattern(std::string_view pattern, bool unicode16 = true);

template <typename OnMatch>
void Regex::for_each_match(std::string_view text, OnMatch&& on_match) const {
  Scratch scratch;
  const Compiled& code = choose(text);
  size_t from = 0;
  size_t last_match_end = std::string_view::npos;
  while (from <= text.size()) {
    size_t begin, end;
    if (!find(code, text, from, scratch, begin, end)) return;
    if (begin == end && end == last_match_end) {
      if (from >= text.size()) return;
      const auto lead = static_cast<unsigned char>(text[from]);
      from += lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      continue;
    }
    on_match(begin, end);
    from = end;
    last_match_end = end;
  }
}

}  // namespace fp8rl::tok
