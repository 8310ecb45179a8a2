#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/check.h"

namespace fp8rl::tok {

namespace {

// Unicode White_Space, as the body of a character class.
constexpr std::string_view kWhiteSpaceClass =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr std::string_view kWordClass = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})";
constexpr std::string_view kHexClass = "0-9a-fA-F";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::string translate_oniguruma_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      std::string_view body;
      bool negated = false;
      switch (e) {
        case 's':
          body = kWhiteSpaceClass;
          break;
        case 'S':
          body = kWhiteSpaceClass;
          negated = true;
          break;
        case 'w':
          body = kWordClass;
          break;
        case 'W':
          body = kWordClass;
          negated = true;
          break;
        case 'h':
          body = kHexClass;
          break;
        case 'H':
          body = kHexClass;
          negated = true;
          break;
        case 'u': {
          const std::string_view hex = p.substr(i + 1, 4);
          CHECK(hex.size() == 4 &&
                    hex.find_first_not_of("0123456789abcdefABCDEF") == std::string_view::npos,
                "regex '{}': \\u must be followed by four hex digits", p);
          out += "\\x{";
          out += hex;
          out += '}';
          i += 4;
          continue;
        }
        default:
          out += '\\';
          out += e;
          continue;
      }
      if (!in_class) {
        out += negated ? "[^" : "[";
        out += body;
        out += ']';
      } else if (!negated) {
        out += body;
      } else {
        // A negated set inside a class has no PCRE2 spelling as a plain list; PCRE2's own
        // \S, \W, \H are the same sets but for U+180E (\S) and rare marks (\W).
        out += '\\';
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[') {
      // POSIX bracket [:alpha:] is fine; a nested class (Oniguruma set algebra) is not.
      CHECK(i + 1 < p.size() && p[i + 1] == ':',
            "regex '{}': nested character classes are not supported", p);
      const size_t close = p.find(":]", i + 2);
      CHECK(close != std::string_view::npos, "regex '{}': unterminated POSIX bracket", p);
      out += p.substr(i, close + 2 - i);
      i = close + 1;
      continue;
    }
    if (in_class && c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
      RAISE("regex '{}': class intersection (&&) is not supported", p);
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(std::string pattern, std::unique_ptr<Compiled> compiled)
    : pattern_(std::move(pattern)), compiled_(std::move(compiled)) {}
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

namespace {
std::unique_ptr<Regex::Compiled> compile(std::string_view source, std::string_view shown,
                                         uint32_t extra_options);
}

Regex Regex::from_oniguruma(std::string_view pattern) {
  const std::string translated = translate_oniguruma_pattern(pattern);
  return Regex(std::string(pattern), compile(translated, pattern, 0));
}

Regex Regex::literal(std::string_view text) {
  return Regex(std::string(text), compile(text, text, PCRE2_LITERAL));
}

// Match data lives per for_each_match call, not in the Regex: a Regex stays immutable and can
// be shared by threads.
Regex::Scratch::Scratch() : data(pcre2_match_data_create(1, nullptr)) {
  CHECK(data != nullptr, "out of memory creating PCRE2 match data");
}
Regex::Scratch::~Scratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(data));
}

bool Regex::find(std::string_view text, size_t from, Scratch& scratch, size_t& begin,
                 size_t& end) const {
  auto* md = static_cast<pcre2_match_data*>(scratch.data);
  const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()),
                             text.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  CHECK(rc >= 0, "regex '{}' failed to match: {}", pattern_, pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  begin = ov[0];
  end = ov[1];
  return true;
}

namespace {
std::unique_ptr<Regex::Compiled> compile(std::string_view source, std::string_view shown,
                                         uint32_t extra_options) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  auto compiled = std::make_unique<Regex::Compiled>();
  compiled->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                    // UCP is meaningless for, and rejected with, LITERAL.
                    PCRE2_UTF | ((extra_options & PCRE2_LITERAL) ? 0 : PCRE2_UCP) | extra_options,
                    &error, &error_offset, nullptr);
  CHECK(compiled->code != nullptr, "invalid regex '{}': {} (at offset {} of '{}')", shown,
        pcre2_message(error), error_offset, source);
  // JIT is an accelerator only: PCRE2 builds without it fall back to the interpreter.
  pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
  return compiled;
}
}  // namespace

}  // namespace fp8rl::tok
