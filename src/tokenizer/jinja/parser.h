// Tokens -> syntax tree, following jinja2's grammar and operator precedence (lowest first):
// `x if c else y`, or, and, not, comparisons and `in` (chained), + -, ~, * / // %, **,
// unary - +, then postfix .attr [item] (call) and |filter / is test.
//
// Unknown filter and test names are rejected here as jinja2 rejects them when compiling, except
// inside {% if %} and conditional expressions, where jinja2 defers the failure to run time.
// Nesting is limited (kMaxParseDepth) so that no template can exhaust the stack.
#pragma once

#include <memory>
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace fp8rl::jinja {

inline constexpr int kMaxParseDepth = 400;
// Blocks ({% if %}, {% for %}, ...) nested in one another. jinja2 itself stops earlier for some
// (Python's compiler refuses 99 nested ifs, or 21 nested fors).
inline constexpr int kMaxBlockDepth = 100;

// Throws TemplateError (syntax) with the template line.
std::unique_ptr<Template> parse_template(std::string_view source);

}  // namespace fp8rl::jinja
