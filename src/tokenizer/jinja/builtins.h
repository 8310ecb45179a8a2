// The interpreter's built-in library, by name: filters (filters.cpp), tests (is_tests.cpp),
// methods of str/dict/list (methods.cpp) and global functions (globals.cpp), plus the argument
// binding they share. Internal to src/tokenizer/jinja.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/budget.h"
#include "tokenizer/jinja/value.h"

namespace fp8rl::jinja {

using FilterFn = Value (*)(Interpreter&, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter&, const Value& input, CallArgs& args);

// nullptr when unknown.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// The bound method `object.name` of a str, dict, list or tuple, if there is one. Methods that
// mutate (list.append, dict.update, ...) are refused as jinja2's ImmutableSandboxedEnvironment
// refuses them: an undefined that fails when used.
std::optional<Value> find_method(const Value& object, std::string_view name);

// Global functions: range, dict, namespace, joiner, cycler, raise_exception, strftime_now.
std::optional<Value> find_global(std::string_view name);

// Python-style argument binding: positional then keyword, checked against parameter names.
class Args {
 public:
  Args(std::string_view function, CallArgs& args, std::initializer_list<std::string_view> params,
       std::size_t required);
  bool has(std::size_t i) const { return bound_[i].has_value(); }
  const Value& operator[](std::size_t i) const;  // undefined when not given
  Value get_or(std::size_t i, Value fallback) const { return has(i) ? *bound_[i] : fallback; }

 private:
  std::vector<std::optional<Value>> bound_;
};

// Helpers shared by the library.
std::int64_t to_index(const Value& v, std::string_view what);  // int or bool, else TypeError
std::string html_escape(std::string_view s);                   // markupsafe.escape
// Python str.format / str % args, as the sandbox runs them.
std::string python_format(Interpreter& interp, std::string_view format, CallArgs& args);
// Widths and precisions (and the text they make) are checked against `budget` first.
std::string percent_format(Budget& budget, std::string_view format, const Value& args);
// Python's builtin round(x, ndigits) for floats.
double python_round(double x, int ndigits);

}  // namespace fp8rl::jinja
