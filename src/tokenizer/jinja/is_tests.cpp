// jinja2's built-in tests (`x is defined`, `x is string`, ...), with Python's isinstance rules:
// bool counts as a number but not as an integer, Markup is a string.
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/unicode.h"

namespace fp8rl::jinja {
namespace {

const Value& only_arg(std::string_view name, CallArgs& args) {
  if (args.positional.size() != 1 || !args.keyword.empty())
    fail("test '{}' takes one argument", name);
  return args.positional[0];
}

void no_args(std::string_view name, CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty()) fail("test '{}' takes no arguments", name);
}

bool t_boolean(Interpreter&, const Value& v, CallArgs& a) {
  no_args("boolean", a);
  return v.is_bool();
}
bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("callable", a);
  return v.is_callable() || (v.is_object() && v.object_ptr()->find("__call__") != nullptr);
}
bool t_defined(Interpreter&, const Value& v, CallArgs& a) {
  no_args("defined", a);
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) {
  no_args("undefined", a);
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs& a) {
  no_args("none", a);
  return v.is_none();
}
bool t_true(Interpreter&, const Value& v, CallArgs& a) {
  no_args("true", a);
  return v.is_bool() && v.as_bool();
}
bool t_false(Interpreter&, const Value& v, CallArgs& a) {
  no_args("false", a);
  return v.is_bool() && !v.as_bool();
}
bool t_string(Interpreter&, const Value& v, CallArgs& a) {
  no_args("string", a);
  return v.is_string();
}
bool t_number(Interpreter&, const Value& v, CallArgs& a) {
  no_args("number", a);
  return v.is_number();
}
bool t_integer(Interpreter&, const Value& v, CallArgs& a) {
  no_args("integer", a);
  return v.is_int();
}
bool t_float(Interpreter&, const Value& v, CallArgs& a) {
  no_args("float", a);
  return v.is_float();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) {
  no_args("mapping", a);
  return v.is_dict();
}
bool t_escaped(Interpreter&, const Value& v, CallArgs& a) {
  no_args("escaped", a);
  return v.is_safe();
}

// iter(v) succeeds: strings, lists, tuples, dicts, and jinja2's Undefined (empty).
bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("iterable", a);
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined() ||
         (v.is_object() && !v.object_ptr()->is_namespace);
}

// len(v) and v.__getitem__ exist; Undefined has both.
bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  no_args("sequence", a);
  return v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined();
}

// value % 2 == 1 (odd) or == 0 (even), with Python's modulo.
bool parity(Budget& budget, const Value& v, bool odd) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int() || v.is_bool()) {
    const std::int64_t m = ((v.as_int() % 2) + 2) % 2;
    return m == (odd ? 1 : 0);
  }
  if (v.is_float()) {
    double m = std::fmod(v.as_float(), 2.0);
    if (m != 0.0 && m < 0) m += 2.0;
    return m == (odd ? 1.0 : 0.0);
  }
  // jinja2 computes value % 2: a string formats 2 into itself and never equals a number.
  if (v.is_string()) {
    percent_format(budget, v.str(), Value::integer(2));
    return false;
  }
  fail("unsupported operand type(s) for %: '{}' and 'int'", type_name(v));
}

bool t_odd(Interpreter& interp, const Value& v, CallArgs& a) {
  no_args("odd", a);
  return parity(interp.budget(), v, true);
}
bool t_even(Interpreter& interp, const Value& v, CallArgs& a) {
  no_args("even", a);
  return parity(interp.budget(), v, false);
}

bool t_divisibleby(Interpreter& interp, const Value& v, CallArgs& a) {
  const Value& n = only_arg("divisibleby", a);
  return equals(interp.binary(BinaryExpr::Op::mod, v, n), Value::integer(0));
}

bool t_eq(Interpreter&, const Value& v, CallArgs& a) {
  return equals(v, only_arg("eq", a));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& a) {
  return !equals(v, only_arg("ne", a));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
  return less(v, only_arg("lt", a));
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
  return less(only_arg("gt", a), v);
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = only_arg("le", a);
  return less(v, o) || (!less(o, v) && equals(v, o));
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = only_arg("ge", a);
  return less(o, v) || (!less(v, o) && equals(v, o));
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
  return contains(only_arg("in", a), v);
}

// Python's `is`: identity for containers and objects, value for None/bool and small ints (which
// CPython caches), never for floats or big ints created separately.
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = only_arg("sameas", a);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::none:
      return true;
    case Value::Kind::boolean:
      return v.as_bool() == o.as_bool();
    case Value::Kind::integer:
      return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::object:
      return v.object_ptr() == o.object_ptr();
    default:
      return v.same_ref(o);
  }
}

bool t_lower(Interpreter&, const Value& v, CallArgs& a) {
  no_args("lower", a);
  return py_iscase(to_str(v), false);
}
bool t_upper(Interpreter&, const Value& v, CallArgs& a) {
  no_args("upper", a);
  return py_iscase(to_str(v), true);
}

bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  no_args("filter", a);
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  no_args("test", a);
  return v.is_string() && find_test(v.str()) != nullptr;
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {">=", t_ge},
    {"gt", t_gt},
    {">", t_gt},
    {"greaterthan", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"<=", t_le},
    {"lt", t_lt},
    {"<", t_lt},
    {"lessthan", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"!=", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"lower", t_lower},
    {"upper", t_upper},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const TestEntry& e : kTests) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

}  // namespace fp8rl::jinja
