#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/check.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unicode_properties.h"

namespace fp8rl::tok {

namespace {

// Unicode White_Space, as the body of a character class.
constexpr std::string_view kWhiteSpaceClass =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr std::string_view kWordClass = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D})";
constexpr std::string_view kHexClass = "0-9a-fA-F";

// Property names compare as Oniguruma compares them: case, spaces, '_' and '-' ignored.
std::string loose_name(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '_' || c == ' ' || c == '-') continue;
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  return out;
}

// The ranges Unicode 16.0 adds to a property PCRE2 knows at Unicode 14.0 ("" when none).
std::string property_additions(std::string_view name) {
  static constexpr std::pair<std::string_view, std::string_view> kLongNames[] = {
      {"letter", "L"},
      {"uppercaseletter", "Lu"},
      {"lowercaseletter", "Ll"},
      {"titlecaseletter", "Lt"},
      {"modifierletter", "Lm"},
      {"otherletter", "Lo"},
      {"mark", "M"},
      {"nonspacingmark", "Mn"},
      {"spacingmark", "Mc"},
      {"enclosingmark", "Me"},
      {"number", "N"},
      {"decimalnumber", "Nd"},
      {"letternumber", "Nl"},
      {"othernumber", "No"},
      {"punctuation", "P"},
      {"connectorpunctuation", "Pc"},
      {"dashpunctuation", "Pd"},
      {"openpunctuation", "Ps"},
      {"closepunctuation", "Pe"},
      {"initialpunctuation", "Pi"},
      {"finalpunctuation", "Pf"},
      {"otherpunctuation", "Po"},
      {"symbol", "S"},
      {"mathsymbol", "Sm"},
      {"currencysymbol", "Sc"},
      {"modifiersymbol", "Sk"},
      {"othersymbol", "So"}};
  std::string key = loose_name(name);
  for (const auto& [long_name, short_name] : kLongNames) {
    if (key == long_name) key = loose_name(short_name);
  }
  for (const PropertyAddition& a : unicode_property_additions()) {
    if (loose_name(a.name) != key) continue;
    std::string out;
    for (const PropertyRange& r : a.ranges) {
      out += fmt::format("\\x{{{:X}}}", static_cast<uint32_t>(r.first));
      if (r.last != r.first) out += fmt::format("-\\x{{{:X}}}", static_cast<uint32_t>(r.last));
    }
    return out;
  }
  return {};
}

// Whether valid UTF-8 text holds a character PCRE2 does not know but Unicode 16.0 assigns.
bool has_newer_assigned(std::string_view text) {
  const auto newer = unicode_newer_assigned();
  const char32_t lowest = newer.front().first;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const char32_t cp = next_code_point(text, i);
    if (cp < lowest) continue;
    auto it = std::upper_bound(newer.begin(), newer.end(), cp,
                               [](char32_t c, const PropertyRange& r) { return c < r.first; });
    if (it != newer.begin() && cp <= std::prev(it)->last) return true;
  }
  return false;
}

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

std::string translate_oniguruma_pattern(std::string_view p, bool unicode16) {
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
        case 'p':
        case 'P': {
          // \p{Name}, \p{^Name}, \P{Name}, \pL
          std::string_view name;
          size_t end = i;
          if (i + 1 < p.size() && p[i + 1] == '{') {
            const size_t close = p.find('}', i + 2);
            CHECK(close != std::string_view::npos, "regex '{}': unterminated \\{}{{", p, e);
            name = p.substr(i + 2, close - i - 2);
            end = close;
          } else {
            CHECK(i + 1 < p.size(), "regex '{}': \\{} needs a property name", p, e);
            name = p.substr(i + 1, 1);
            end = i + 1;
          }
          const std::string_view original = p.substr(i - 1, end - i + 2);
          i = end;
          const bool negated = e == 'P' || name.starts_with('^');
          if (name.starts_with('^')) name.remove_prefix(1);
          const std::string extra = unicode16 ? property_additions(name) : std::string();
          const std::string positive = fmt::format("\\p{{{}}}", name);
          if (extra.empty() || (in_class && negated)) {
            // Nothing to add, or a negated property inside a class, which a list cannot express
            // (PCRE2's own set then applies).
            out += original;
          } else if (in_class) {
            out += positive + extra;
          } else {
            out += (negated ? "[^" : "[") + positive + extra + "]";
          }
          continue;
        }
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

Regex::Regex(std::string pattern, std::unique_ptr<Compiled> compiled,
             std::unique_ptr<Compiled> extended)
    : pattern_(std::move(pattern)),
      compiled_(std::move(compiled)),
      extended_(std::move(extended)) {}
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

Regex Regex::from_oniguruma(std::string_view pattern) {
  const std::string plain = translate_oniguruma_pattern(pattern, /*unicode16=*/false);
  const std::string extended = translate_oniguruma_pattern(pattern, /*unicode16=*/true);
  return Regex(std::string(pattern), compile(plain, pattern, 0),
               extended == plain ? nullptr : compile(extended, pattern, 0));
}

Regex Regex::literal(std::string_view text) {
  return Regex(std::string(text), compile(text, text, PCRE2_LITERAL), nullptr);
}

const Regex::Compiled& Regex::choose(std::string_view text) const {
  return extended_ && has_newer_assigned(text) ? *extended_ : *compiled_;
}

// Match data lives per for_each_match call, not in the Regex: a Regex stays immutable and can
// be shared by threads.
Regex::Scratch::Scratch() : data(pcre2_match_data_create(1, nullptr)) {
  CHECK(data != nullptr, "out of memory creating PCRE2 match data");
}
Regex::Scratch::~Scratch() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(data));
}

bool Regex::find(const Compiled& code, std::string_view text, size_t from, Scratch& scratch,
                 size_t& begin, size_t& end) const {
  auto* md = static_cast<pcre2_match_data*>(scratch.data);
  const int rc = pcre2_match(code.code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                             from, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  CHECK(rc >= 0, "regex '{}' failed to match: {}", pattern_, pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  begin = ov[0];
  end = ov[1];
  return true;
}

}  // namespace fp8rl::tok
