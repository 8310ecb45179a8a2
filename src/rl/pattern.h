// A PCRE2 regular expression for rewards (format checks, answer extraction): Perl syntax, UTF-8
// with Unicode properties, JIT-compiled when available. Text that is not valid UTF-8 is still
// matched (PCRE2_MATCH_INVALID_UTF), since completions are model output.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace fp8rl {

struct PatternOptions {
  bool dotall = false;       // '.' also matches a newline (Python's re.DOTALL)
  bool multiline = false;    // ^ and $ at every line (re.MULTILINE)
  bool ignore_case = false;  // re.IGNORECASE
};

class Pattern {
 public:
  // A pattern PCRE2 rejects is an fp8rl::Error naming it and the offset. `who` names the user
  // of the pattern in errors ("regex reward 'format'").
  Pattern(std::string pattern, const PatternOptions& options, std::string who);
  Pattern(Pattern&&) noexcept;
  Pattern& operator=(Pattern&&) noexcept;
  ~Pattern();

  const std::string& pattern() const { return pattern_; }

  // Whether the pattern matches somewhere in `text` (Python's re.search).
  bool search(std::string_view text) const;
  // Whether the pattern matches at the start of `text` (Python's re.match).
  bool match_start(std::string_view text) const;
  // Whether the pattern matches the whole of `text` (Python's re.fullmatch).
  bool full_match(std::string_view text) const;
  // Group 1 of the last non-overlapping match in `text` (the whole match when the pattern has
  // no group; "" when group 1 did not participate), or nullopt when nothing matches.
  std::optional<std::string> last_capture(std::string_view text) const;

  struct Code;

 private:
  // Runs one match from `from` with the extra PCRE2 options; false when none. Fills [begin,
  // end) of the match and of group 1 (npos when unset). A PCRE2 failure other than "no match"
  // (the backtracking limit) is an fp8rl::Error.
  bool run(std::string_view text, size_t from, unsigned options, size_t& begin, size_t& end,
           size_t& group_begin, size_t& group_end) const;

  std::string pattern_;
  std::string who_;
  std::unique_ptr<Code> code_;
};

}  // namespace fp8rl
