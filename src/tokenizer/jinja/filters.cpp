// jinja2's built-in filters (jinja2/filters.py semantics, autoescape off) plus HF's tojson.
// Filters jinja2 has but chat templates do not use (groupby, random, urlize, ...) are absent and
// fail with a clear error when a template runs them.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/unicode.h"

namespace fp8rl::jinja {
namespace {

Value soft_str(Interpreter& interp, const Value& v) {
  return v.is_string() ? v : Value::string(interp.text(v));
}

Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(py_lower(v.str())) : v;
}

// jinja2's make_attrgetter: "a.b.0" walks getitem (which falls back to attributes).
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_undefined() || attribute.is_none()) return parts;
  if (!attribute.is_string()) {
    parts.push_back(attribute);
    return parts;
  }
  const std::string& s = attribute.str();
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = s.find('.', start);
    const std::string part =
        s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    parts.push_back(digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

Value get_attribute(Interpreter& interp, Value item, const std::vector<Value>& parts,
                    const std::optional<Value>& default_value) {
  for (const Value& part : parts) {
    item = interp.getitem(item, part);
    if (default_value && item.is_undefined()) item = *default_value;
  }
  return item;
}

// Python's int(str, base): whitespace, sign, underscores between digits, 0x/0o/0b prefixes.
std::optional<std::int64_t> parse_python_int(const std::string& text, int base) {
  std::string s = py_strip(text, nullptr, StripSide::both);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.erase(0, 1);
  }
  if (s.size() >= 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    const int prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      s.erase(0, 2);
      if (!s.empty() && s[0] == '_') s.erase(0, 1);
    }
  }
  if (base == 0) {
    if (s.size() > 1 && s[0] == '0' && s.find_first_not_of("0_") != std::string::npos)
      return std::nullopt;
    base = 10;
  }
  if (base < 2 || base > 36 || s.empty()) return std::nullopt;
  unsigned long long v = 0;
  bool prev_digit = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == s.size()) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d < 0 || d >= base) return std::nullopt;
    if (v > (std::numeric_limits<unsigned long long>::max() - static_cast<unsigned>(d)) /
                static_cast<unsigned>(base)) {
      fail("integer overflow: '{}' exceeds 64 bits", text);
    }
    v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    prev_digit = true;
  }
  if (v > static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max()) +
              (negative ? 1ULL : 0ULL)) {
    fail("integer overflow: '{}' exceeds 64 bits", text);
  }
  return negative ? static_cast<std::int64_t>(0ULL - v) : static_cast<std::int64_t>(v);
}

// Python's float(str).
std::optional<double> parse_python_float(const std::string& text) {
  std::string s = py_strip(text, nullptr, StripSide::both);
  std::string sign;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    sign = s.substr(0, 1);
    s.erase(0, 1);
  }
  const std::string lower = py_lower(s);
  if (lower == "inf" || lower == "infinity") return sign == "-" ? -INFINITY : INFINITY;
  if (lower == "nan") return sign == "-" ? -NAN : NAN;
  // digits [. digits] [e [sign] digits], underscores only between digits, at least one digit.
  std::string clean;
  std::size_t i = 0;
  const auto digits = [&](bool& any) {
    bool prev = false;
    while (i < s.size()) {
      if (s[i] >= '0' && s[i] <= '9') {
        clean += s[i++];
        prev = any = true;
      } else if (s[i] == '_' && prev && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9') {
        ++i;
        prev = false;
      } else {
        break;
      }
    }
  };
  bool mantissa_digits = false;
  digits(mantissa_digits);
  if (i < s.size() && s[i] == '.') {
    clean += s[i++];
    digits(mantissa_digits);
  }
  if (!mantissa_digits) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    clean += s[i++];
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) clean += s[i++];
    bool exp_digits = false;
    digits(exp_digits);
    if (!exp_digits) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  return std::strtod((sign + clean).c_str(), nullptr);
}

Value to_list(std::vector<Value> items) {
  return Value::list(std::move(items));
}

// ---- filters ----

Value f_abs(Interpreter&, const Value& v, CallArgs& args) {
  Args a("abs", args, {}, 0);
  if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == std::numeric_limits<std::int64_t>::min())
      fail("integer overflow: abs() exceeds 64 bits");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_undefined()) fail_undefined(v);
  fail("bad operand type for abs(): '{}'", type_name(v));
}

Value f_attr(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("attr", args, {"name"}, 1);
  const std::string name = interp.text(a[0]);
  if (v.is_undefined()) fail_undefined(v);
  if (auto m = find_method(v, name)) return *m;
  if (v.is_object()) {
    if (const Value* x = v.object_ptr()->find(name)) return *x;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(v), name));
}

Value f_batch(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("batch", args, {"linecount", "fill_with"}, 1);
  const std::int64_t n = to_index(a[0], "linecount");
  if (n <= 0) fail("batch() needs a positive linecount");
  // A batch is a list of n items (filled to n with fill_with): n within the list budget even
  // when the input is shorter (jinja2 would accept any n there; no real template comes close).
  interp.budget().item_count(n, 1, fmt::format("batch({})", n));
  std::vector<Value> out, tmp;
  for (Value& item : interp.items_of(v)) {
    if (static_cast<std::int64_t>(tmp.size()) == n) {
      out.push_back(Value::list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(std::move(item));
  }
  if (!tmp.empty()) {
    if (a.has(1) && !a[1].is_none()) {
      while (static_cast<std::int64_t>(tmp.size()) < n) tmp.push_back(a[1]);
    }
    out.push_back(Value::list(std::move(tmp)));
  }
  return to_list(std::move(out));
}

Value f_capitalize(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("capitalize", args, {}, 0);
  const Value s = soft_str(interp, v);
  return Value::string(py_capitalize(s.str()), s.is_safe());
}

Value f_center(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("center", args, {"width"}, 0);
  CallArgs margs;
  margs.positional.push_back(a.get_or(0, Value::integer(80)));
  return interp.call(*find_method(soft_str(interp, v), "center"), std::move(margs));
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  Args a("default", args, {"default_value", "boolean"}, 0);
  const bool boolean = a.has(1) && truthy(a[1]);
  if (v.is_undefined() || (boolean && !truthy(v))) return a.get_or(0, Value::string(""));
  return v;
}

Value f_dictsort(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("dictsort", args, {"case_sensitive", "by", "reverse"}, 0);
  if (!v.is_dict()) fail("dictsort() needs a mapping, not {}", type_name(v));
  const bool case_sensitive = a.has(0) && truthy(a[0]);
  const std::string by = a.has(1) ? interp.text(a[1]) : "key";
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  const bool reverse = a.has(2) && truthy(a[2]);
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, val] : v.dict_data().items) {
    const Value& key = by == "key" ? k : val;
    keyed.emplace_back(case_sensitive ? key : ignore_case(key), Value::tuple({k, val}));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return to_list(std::move(out));
}

Value f_escape(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("escape", args, {}, 0);
  if (v.is_safe()) return v;
  return Value::string(html_escape(interp.text(v)), true);
}

Value f_first(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("first", args, {}, 0);
  const std::vector<Value> items = interp.items_of(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("last", args, {}, 0);
  const std::vector<Value> items = interp.items_of(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  Args a("float", args, {"default"}, 0);
  const Value fallback = a.get_or(0, Value::floating(0.0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::floating(v.as_number());
  if (v.is_string()) {
    if (auto f = parse_python_float(v.str())) return Value::floating(*f);
  }
  return fallback;
}

Value f_format(Interpreter& interp, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    fail("can't handle positional and keyword arguments at the same time");
  }
  Value format_args;
  if (!args.keyword.empty()) {
    std::vector<std::pair<Value, Value>> kw;
    for (auto& [k, x] : args.keyword) kw.emplace_back(Value::string(k), x);
    format_args = Value::dict(std::move(kw));
  } else {
    format_args = Value::tuple(args.positional);
  }
  const Value s = soft_str(interp, v);
  return Value::string(percent_format(interp.budget(), s.str(), format_args), s.is_safe());
}

Value f_indent(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("indent", args, {"width", "first", "blank"}, 0);
  std::string indention;
  if (a.has(0) && a[0].is_string()) {
    indention = a[0].str();
  } else {
    const std::int64_t w = a.has(0) ? to_index(a[0], "width") : 4;
    indention = std::string(interp.budget().string_bytes(w, 1, fmt::format("indent({})", w)), ' ');
  }
  const bool first = a.has(1) && truthy(a[1]);
  const bool blank = a.has(2) && truthy(a[2]);
  // jinja2 appends "\n" to the input: anything but a string is a TypeError.
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) fail("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v));
  const std::vector<std::string> lines = py_splitlines(interp.text(v) + "\n");
  // The result: the input plus one indentation per line, checked before it is built.
  interp.budget().string_bytes(static_cast<std::int64_t>(lines.size()) + 1,
                               static_cast<std::int64_t>(indention.size()), "indent()");
  interp.budget().check_string(v.str().size() + (lines.size() + 1) * indention.size(), "indent()");
  std::string out;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (first) out = indention + out;
  return Value::string(std::move(out), v.is_safe());
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  Args a("int", args, {"default", "base"}, 0);
  const Value fallback = a.get_or(0, Value::integer(0));
  const std::int64_t base = a.has(1) ? to_index(a[1], "base") : 10;
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  const auto from_float = [&](double f) -> Value {
    if (std::isnan(f)) return fallback;
    if (std::isinf(f)) fail("cannot convert float infinity to integer");
    if (f >= 9223372036854775808.0 || f < -9223372036854775808.0)
      fail("integer overflow: {} exceeds 64 bits", float_repr(f));
    return Value::integer(static_cast<std::int64_t>(std::trunc(f)));
  };
  if (v.is_float()) return from_float(v.as_float());
  if (v.is_string()) {
    if (auto i = parse_python_int(v.str(), static_cast<int>(base))) return Value::integer(*i);
    // jinja2's quirk: "42.23"|int is 42.
    if (auto f = parse_python_float(v.str())) return from_float(*f);
  }
  return fallback;
}

Value f_items(Interpreter&, const Value& v, CallArgs& args) {
  Args a("items", args, {}, 0);
  if (v.is_undefined()) return to_list({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict_data().items) out.push_back(Value::tuple({k, x}));
  return to_list(std::move(out));
}

Value f_join(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("join", args, {"d", "attribute"}, 0);
  const std::string sep = a.has(0) ? interp.text(a[0]) : "";
  const std::vector<Value> parts = attribute_parts(a[1]);
  std::string out;
  bool first = true;
  for (const Value& item : interp.items_of(v)) {
    const std::string piece =
        interp.text(a.has(1) ? get_attribute(interp, item, parts, std::nullopt) : item);
    interp.budget().check_string(out.size() + sep.size() + piece.size(), "join()");
    if (!first) out += sep;
    first = false;
    out += piece;
  }
  return Value::string(std::move(out));
}

Value f_length(Interpreter&, const Value& v, CallArgs& args) {
  Args a("length", args, {}, 0);
  return Value::integer(length(v));
}

Value f_list(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("list", args, {}, 0);
  return to_list(interp.items_of(v));
}

Value f_lower(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("lower", args, {}, 0);
  const Value s = soft_str(interp, v);
  return Value::string(py_lower(s.str()), s.is_safe());
}

Value f_upper(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("upper", args, {}, 0);
  const Value s = soft_str(interp, v);
  return Value::string(py_upper(s.str()), s.is_safe());
}

Value f_map(Interpreter& interp, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  // jinja2's map, select, reject, selectattr and rejectattr yield nothing for a falsy input,
  // before looking at their arguments.
  if (!truthy(v)) return to_list({});
  const auto attr_kw = std::find_if(args.keyword.begin(), args.keyword.end(),
                                    [](const auto& kv) { return kv.first == "attribute"; });
  if (args.positional.empty() && attr_kw != args.keyword.end()) {
    std::optional<Value> default_value;
    for (const auto& [k, x] : args.keyword) {
      if (k == "default") {
        if (!x.is_none()) default_value = x;
      } else if (k != "attribute") {
        fail("Unexpected keyword argument '{}'", k);
      }
    }
    const std::vector<Value> parts = attribute_parts(attr_kw->second);
    for (const Value& item : interp.items_of(v))
      out.push_back(get_attribute(interp, item, parts, default_value));
    return to_list(std::move(out));
  }
  if (args.positional.empty()) fail("map requires a filter argument");
  const std::string name = interp.text(args.positional[0]);
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : interp.items_of(v)) out.push_back(interp.apply_filter(name, item, rest));
  return to_list(std::move(out));
}

Value min_max(Interpreter& interp, const Value& v, CallArgs& args, bool want_max) {
  Args a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"}, 0);
  const bool case_sensitive = a.has(0) && truthy(a[0]);
  const std::vector<Value> parts = attribute_parts(a[1]);
  const std::vector<Value> items = interp.items_of(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const auto key = [&](const Value& item) {
    Value k = get_attribute(interp, item, parts, std::nullopt);
    return case_sensitive ? k : ignore_case(k);
  };
  std::size_t best = 0;
  Value best_key = key(items[0]);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? less(best_key, k) : less(k, best_key)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
Value f_max(Interpreter& interp, const Value& v, CallArgs& args) {
  return min_max(interp, v, args, true);
}
Value f_min(Interpreter& interp, const Value& v, CallArgs& args) {
  return min_max(interp, v, args, false);
}

Value select_common(Interpreter& interp, const Value& v, CallArgs& args, bool lookup_attr,
                    bool keep_when) {
  if (!truthy(v)) return to_list({});
  std::size_t off = 0;
  std::vector<Value> parts;
  if (lookup_attr) {
    if (args.positional.empty()) fail("Missing parameter for attribute name");
    parts = attribute_parts(args.positional[0]);
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > off) {
    test = interp.text(args.positional[off]);
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(off) + 1,
                                args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (const Value& item : interp.items_of(v)) {
    const Value subject = lookup_attr ? get_attribute(interp, item, parts, std::nullopt) : item;
    const bool passed = test ? interp.apply_test(*test, subject, test_args) : truthy(subject);
    if (passed == keep_when) out.push_back(item);
  }
  return to_list(std::move(out));
}
Value f_select(Interpreter& i, const Value& v, CallArgs& a) {
  return select_common(i, v, a, false, true);
}
Value f_reject(Interpreter& i, const Value& v, CallArgs& a) {
  return select_common(i, v, a, false, false);
}
Value f_selectattr(Interpreter& i, const Value& v, CallArgs& a) {
  return select_common(i, v, a, true, true);
}
Value f_rejectattr(Interpreter& i, const Value& v, CallArgs& a) {
  return select_common(i, v, a, true, false);
}

Value f_replace(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("replace", args, {"old", "new", "count"}, 2);
  CallArgs margs;
  margs.positional = {Value::string(interp.text(a[0])), Value::string(interp.text(a[1]))};
  if (a.has(2) && !a[2].is_none()) margs.positional.push_back(a[2]);
  return interp.call(*find_method(Value::string(interp.text(v)), "replace"), std::move(margs));
}

Value f_reverse(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("reverse", args, {}, 0);
  if (v.is_string()) {
    std::u32string cps = utf8_decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::string(utf8_encode(cps), v.is_safe());
  }
  if (!(v.is_sequence() || v.is_dict() || v.is_undefined())) fail("argument must be iterable");
  std::vector<Value> items = interp.items_of(v);
  std::reverse(items.begin(), items.end());
  return to_list(std::move(items));
}

Value f_round(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("round", args, {"precision", "method"}, 0);
  const std::int64_t precision = a.has(0) ? to_index(a[0], "precision") : 0;
  const std::string method = a.has(1) ? interp.text(a[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    fail("method must be common, ceil or floor");
  }
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) fail("type {} doesn't define __round__ method", type_name(v));
  if (precision > 400 || precision < -400) fail("round() precision out of range");
  const int p = static_cast<int>(precision);
  if (method == "common") {
    if (v.is_float()) return Value::floating(python_round(v.as_float(), p));
    if (p >= 0) return Value::integer(v.as_int());
    // int.__round__ with negative digits: half to even at 10**-p.
    if (-p > 18) return Value::integer(0);
    std::int64_t scale = 1;
    for (int i = 0; i < -p; ++i) scale *= 10;
    const std::int64_t x = v.as_int();
    std::int64_t q = x / scale, r = x % scale;
    if (r < 0) {
      r += scale;
      q -= 1;
    }
    if (2 * r > scale || (2 * r == scale && (q & 1))) q += 1;
    return Value::integer(q * scale);
  }
  const double scale = std::pow(10.0, p);
  const double x = v.as_number() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("safe", args, {}, 0);
  return Value::string(interp.text(v), true);
}

Value f_sort(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("sort", args, {"reverse", "case_sensitive", "attribute"}, 0);
  const bool reverse = a.has(0) && truthy(a[0]);
  const bool case_sensitive = a.has(1) && truthy(a[1]);
  std::vector<std::vector<Value>> attrs;  // comma-separated attributes sort by each in turn
  if (a.has(2) && a[2].is_string()) {
    const std::string& s = a[2].str();
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = s.find(',', start);
      attrs.push_back(attribute_parts(Value::string(
          s.substr(start, comma == std::string::npos ? std::string::npos : comma - start))));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else if (a.has(2) && !a[2].is_none()) {
    attrs.push_back(attribute_parts(a[2]));
  }
  // jinja2 sorts by a list of keys (one per attribute), so equal keys compare through list
  // equality and never reach '<' (two undefined keys sort fine).
  if (attrs.empty()) attrs.emplace_back();
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : interp.items_of(v)) {
    std::vector<Value> ks;
    for (const auto& parts : attrs) {
      Value k = get_attribute(interp, item, parts, std::nullopt);
      ks.push_back(case_sensitive ? k : ignore_case(k));
    }
    keyed.emplace_back(Value::list(std::move(ks)), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return to_list(std::move(out));
}

Value f_string(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("string", args, {}, 0);
  return soft_str(interp, v);
}

Value f_sum(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("sum", args, {"attribute", "start"}, 0);
  const std::vector<Value> parts = attribute_parts(a[0]);
  Value total = a.get_or(1, Value::integer(0));
  for (const Value& item : interp.items_of(v)) {
    total = interp.binary(BinaryExpr::Op::add, total,
                          a.has(0) ? get_attribute(interp, item, parts, std::nullopt) : item);
  }
  return total;
}

bool title_separator(char32_t cp) {
  return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
}

Value f_title(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("title", args, {}, 0);
  // jinja2 splits on runs of -, whitespace, ( { [ < and capitalises the first character of each
  // piece (unlike str.title(), "they're" stays "They're").
  const std::u32string s = utf8_decode(interp.text(v));
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    const bool sep = title_separator(s[i]);
    while (j < s.size() && title_separator(s[j]) == sep) ++j;
    std::string first;
    utf8_append(first, s[i]);
    out += py_upper(first) + py_lower(utf8_encode(std::u32string_view(s).substr(i + 1, j - i - 1)));
    i = j;
  }
  return Value::string(std::move(out), v.is_safe());
}

Value f_tojson(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}, 0);
  JsonDumpOptions options;
  options.ensure_ascii = a.has(0) && truthy(a[0]);
  if (a.has(1) && !a[1].is_none()) {
    if (a[1].is_string()) {
      options.indent = a[1].str();
    } else {
      const std::int64_t n = to_index(a[1], "indent");
      options.indent =
          std::string(interp.budget().string_bytes(n, 1, fmt::format("tojson(indent={})", n)), ' ');
    }
  }
  options.max_bytes = interp.budget().limits().max_string_bytes;
  if (a.has(2) && !a[2].is_none()) {
    const std::vector<Value> seps = interp.items_of(a[2]);
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      fail("separators must be a pair of strings");
    }
    options.item_separator = seps[0].str();
    options.key_separator = seps[1].str();
  }
  options.sort_keys = a.has(3) && truthy(a[3]);
  std::string out = dump_json(v, options);
  interp.budget().check_string(out.size(), "tojson()");
  return Value::string(std::move(out));
}

Value f_trim(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("trim", args, {"chars"}, 0);
  const Value s = soft_str(interp, v);
  if (a.has(0) && !a[0].is_none()) {
    const std::string chars = interp.text(a[0]);
    return Value::string(py_strip(s.str(), &chars, StripSide::both), s.is_safe());
  }
  return Value::string(py_strip(s.str(), nullptr, StripSide::both), s.is_safe());
}

Value f_truncate(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("truncate", args, {"length", "killwords", "end", "leeway"}, 0);
  const std::int64_t len = a.has(0) ? to_index(a[0], "length") : 255;
  const bool killwords = a.has(1) && truthy(a[1]);
  const std::u32string end = utf8_decode(a.has(2) ? interp.text(a[2]) : "...");
  const std::int64_t leeway = a.has(3) && !a[3].is_none() ? to_index(a[3], "leeway") : 5;
  if (len < static_cast<std::int64_t>(end.size()))
    fail("expected length >= {}, got {}", end.size(), len);
  if (leeway < 0) fail("expected leeway >= 0, got {}", leeway);
  if (!v.is_string()) {
    // len(s) first: undefined is empty, containers pass through when short enough, and
    // anything else fails as in Python.
    if (v.is_undefined() || length(v) <= len + leeway) return v;
    fail("'{}' object has no attribute 'rsplit'", type_name(v));
  }
  const std::u32string s = utf8_decode(v.str());
  if (static_cast<std::int64_t>(s.size()) <= len + leeway) return v;
  std::u32string head = s.substr(0, static_cast<std::size_t>(len) - end.size());
  if (!killwords) {
    const std::size_t sp = head.rfind(U' ');
    if (sp != std::u32string::npos) head = head.substr(0, sp);
  }
  return Value::string(utf8_encode(head + end));
}

Value f_unique(Interpreter& interp, const Value& v, CallArgs& args) {
  Args a("unique", args, {"case_sensitive", "attribute"}, 0);
  const bool case_sensitive = a.has(0) && truthy(a[0]);
  const std::vector<Value> parts = attribute_parts(a[1]);
  std::vector<Value> seen, out;
  for (const Value& item : interp.items_of(v)) {
    Value key = get_attribute(interp, item, parts, std::nullopt);
    if (!case_sensitive) key = ignore_case(key);
    if (!hashable(key)) fail("unhashable type: '{}'", type_name(key));
    interp.budget().charge_items(static_cast<std::int64_t>(seen.size()));  // a linear search
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return to_list(std::move(out));
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& e : kFilters) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

}  // namespace fp8rl::jinja
