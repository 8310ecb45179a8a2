#include "tokenizer/jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "tokenizer/jinja/unicode.h"
#include "tokenizer/jinja/value.h"

namespace fp8rl::jinja {
namespace {

[[noreturn]] void syntax_error(int line, const std::string& message) {
  throw TemplateError(TemplateError::Kind::syntax, message, line);
}

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of the Python-whitespace run (\s*) at src[pos].
std::size_t whitespace_run(std::string_view src, std::size_t pos) {
  std::size_t i = pos;
  while (i < src.size()) {
    std::size_t next = i;
    if (!py_isspace(utf8_next(src, next))) break;
    i = next;
  }
  return i - pos;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// jinja2 decodes a string literal with .encode("ascii", "backslashreplace")
// .decode("unicode-escape"): non-ASCII characters become \x/\u/\U escapes first, then every
// escape is decoded. Doing exactly that keeps its quirks (a backslash before a non-ASCII
// character yields the escape's text).
std::string decode_string_literal(std::string_view body, int line) {
  std::string ascii;
  for (char32_t cp : utf8_decode(body)) {
    if (cp < 0x80) {
      ascii += static_cast<char>(cp);
    } else if (cp <= 0xFF) {
      ascii += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (cp <= 0xFFFF) {
      ascii += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else {
      ascii += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
    }
  }
  std::string out;
  for (std::size_t i = 0; i < ascii.size(); ++i) {
    const char c = ascii[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (i + 1 >= ascii.size()) syntax_error(line, "\\ at end of string");
    const char e = ascii[++i];
    switch (e) {
      case '\n':
        break;
      case '\\':
      case '\'':
      case '"':
        out += e;
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (int k = 0; k < digits; ++k) {
          const int h = i + 1 < ascii.size() ? hex_value(ascii[i + 1]) : -1;
          if (h < 0) syntax_error(line, fmt::format("truncated \\{} escape", e));
          cp = cp * 16 + static_cast<char32_t>(h);
          ++i;
        }
        if (cp > 0x10FFFF) syntax_error(line, "illegal Unicode character");
        if (cp >= 0xD800 && cp < 0xE000) syntax_error(line, "surrogate code point in a string");
        utf8_append(out, cp);
        break;
      }
      case 'N':
        syntax_error(line, "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0;
               k < 2 && i + 1 < ascii.size() && ascii[i + 1] >= '0' && ascii[i + 1] <= '7'; ++k) {
            cp = cp * 8 + static_cast<char32_t>(ascii[++i] - '0');
          }
          utf8_append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const std::size_t open = find_tag_open(pos_);
      if (open == std::string::npos) {
        emit_text(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      std::string text = src_.substr(pos_, open - pos_);
      const char tag = src_[open + 1];
      std::size_t after = open + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];

      std::size_t raw_end = 0;
      const bool raw = tag == '%' && match_raw_begin(after, raw_end);
      strip_before_tag(text, sign, tag != '{', line_starting);
      emit_text(text);
      advance_to(open);

      if (raw) {
        advance_to(raw_end);
        line_starting = src_[raw_end - 1] == '\n';
        lex_raw_body(line_starting);
      } else if (tag == '#') {
        advance_to(after);
        lex_comment();
      } else {
        push(tag == '{' ? TokenKind::var_begin : TokenKind::block_begin, "");
        advance_to(after);
        lex_tag_body(tag == '{');
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    push(TokenKind::eof, "");
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag_open(std::size_t from) const {
    for (std::size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` starting after the sign; sets end past the match.
  bool match_raw_begin(std::size_t at, std::size_t& end) const {
    std::size_t i = at + whitespace_run(src_, at);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    i += whitespace_run(src_, i);
    if (src_.compare(i, 3, "-%}") == 0) {
      i += 3;
      end = i + whitespace_run(src_, i);
      return true;
    }
    if (src_.compare(i, 2, "%}") == 0) {
      end = i + 2;
      return true;
    }
    return false;
  }

  // Whitespace handling of the text before a tag (jinja2's OptionalLStrip).
  static void strip_before_tag(std::string& text, char sign, bool block_or_comment,
                               bool line_starting) {
    if (sign == '-') {
      text = py_strip(text, nullptr, StripSide::right);
    } else if (sign != '+' && block_or_comment) {
      const std::size_t nl = text.rfind('\n');
      const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      // jinja2 tests the rest of the line with \s, i.e. any Unicode whitespace.
      if ((l_pos > 0 || line_starting) && whitespace_run(text, l_pos) == text.size() - l_pos) {
        text.resize(l_pos);
      }
    }
  }

  void lex_raw_body(bool line_starting) {
    if (pos_ >= src_.size()) return;  // as for comments: the source ending here is no error
    for (std::size_t i = src_.find("{%", pos_); i != std::string::npos;
         i = src_.find("{%", i + 1)) {
      std::size_t j = i + 2;
      char sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
      j += whitespace_run(src_, j);
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      j += whitespace_run(src_, j);
      std::size_t end = 0;
      if (!match_block_end(j, end)) continue;
      std::string text = src_.substr(pos_, i - pos_);
      strip_before_tag(text, sign, true, line_starting);
      emit_text(text);
      advance_to(end);
      return;
    }
    syntax_error(line_, "Missing end of raw directive");
  }

  void lex_comment() {
    // jinja2's lexer stops quietly when the source ends right after `{#` (nothing left to
    // report on); anything after it must reach a `#}`.
    if (pos_ >= src_.size()) return;
    for (std::size_t i = pos_; i < src_.size(); ++i) {
      std::size_t end = 0;
      if (src_.compare(i, 3, "+#}") == 0) {
        end = i + 3;
      } else if (src_.compare(i, 3, "-#}") == 0) {
        end = i + 3;
        end += whitespace_run(src_, end);
      } else if (src_.compare(i, 2, "#}") == 0) {
        end = i + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      advance_to(end);
      return;
    }
    syntax_error(line_, "Missing end of comment tag");
  }

  // `+%}`, `-%}\s*` or `%}\n?` (trim_blocks) at i.
  bool match_block_end(std::size_t i, std::size_t& end) const {
    if (src_.compare(i, 3, "+%}") == 0) {
      end = i + 3;
      return true;
    }
    if (src_.compare(i, 3, "-%}") == 0) {
      end = i + 3 + whitespace_run(src_, i + 3);
      return true;
    }
    if (src_.compare(i, 2, "%}") == 0) {
      end = i + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;
      return true;
    }
    return false;
  }

  bool match_var_end(std::size_t i, std::size_t& end) const {
    if (src_.compare(i, 3, "-}}") == 0) {
      end = i + 3 + whitespace_run(src_, i + 3);
      return true;
    }
    if (src_.compare(i, 2, "}}") == 0) {
      end = i + 2;
      return true;
    }
    return false;
  }

  void lex_tag_body(bool is_var) {
    std::string brackets;  // open ( [ { awaiting their closer
    while (true) {
      advance_to(pos_ + whitespace_run(src_, pos_));
      if (pos_ >= src_.size()) {
        syntax_error(line_, is_var ? "unexpected end of template, expected '}}'"
                                   : "unexpected end of template, expected '%}'");
      }
      std::size_t end = 0;
      if (brackets.empty() && (is_var ? match_var_end(pos_, end) : match_block_end(pos_, end))) {
        push(is_var ? TokenKind::var_end : TokenKind::block_end, "");
        advance_to(end);
        return;
      }
      const char c = src_[pos_];
      if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        std::size_t i = pos_;
        while (i < src_.size() && is_name_char(src_[i])) ++i;
        push(TokenKind::name, src_.substr(pos_, i - pos_));
        advance_to(i);
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        lex_operator(brackets);
      }
    }
  }

  // Digits with optional single underscores between them: (\d+_)*\d+
  std::size_t digit_run(std::size_t i) const {
    const std::size_t start = i;
    while (i < src_.size() && is_digit(src_[i])) {
      ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && is_digit(src_[i + 1])) ++i;
    }
    return i - start;
  }

  void lex_number() {
    const int line = line_;
    const std::size_t start = pos_;
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    std::size_t i = start + digit_run(start);
    bool is_float = false;
    if (!after_dot) {
      std::size_t j = i;
      if (j + 1 < src_.size() && src_[j] == '.' && is_digit(src_[j + 1])) {
        j += 1 + digit_run(j + 1);
        is_float = true;
      }
      if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
        std::size_t k = j + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && is_digit(src_[k])) {
          j = k + digit_run(k);
          is_float = true;
        }
      }
      if (is_float) i = j;
    }
    std::string digits;
    for (std::size_t k = start; k < i; ++k) {
      if (src_[k] != '_') digits += src_[k];
    }
    if (is_float) {
      Token t{TokenKind::floating, src_.substr(start, i - start), line};
      t.float_value = std::strtod(digits.c_str(), nullptr);
      tokens_.push_back(std::move(t));
      advance_to(i);
      return;
    }
    // Prefixed integers (0x.., 0o.., 0b..).
    if (digits == "0" && i < src_.size()) {
      const char p = static_cast<char>(src_[i] | 0x20);
      const int base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (base != 0) {
        std::size_t k = i + 1;
        std::string body;
        while (k < src_.size()) {
          if (src_[k] == '_' && k + 1 < src_.size()) {
            ++k;
          }
          const int h = hex_value(src_[k]);
          if (h < 0 || h >= base) break;
          body += src_[k++];
        }
        if (!body.empty()) {
          push_integer(src_.substr(start, k - start), body, base, line);
          advance_to(k);
          return;
        }
      }
    }
    if (digits.size() > 1 && digits[0] == '0' &&
        digits.find_first_not_of('0') != std::string::npos) {
      // Python rejects leading zeros ("012"); jinja2 lexes "0" then "12" and the parser fails.
      push_integer("0", "0", 10, line);
      advance_to(start + 1);
      return;
    }
    push_integer(src_.substr(start, i - start), digits, 10, line);
    advance_to(i);
  }

  void push_integer(std::string text, const std::string& digits, int base, int line) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(digits.c_str(), &end, base);
    if (errno == ERANGE) syntax_error(line, "integer literal " + text + " exceeds 64 bits");
    Token t{TokenKind::integer, std::move(text), line};
    t.int_value = v;
    tokens_.push_back(std::move(t));
  }

  void lex_string(char quote) {
    const int line = line_;
    std::size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) {
      if (src_[i] == '\\') ++i;
      ++i;
    }
    if (i >= src_.size()) syntax_error(line, "unexpected end of string literal");
    Token t{TokenKind::string,
            decode_string_literal(std::string_view(src_).substr(pos_ + 1, i - pos_ - 1), line),
            line};
    tokens_.push_back(std::move(t));
    advance_to(i + 1);
  }

  void lex_operator(std::string& brackets) {
    static constexpr std::string_view kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                                "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                                ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
    for (std::string_view op : kOps) {
      if (src_.compare(pos_, op.size(), op) != 0) continue;
      const char c = op[0];
      if (op.size() == 1 && (c == '(' || c == '[' || c == '{')) {
        brackets += c;
      } else if (op.size() == 1 && (c == ')' || c == ']' || c == '}')) {
        const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
        if (brackets.empty()) syntax_error(line_, fmt::format("unexpected '{}'", c));
        if (brackets.back() != want) {
          syntax_error(line_, fmt::format("unexpected '{}', expected the closer of '{}'", c,
                                          brackets.back()));
        }
        brackets.pop_back();
      }
      push(TokenKind::op, std::string(op));
      advance_to(pos_ + op.size());
      return;
    }
    syntax_error(line_, fmt::format("unexpected char '{}'", src_.substr(pos_, 1)));
  }

  void emit_text(std::string_view text) {
    if (!text.empty()) push(TokenKind::text, std::string(text));
  }

  void push(TokenKind kind, std::string value) {
    tokens_.push_back(Token{kind, std::move(value), line_});
  }

  void advance_to(std::size_t pos) {
    for (std::size_t i = pos_; i < pos && i < src_.size(); ++i) {
      if (src_[i] == '\n') ++line_;
    }
    pos_ = pos;
  }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

}  // namespace fp8rl::jinja
