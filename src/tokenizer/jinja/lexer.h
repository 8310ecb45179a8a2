// Template source -> tokens, with jinja2's whitespace rules as HF configures them: trim_blocks
// (the first newline after a block or comment tag is dropped), lstrip_blocks (whitespace
// before a block or comment tag at the start of a line is dropped), `-` (strip all whitespace on
// that side) and `+` (keep it) modifiers, {% raw %} blocks, CR/CRLF normalised to LF, and one
// trailing newline of the source dropped (keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp8rl::jinja {

enum class TokenKind {
  text,         // literal output between tags
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,
  string,
  integer,
  floating,
  op,  // operator or punctuation, text in `value`
  eof
};

struct Token {
  TokenKind kind;
  std::string value;  // text, name, decoded string literal, or operator
  int line = 1;
  std::int64_t int_value = 0;
  double float_value = 0.0;
};

// Throws TemplateError (syntax) on unterminated tags, comments, strings or raw blocks, and on
// characters that start no token.
std::vector<Token> tokenize(std::string_view source);

}  // namespace fp8rl::jinja
