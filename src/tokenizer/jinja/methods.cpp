// Methods of str, dict, list and tuple that templates call (`s.startswith(...)`,
// `d.items()`, ...), bound to their receiver. Markup receivers follow markupsafe: the wrapped
// methods escape their string arguments and return Markup.
#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/unicode.h"

namespace fp8rl::jinja {
namespace {

using Method = Value (*)(Interpreter&, const Value& self, CallArgs& args);

std::string arg_str(const Value& v, std::string_view method) {
  if (!v.is_string()) {
    fail("{}() argument must be str, not {}", method, type_name(v));
  }
  return v.str();
}

// Python's optional start/end arguments of find/count/startswith, as code point offsets.
std::pair<std::size_t, std::size_t> span(const Args& a, std::size_t start_i, std::size_t len) {
  const auto pos = [&](std::size_t i, std::int64_t fallback) {
    if (!a.has(i) || a[i].is_none()) return fallback;
    std::int64_t p = to_index(a[i], "slice index");
    const auto n = static_cast<std::int64_t>(len);
    if (p < 0) p = std::max<std::int64_t>(0, p + n);
    return std::min(p, n);
  };
  return {static_cast<std::size_t>(pos(start_i, 0)),
          static_cast<std::size_t>(pos(start_i + 1, static_cast<std::int64_t>(len)))};
}

Value affix_test(const Value& self, CallArgs& args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  Args a(name, args, {"affix", "start", "end"}, 1);
  const std::u32string s = utf8_decode(self.str());
  const auto [begin, end] = span(a, 1, s.size());
  if (begin > end) return Value::boolean(false);
  const std::u32string_view window = std::u32string_view(s).substr(begin, end - begin);
  std::vector<Value> candidates;
  if (a[0].is_tuple()) {
    candidates = a[0].items();
  } else if (a[0].is_string()) {
    candidates.push_back(a[0]);
  } else {
    fail("{} first arg must be str or a tuple of str, not {}", name, type_name(a[0]));
  }
  for (const Value& c : candidates) {
    const std::u32string affix = utf8_decode(arg_str(c, name));
    if (affix.size() > window.size()) continue;
    if (prefix ? window.substr(0, affix.size()) == affix
               : window.substr(window.size() - affix.size()) == affix) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}

std::vector<Value> split_impl(Budget& budget, const std::string& text, const Value& sep,
                              std::int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    // Runs of whitespace separate; leading/trailing whitespace yields no empty parts.
    const std::u32string s = utf8_decode(text);
    std::vector<std::pair<std::size_t, std::size_t>> words;
    std::size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && py_isspace(s[i])) ++i;
      if (i >= s.size()) break;
      std::size_t j = i;
      while (j < s.size() && !py_isspace(s[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit >= 0 && static_cast<std::int64_t>(words.size()) > maxsplit) {
      // The unsplit remainder keeps its inner and outer whitespace, as in Python.
      const auto k = static_cast<std::size_t>(maxsplit);
      std::vector<std::pair<std::size_t, std::size_t>> kept;
      if (!from_right) {
        kept.assign(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(k));
        kept.emplace_back(words[k].first, s.size());
      } else {
        const std::size_t n = words.size();
        kept.emplace_back(0, words[n - k - 1].second);
        kept.insert(kept.end(), words.end() - static_cast<std::ptrdiff_t>(k), words.end());
      }
      words = std::move(kept);
    }
    budget.check_items(words.size(), "split()");
    std::vector<Value> out;
    for (auto [b, e] : words)
      out.push_back(Value::string(utf8_encode(std::u32string_view(s).substr(b, e - b))));
    return out;
  }
  const std::string d = arg_str(sep, "split");
  if (d.empty()) fail("empty separator");
  std::vector<std::size_t> cuts;  // byte offsets of separators used
  if (!from_right) {
    for (std::size_t p = text.find(d); p != std::string::npos; p = text.find(d, p + d.size())) {
      if (maxsplit >= 0 && static_cast<std::int64_t>(cuts.size()) >= maxsplit) break;
      cuts.push_back(p);
      if (cuts.size() > static_cast<std::size_t>(budget.limits().max_items))
        budget.check_items(cuts.size() + 1, "split()");
    }
  } else {
    std::size_t limit = text.size();
    while (limit >= d.size()) {
      const std::size_t p = text.rfind(d, limit - d.size());
      if (p == std::string::npos) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(cuts.size()) >= maxsplit) break;
      cuts.push_back(p);
      limit = p;
    }
    std::reverse(cuts.begin(), cuts.end());
  }
  budget.check_items(cuts.size() + 1, "split()");
  std::vector<Value> out;
  std::size_t start = 0;
  for (std::size_t c : cuts) {
    out.push_back(Value::string(text.substr(start, c - start)));
    start = c + d.size();
  }
  out.push_back(Value::string(text.substr(start)));
  return out;
}

// The text grows by repl per replacement: checked against the budget as it grows.
std::string replace_impl(Budget& budget, const std::string& s, const std::string& old,
                         const std::string& repl, std::int64_t count) {
  std::string out;
  const auto grow = [&](std::size_t more) { budget.check_string(out.size() + more, "replace()"); };
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const std::u32string cps = utf8_decode(s);
    std::int64_t done = 0;
    for (char32_t cp : cps) {
      if (count < 0 || done < count) {
        grow(repl.size() + 4);
        out += repl;
        ++done;
      }
      utf8_append(out, cp);
    }
    grow(repl.size());
    if (count < 0 || done < count) out += repl;
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t p = s.find(old, start);
    if (p == std::string::npos) break;
    grow(p - start + repl.size());
    out.append(s, start, p - start);
    out += repl;
    start = p + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::int64_t find_impl(const Value& self, CallArgs& args, const char* name, bool from_right) {
  Args a(name, args, {"sub", "start", "end"}, 1);
  const std::u32string s = utf8_decode(self.str());
  const std::u32string sub = utf8_decode(arg_str(a[0], name));
  const auto [begin, end] = span(a, 1, s.size());
  if (begin > end || sub.size() > end - begin) return -1;
  const std::u32string_view window = std::u32string_view(s).substr(begin, end - begin);
  const std::size_t p = from_right ? window.rfind(sub) : window.find(sub);
  return p == std::u32string_view::npos ? -1 : static_cast<std::int64_t>(begin + p);
}

std::string justify(Budget& budget, const Value& self, CallArgs& args, const char* name, char how) {
  Args a(name, args, {"width", "fillchar"}, 1);
  const std::int64_t width = to_index(a[0], "width");
  std::string fill = a.has(1) ? arg_str(a[1], name) : " ";
  if (utf8_length(fill) != 1) fail("The fill character must be exactly one character long");
  const std::string& s = self.str();
  const auto len = static_cast<std::int64_t>(utf8_length(s));
  if (width <= len) return s;
  const std::int64_t total = width - len;
  // The padding is checked (width * fill bytes, overflow caught) before it is made.
  budget.check_string(s.size() + budget.string_bytes(total, static_cast<std::int64_t>(fill.size()),
                                                     fmt::format("{}({})", name, width)),
                      name);
  std::int64_t left = 0;
  if (how == '>') left = total;
  if (how == '^') left = total / 2 + (total & width & 1);  // CPython's centring
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

Value make_str(const Value& self, std::string s) {
  return Value::string(std::move(s), self.is_safe());
}

// ---- str methods ----
Value str_startswith(Interpreter&, const Value& self, CallArgs& args) {
  return affix_test(self, args, true);
}
Value str_endswith(Interpreter&, const Value& self, CallArgs& args) {
  return affix_test(self, args, false);
}

Value split_common(Budget& budget, const Value& self, CallArgs& args, bool from_right) {
  Args a(from_right ? "rsplit" : "split", args, {"sep", "maxsplit"}, 0);
  const std::int64_t maxsplit = a.has(1) ? to_index(a[1], "maxsplit") : -1;
  std::vector<Value> parts = split_impl(budget, self.str(), a[0], maxsplit, from_right);
  if (self.is_safe()) {
    for (Value& p : parts) p = Value::string(p.str(), true);
  }
  return Value::list(std::move(parts));
}
Value str_split(Interpreter& interp, const Value& self, CallArgs& args) {
  return split_common(interp.budget(), self, args, false);
}
Value str_rsplit(Interpreter& interp, const Value& self, CallArgs& args) {
  return split_common(interp.budget(), self, args, true);
}

Value strip_common(const Value& self, CallArgs& args, const char* name, StripSide side) {
  Args a(name, args, {"chars"}, 0);
  if (a.has(0) && !a[0].is_none()) {
    const std::string chars = arg_str(a[0], name);
    return make_str(self, py_strip(self.str(), &chars, side));
  }
  return make_str(self, py_strip(self.str(), nullptr, side));
}
Value str_strip(Interpreter&, const Value& self, CallArgs& args) {
  return strip_common(self, args, "strip", StripSide::both);
}
Value str_lstrip(Interpreter&, const Value& self, CallArgs& args) {
  return strip_common(self, args, "lstrip", StripSide::left);
}
Value str_rstrip(Interpreter&, const Value& self, CallArgs& args) {
  return strip_common(self, args, "rstrip", StripSide::right);
}

Value str_replace(Interpreter& interp, const Value& self, CallArgs& args) {
  Args a("replace", args, {"old", "new", "count"}, 2);
  const std::int64_t count = a.has(2) ? to_index(a[2], "count") : -1;
  return make_str(self, replace_impl(interp.budget(), self.str(), arg_str(a[0], "replace"),
                                     arg_str(a[1], "replace"), count));
}

Value str_upper(Interpreter&, const Value& self, CallArgs& args) {
  Args a("upper", args, {}, 0);
  return make_str(self, py_upper(self.str()));
}
Value str_lower(Interpreter&, const Value& self, CallArgs& args) {
  Args a("lower", args, {}, 0);
  return make_str(self, py_lower(self.str()));
}
Value str_title(Interpreter&, const Value& self, CallArgs& args) {
  Args a("title", args, {}, 0);
  return make_str(self, py_title(self.str()));
}
Value str_capitalize(Interpreter&, const Value& self, CallArgs& args) {
  Args a("capitalize", args, {}, 0);
  return make_str(self, py_capitalize(self.str()));
}

Value str_format(Interpreter& interp, const Value& self, CallArgs& args) {
  return make_str(self, python_format(interp, self.str(), args));
}

Value str_join(Interpreter& interp, const Value& self, CallArgs& args) {
  Args a("join", args, {"iterable"}, 1);
  std::string out;
  bool first = true;
  for (const Value& item : interp.items_of(a[0])) {
    if (!item.is_string()) fail("sequence item: expected str instance, {} found", type_name(item));
    const std::string piece =
        self.is_safe() && !item.is_safe() ? html_escape(item.str()) : item.str();
    interp.budget().check_string(out.size() + self.str().size() + piece.size(), "str.join()");
    if (!first) out += self.str();
    first = false;
    out += piece;
  }
  return make_str(self, std::move(out));
}

Value str_find(Interpreter&, const Value& self, CallArgs& args) {
  return Value::integer(find_impl(self, args, "find", false));
}
Value str_rfind(Interpreter&, const Value& self, CallArgs& args) {
  return Value::integer(find_impl(self, args, "rfind", true));
}
Value str_index(Interpreter&, const Value& self, CallArgs& args) {
  const std::int64_t i = find_impl(self, args, "index", false);
  if (i < 0) fail("substring not found");
  return Value::integer(i);
}
Value str_rindex(Interpreter&, const Value& self, CallArgs& args) {
  const std::int64_t i = find_impl(self, args, "rindex", true);
  if (i < 0) fail("substring not found");
  return Value::integer(i);
}

Value str_count(Interpreter&, const Value& self, CallArgs& args) {
  Args a("count", args, {"sub", "start", "end"}, 1);
  const std::u32string s = utf8_decode(self.str());
  const std::u32string sub = utf8_decode(arg_str(a[0], "count"));
  const auto [begin, end] = span(a, 1, s.size());
  if (begin > end) return Value::integer(0);
  if (sub.empty()) return Value::integer(static_cast<std::int64_t>(end - begin + 1));
  std::int64_t n = 0;
  const std::u32string_view window = std::u32string_view(s).substr(begin, end - begin);
  for (std::size_t p = window.find(sub); p != std::u32string_view::npos;
       p = window.find(sub, p + sub.size()))
    ++n;
  return Value::integer(n);
}

Value str_splitlines(Interpreter&, const Value& self, CallArgs& args) {
  Args a("splitlines", args, {"keepends"}, 0);
  if (a.has(0) && truthy(a[0])) fail("splitlines(keepends=True) is not supported");
  std::vector<Value> out;
  for (std::string& line : py_splitlines(self.str()))
    out.push_back(make_str(self, std::move(line)));
  return Value::list(std::move(out));
}

Value partition_common(const Value& self, CallArgs& args, bool from_right) {
  const char* name = from_right ? "rpartition" : "partition";
  Args a(name, args, {"sep"}, 1);
  const std::string sep = arg_str(a[0], name);
  if (sep.empty()) fail("empty separator");
  const std::string& s = self.str();
  const std::size_t p = from_right ? s.rfind(sep) : s.find(sep);
  if (p == std::string::npos) {
    return from_right ? Value::tuple({make_str(self, ""), make_str(self, ""), self})
                      : Value::tuple({self, make_str(self, ""), make_str(self, "")});
  }
  return Value::tuple({make_str(self, s.substr(0, p)), make_str(self, sep),
                       make_str(self, s.substr(p + sep.size()))});
}
Value str_partition(Interpreter&, const Value& self, CallArgs& args) {
  return partition_common(self, args, false);
}
Value str_rpartition(Interpreter&, const Value& self, CallArgs& args) {
  return partition_common(self, args, true);
}

Value str_removeprefix(Interpreter&, const Value& self, CallArgs& args) {
  Args a("removeprefix", args, {"prefix"}, 1);
  const std::string p = arg_str(a[0], "removeprefix");
  const std::string& s = self.str();
  return make_str(self, s.starts_with(p) ? s.substr(p.size()) : s);
}
Value str_removesuffix(Interpreter&, const Value& self, CallArgs& args) {
  Args a("removesuffix", args, {"suffix"}, 1);
  const std::string p = arg_str(a[0], "removesuffix");
  const std::string& s = self.str();
  return make_str(self, !p.empty() && s.ends_with(p) ? s.substr(0, s.size() - p.size()) : s);
}

Value str_center(Interpreter& interp, const Value& self, CallArgs& args) {
  return make_str(self, justify(interp.budget(), self, args, "center", '^'));
}
Value str_ljust(Interpreter& interp, const Value& self, CallArgs& args) {
  return make_str(self, justify(interp.budget(), self, args, "ljust", '<'));
}
Value str_rjust(Interpreter& interp, const Value& self, CallArgs& args) {
  return make_str(self, justify(interp.budget(), self, args, "rjust", '>'));
}

Value str_zfill(Interpreter& interp, const Value& self, CallArgs& args) {
  Args a("zfill", args, {"width"}, 1);
  const std::int64_t width = to_index(a[0], "width");
  std::string s = self.str();
  const auto len = static_cast<std::int64_t>(utf8_length(s));
  if (width <= len) return make_str(self, s);
  const std::string zeros(
      interp.budget().string_bytes(width - len, 1, fmt::format("zfill({})", width)), '0');
  interp.budget().check_string(s.size() + zeros.size(), "zfill()");
  if (!s.empty() && (s[0] == '+' || s[0] == '-'))
    return make_str(self, s.substr(0, 1) + zeros + s.substr(1));
  return make_str(self, zeros + s);
}

Value str_isspace(Interpreter&, const Value& self, CallArgs& args) {
  Args a("isspace", args, {}, 0);
  const std::u32string s = utf8_decode(self.str());
  return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), py_isspace));
}

Value str_isupper(Interpreter&, const Value& self, CallArgs& args) {
  Args a("isupper", args, {}, 0);
  return Value::boolean(py_iscase(self.str(), true));
}
Value str_islower(Interpreter&, const Value& self, CallArgs& args) {
  Args a("islower", args, {}, 0);
  return Value::boolean(py_iscase(self.str(), false));
}

// ---- dict methods ----
Value dict_get(Interpreter&, const Value& self, CallArgs& args) {
  Args a("get", args, {"key", "default"}, 1);
  if (!hashable(a[0])) fail("unhashable type: '{}'", type_name(a[0]));
  if (const Value* v = self.dict_data().find(a[0])) return *v;
  return a.get_or(1, Value::none());
}

Value dict_items(Interpreter&, const Value& self, CallArgs& args) {
  Args a("items", args, {}, 0);
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict_data().items) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}

Value dict_keys(Interpreter&, const Value& self, CallArgs& args) {
  Args a("keys", args, {}, 0);
  return Value::list(iterate(self));
}

Value dict_values(Interpreter&, const Value& self, CallArgs& args) {
  Args a("values", args, {}, 0);
  std::vector<Value> out;
  for (const auto& kv : self.dict_data().items) out.push_back(kv.second);
  return Value::list(std::move(out));
}

Value copy_self(Interpreter&, const Value& self, CallArgs& args) {
  Args a("copy", args, {}, 0);
  return self;  // containers are immutable here, so a copy is the same value
}

// ---- list / tuple methods ----
Value seq_count(Interpreter&, const Value& self, CallArgs& args) {
  Args a("count", args, {"value"}, 1);
  std::int64_t n = 0;
  for (const Value& v : self.items()) n += equals(v, a[0]) ? 1 : 0;
  return Value::integer(n);
}

Value seq_index(Interpreter&, const Value& self, CallArgs& args) {
  Args a("index", args, {"value"}, 1);
  const auto& items = self.items();
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (equals(items[i], a[0])) return Value::integer(static_cast<std::int64_t>(i));
  }
  fail("{} is not in {}", repr(a[0]), type_name(self));
}

struct MethodEntry {
  std::string_view name;
  Method fn;
  bool markup_wrapped;  // on a Markup receiver, escapes string arguments (markupsafe)
};

constexpr MethodEntry kStrMethods[] = {
    {"startswith", str_startswith, false},
    {"endswith", str_endswith, false},
    {"split", str_split, true},
    {"rsplit", str_rsplit, true},
    {"strip", str_strip, true},
    {"lstrip", str_lstrip, true},
    {"rstrip", str_rstrip, true},
    {"replace", str_replace, true},
    {"upper", str_upper, true},
    {"lower", str_lower, true},
    {"title", str_title, true},
    {"capitalize", str_capitalize, true},
    {"format", str_format, true},
    {"join", str_join, false},
    {"find", str_find, false},
    {"rfind", str_rfind, false},
    {"index", str_index, false},
    {"rindex", str_rindex, false},
    {"count", str_count, false},
    {"splitlines", str_splitlines, true},
    {"partition", str_partition, true},
    {"rpartition", str_rpartition, true},
    {"removeprefix", str_removeprefix, true},
    {"removesuffix", str_removesuffix, true},
    {"center", str_center, true},
    {"ljust", str_ljust, true},
    {"rjust", str_rjust, true},
    {"zfill", str_zfill, true},
    {"isspace", str_isspace, false},
    {"isupper", str_isupper, false},
    {"islower", str_islower, false},
};
constexpr MethodEntry kDictMethods[] = {
    {"get", dict_get, false},       {"items", dict_items, false}, {"keys", dict_keys, false},
    {"values", dict_values, false}, {"copy", copy_self, false},
};
constexpr MethodEntry kListMethods[] = {
    {"count", seq_count, false}, {"index", seq_index, false}, {"copy", copy_self, false}};
constexpr MethodEntry kTupleMethods[] = {{"count", seq_count, false}, {"index", seq_index, false}};

constexpr std::string_view kDictMutators[] = {"pop",    "popitem", "setdefault",
                                              "update", "clear",   "fromkeys"};
constexpr std::string_view kListMutators[] = {"append", "extend",  "insert", "pop",
                                              "remove", "reverse", "sort",   "clear"};

template <std::size_t N>
const MethodEntry* find_entry(const MethodEntry (&table)[N], std::string_view name) {
  for (const MethodEntry& e : table) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

template <std::size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// One step per call, plus the receiver's size: every method scans (or copies) it.
void charge_call(Interpreter& interp, const Value& self) {
  Budget& budget = interp.budget();
  budget.step();
  if (self.is_string()) budget.charge_bytes(static_cast<std::int64_t>(self.str().size()));
  if (self.is_sequence()) budget.charge_items(static_cast<std::int64_t>(self.items().size()));
  if (self.is_dict()) budget.charge_items(static_cast<std::int64_t>(self.dict_data().items.size()));
}

Value bind(const Value& self, const MethodEntry& entry) {
  const Method fn = entry.fn;
  if (self.is_safe() && entry.markup_wrapped) {
    return Value::callable(std::string(entry.name),
                           [self, fn](Interpreter& interp, CallArgs& args) {
                             charge_call(interp, self);
                             for (Value& v : args.positional) {
                               if (v.is_string() && !v.is_safe())
                                 v = Value::string(html_escape(v.str()), true);
                             }
                             for (auto& kv : args.keyword) {
                               if (kv.second.is_string() && !kv.second.is_safe())
                                 kv.second = Value::string(html_escape(kv.second.str()), true);
                             }
                             return fn(interp, self, args);
                           });
  }
  return Value::callable(std::string(entry.name), [self, fn](Interpreter& interp, CallArgs& args) {
    charge_call(interp, self);
    return fn(interp, self, args);
  });
}

}  // namespace

std::optional<Value> find_method(const Value& object, std::string_view name) {
  const MethodEntry* entry = nullptr;
  bool unsafe = false;
  switch (object.kind()) {
    case Value::Kind::string:
      entry = find_entry(kStrMethods, name);
      break;
    case Value::Kind::dict:
      entry = find_entry(kDictMethods, name);
      unsafe = listed(kDictMutators, name);
      break;
    case Value::Kind::list:
      entry = find_entry(kListMethods, name);
      unsafe = listed(kListMutators, name);
      break;
    case Value::Kind::tuple:
      entry = find_entry(kTupleMethods, name);
      break;
    default:
      break;
  }
  if (entry != nullptr) return bind(object, *entry);
  if (unsafe) {
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(object)));
  }
  return std::nullopt;
}

}  // namespace fp8rl::jinja
