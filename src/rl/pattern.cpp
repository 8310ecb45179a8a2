#include "rl/pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/check.h"

namespace fp8rl {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

struct MatchData {
  explicit MatchData(const pcre2_code* code)
      : data(pcre2_match_data_create_from_pattern(code, nullptr)) {
    CHECK(data != nullptr, "regex: out of memory for match data");
  }
  ~MatchData() { pcre2_match_data_free(data); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* data;
};

}  // namespace

struct Pattern::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Pattern::Pattern(std::string pattern, const PatternOptions& options, std::string who)
    : pattern_(std::move(pattern)), who_(std::move(who)), code_(std::make_unique<Code>()) {
  uint32_t flags = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;
  if (options.dotall) flags |= PCRE2_DOTALL;
  if (options.multiline) flags |= PCRE2_MULTILINE;
  if (options.ignore_case) flags |= PCRE2_CASELESS;
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), flags,
                              &error, &offset, nullptr);
  CHECK(code_->code != nullptr, "{}: invalid regex '{}' at offset {}: {}", who_, pattern_, offset,
        pcre2_message(error));
  // JIT is an optimisation only: without it (no JIT support) matching is interpreted.
  pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

Pattern::Pattern(Pattern&&) noexcept = default;
Pattern& Pattern::operator=(Pattern&&) noexcept = default;
Pattern::~Pattern() = default;

bool Pattern::run(std::string_view text, size_t from, unsigned options, size_t& begin, size_t& end,
                  size_t& group_begin, size_t& group_end) const {
  MatchData match(code_->code);
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                             from, options, match.data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  CHECK(rc >= 0, "{}: matching regex '{}' failed: {}", who_, pattern_, pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
  begin = ovector[0];
  end = ovector[1];
  const bool has_group = rc > 1 && ovector[2] != PCRE2_UNSET;
  group_begin = has_group ? ovector[2] : std::string_view::npos;
  group_end = has_group ? ovector[3] : std::string_view::npos;
  return true;
}

bool Pattern::search(std::string_view text) const {
  size_t b, e, gb, ge;
  return run(text, 0, 0, b, e, gb, ge);
}

bool Pattern::match_start(std::string_view text) const {
  size_t b, e, gb, ge;
  return run(text, 0, PCRE2_ANCHORED, b, e, gb, ge);
}

bool Pattern::full_match(std::string_view text) const {
  size_t b, e, gb, ge;
  return run(text, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, b, e, gb, ge);
}

std::optional<std::string> Pattern::last_capture(std::string_view text) const {
  uint32_t groups = 0;
  pcre2_pattern_info(code_->code, PCRE2_INFO_CAPTURECOUNT, &groups);
  std::optional<std::string> found;
  size_t from = 0;
  while (from <= text.size()) {
    size_t b, e, gb, ge;
    if (!run(text, from, 0, b, e, gb, ge)) break;
    if (groups == 0) {
      found = std::string(text.substr(b, e - b));
    } else {
      found = gb == std::string_view::npos ? std::string() : std::string(text.substr(gb, ge - gb));
    }
    if (e > b) {
      from = e;
    } else {
      // After an empty match, step over one UTF-8 character.
      const unsigned lead = e < text.size() ? static_cast<unsigned char>(text[e]) : 0u;
      from = e + (lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4);
    }
  }
  return found;
}

}  // namespace fp8rl
