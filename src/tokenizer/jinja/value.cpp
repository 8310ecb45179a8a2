#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "tokenizer/jinja/budget.h"
#include "tokenizer/jinja/unicode.h"

namespace fp8rl::jinja {
namespace {

int child_depth(const Value& v) {
  return v.depth();
}

template <class Range, class DepthOf>
int container_depth(const Range& items, DepthOf depth_of) {
  int depth = 0;
  for (const auto& item : items) depth = std::max(depth, depth_of(item));
  if (depth + 1 > kMaxValueDepth) {
    fail("value nested deeper than {} levels", kMaxValueDepth);
  }
  return depth + 1;
}

bool numbers_equal(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.as_int() == b.as_int();
  return a.as_number() == b.as_number();
}

bool numbers_less(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int();
  return a.as_number() < b.as_number();
}

void append_hex(std::string& out, char prefix, unsigned value, int digits) {
  out += '\\';
  out += prefix;
  out += fmt::format("{:0{}x}", value, digits);
}

}  // namespace

Value Value::undefined(std::string reason) {
  Value v(Kind::undefined);
  v.ref_ = std::make_shared<const std::string>(std::move(reason));
  return v;
}

Value Value::boolean(bool b) {
  Value v(Kind::boolean);
  v.scalar_.i = b ? 1 : 0;  // int semantics for arithmetic on bools (True + 1 == 2)
  return v;
}

Value Value::integer(std::int64_t i) {
  Value v(Kind::integer);
  v.scalar_.i = i;
  return v;
}

Value Value::floating(double f) {
  Value v(Kind::floating);
  v.scalar_.f = f;
  return v;
}

Value Value::string(std::string s, bool safe) {
  Value v(Kind::string);
  v.flag_ = safe;
  v.ref_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(std::vector<Value> items) {
  Value v(Kind::list);
  auto data = std::make_shared<ListData>();
  data->depth = container_depth(items, child_depth);
  data->items = std::move(items);
  v.ref_ = std::move(data);
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::tuple;
  return v;
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  auto data = std::make_shared<DictData>();
  data->items.reserve(items.size());
  // String keys (nearly all keys) are deduplicated through a hash map; other keys, which never
  // equal a string, by Python equality (1 == 1.0 == True are one key).
  std::unordered_map<std::string, std::size_t> string_slots;
  for (auto& [key, value] : items) {
    if (!hashable(key)) fail("unhashable type: '{}'", type_name(key));
    std::size_t slot = data->items.size();
    if (key.is_string()) {
      slot = string_slots.emplace(key.str(), slot).first->second;
    } else {
      for (std::size_t i = 0; i < data->items.size(); ++i) {
        if (equals(data->items[i].first, key)) slot = i;
      }
    }
    if (slot < data->items.size()) {
      data->items[slot].second = std::move(value);
    } else {
      data->items.emplace_back(std::move(key), std::move(value));
    }
  }
  data->depth = container_depth(data->items, [](const std::pair<Value, Value>& kv) {
    return std::max(kv.first.depth(), kv.second.depth());
  });
  Value v(Kind::dict);
  v.ref_ = std::move(data);
  return v;
}

Value Value::object(Object* object) {
  Value v(Kind::object);
  v.scalar_.o = object;
  return v;
}

Value Value::callable(std::string name, NativeFunction fn) {
  Value v(Kind::callable);
  v.ref_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

double Value::as_number() const {
  return kind_ == Kind::floating ? scalar_.f : static_cast<double>(scalar_.i);
}

const std::string& Value::str() const {
  static const std::string kEmpty;
  return ref_ ? *static_cast<const std::string*>(ref_.get()) : kEmpty;
}

const std::vector<Value>& Value::items() const {
  return static_cast<const ListData*>(ref_.get())->items;
}

const Value::DictData& Value::dict_data() const {
  return *static_cast<const DictData*>(ref_.get());
}

const Value::Callable& Value::callable_data() const {
  return *static_cast<const Callable*>(ref_.get());
}

std::size_t Value::unshared_bytes() const {
  if (ref_ == nullptr || ref_.use_count() != 1) return 0;
  switch (kind_) {
    case Kind::string:
      return str().size();
    case Kind::list:
    case Kind::tuple:
      return items().size() * sizeof(Value);
    case Kind::dict:
      return dict_data().items.size() * 2 * sizeof(Value);
    default:
      return 0;
  }
}

int Value::depth() const {
  switch (kind_) {
    case Kind::list:
    case Kind::tuple:
      return static_cast<const ListData*>(ref_.get())->depth;
    case Kind::dict:
      return static_cast<const DictData*>(ref_.get())->depth;
    default:
      return 0;
  }
}

const Value* Value::DictData::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* Value::DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

const Value* NameTable::find(std::string_view name) const {
  if (!index_.empty()) {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value* NameTable::find(std::string_view name) {
  return const_cast<Value*>(std::as_const(*this).find(name));
}

void NameTable::set(std::string_view name, Value value) {
  if (Value* slot = find(name)) {
    *slot = std::move(value);
    return;
  }
  entries_.emplace_back(std::string(name), std::move(value));
  if (entries_.size() == kIndexFrom) {
    for (std::size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  } else if (entries_.size() > kIndexFrom) {
    index_.emplace(entries_.back().first, entries_.size() - 1);
  }
}

void NameTable::clear() {
  entries_.clear();
  index_.clear();
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return false;
    case Value::Kind::boolean:
    case Value::Kind::integer:
      return v.as_int() != 0;
    case Value::Kind::floating:
      return v.as_float() != 0.0;
    case Value::Kind::string:
      return !v.str().empty();
    case Value::Kind::list:
    case Value::Kind::tuple:
      return !v.items().empty();
    case Value::Kind::dict:
      return !v.dict_data().items.empty();
    case Value::Kind::object:
    case Value::Kind::callable:
      return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return numbers_equal(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.str() == b.str();
    case Value::Kind::list:
    case Value::Kind::tuple: {
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::dict: {
      const auto& x = a.dict_data();
      const auto& y = b.dict_data();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [key, value] : x.items) {
        const Value* other = y.find(key);
        if (other == nullptr || !equals(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::object:
      return a.object_ptr() == b.object_ptr();
    case Value::Kind::callable:
      return &a.callable_data() == &b.callable_data();
    default:
      return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return numbers_less(a, b);
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  fail("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

bool hashable(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::list:
    case Value::Kind::dict:
      return false;
    case Value::Kind::tuple:
      for (const Value& item : v.items()) {
        if (!hashable(item)) return false;
      }
      return true;
    default:
      return true;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "Undefined";
    case Value::Kind::none:
      return "NoneType";
    case Value::Kind::boolean:
      return "bool";
    case Value::Kind::integer:
      return "int";
    case Value::Kind::floating:
      return "float";
    case Value::Kind::string:
      return v.is_safe() ? "Markup" : "str";
    case Value::Kind::list:
      return "list";
    case Value::Kind::tuple:
      return "tuple";
    case Value::Kind::dict:
      return "dict";
    case Value::Kind::object:
      return v.object_ptr()->type_name;
    case Value::Kind::callable:
      return "function";
  }
  return "object";
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed notation for decimal exponents in
  // [-4, 16), scientific otherwise (float_repr_style 'short').
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const std::size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent >= -4 && exponent < 16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else {
      const auto int_len = static_cast<std::size_t>(exponent + 1);
      if (digits.size() <= int_len) {
        out = digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  return sign + out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8_decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      append_hex(out, 'x', cp, 2);
    } else if (cp < 0x7F || py_isprintable(cp)) {
      utf8_append(out, cp);
    } else if (cp <= 0xFF) {
      append_hex(out, 'x', cp, 2);
    } else if (cp <= 0xFFFF) {
      append_hex(out, 'u', cp, 4);
    } else {
      append_hex(out, 'U', cp, 8);
    }
  }
  out += quote;
  return out;
}

namespace {

struct ReprState {
  std::vector<const Value::Object*> open;
  std::int64_t max_bytes = -1;
  const Value* root = nullptr;
  // Checked after every item: a container's text never grows more than one item past the cap.
  void check(const std::string& out) const {
    if (max_bytes >= 0 && static_cast<std::int64_t>(out.size()) > max_bytes) {
      fail_budget(fmt::format(
          "{} bytes per string (RenderLimits::max_string_bytes; the text of a {} asks for more)",
          max_bytes, type_name(*root)));
    }
  }
};

// repr() with the namespaces being printed on `state.open`: a namespace that (indirectly) holds
// itself prints as Python's recursion guard prints a dict, "{...}", and chains of namespaces
// deeper than the value depth limit fail instead of exhausting the stack.
std::string repr_at(const Value& v, ReprState& state) {
  std::vector<const Value::Object*>& open = state.open;
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "Undefined";
    case Value::Kind::string:
      return v.is_safe() ? "Markup(" + string_repr(v.str()) + ")" : string_repr(v.str());
    case Value::Kind::list:
    case Value::Kind::tuple: {
      const bool tuple = v.is_tuple();
      std::string out = tuple ? "(" : "[";
      const auto& items = v.items();
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        out += repr_at(items[i], state);
        state.check(out);
      }
      if (tuple && items.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Value::Kind::dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : v.dict_data().items) {
        if (!first) out += ", ";
        first = false;
        out += repr_at(key, state) + ": " + repr_at(value, state);
        state.check(out);
      }
      return out + "}";
    }
    case Value::Kind::object: {
      const Value::Object& o = *v.object_ptr();
      if (!o.is_namespace) {
        const Value* index = o.find("index");
        const Value* len = o.find("length");
        return fmt::format("<{} {}/{}>", o.type_name, index ? to_str(*index) : "?",
                           len ? to_str(*len) : "?");
      }
      if (std::find(open.begin(), open.end(), &o) != open.end()) return "<Namespace {...}>";
      if (open.size() >= static_cast<std::size_t>(kMaxValueDepth)) {
        fail("value nested deeper than {} levels", kMaxValueDepth);
      }
      open.push_back(&o);
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [key, value] : o.attrs.entries()) {
        if (!first) out += ", ";
        first = false;
        out += string_repr(key) + ": " + repr_at(value, state);
        state.check(out);
      }
      open.pop_back();
      return out + "}>";
    }
    case Value::Kind::callable:
      return "<built-in function " + v.callable_data().name + ">";
    default:
      return to_str(v);
  }
}

}  // namespace

std::string repr(const Value& v, std::int64_t max_bytes) {
  ReprState state;
  state.max_bytes = max_bytes;
  state.root = &v;
  return repr_at(v, state);
}

std::string to_str(const Value& v, std::int64_t max_bytes) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(v.as_int());
    case Value::Kind::floating:
      return float_repr(v.as_float());
    case Value::Kind::string:
      return v.str();
    default:
      return repr(v, max_bytes);
  }
}

std::int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return 0;
    case Value::Kind::string:
      return static_cast<std::int64_t>(utf8_length(v.str()));
    case Value::Kind::list:
    case Value::Kind::tuple:
      return static_cast<std::int64_t>(v.items().size());
    case Value::Kind::dict:
      return static_cast<std::int64_t>(v.dict_data().items.size());
    default:
      fail("object of type '{}' has no len()", type_name(v));
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::string: {
      std::vector<Value> out;
      for (char32_t cp : utf8_decode(v.str())) {
        std::string s;
        utf8_append(s, cp);
        out.push_back(Value::string(std::move(s)));  // iterating a Markup yields plain str
      }
      return out;
    }
    case Value::Kind::list:
    case Value::Kind::tuple:
      return v.items();
    case Value::Kind::dict: {
      std::vector<Value> out;
      out.reserve(v.dict_data().items.size());
      for (const auto& kv : v.dict_data().items) out.push_back(kv.first);
      return out;
    }
    default:
      fail("'{}' object is not iterable", type_name(v));
  }
}

void fail_undefined(const Value& v) {
  const std::string& reason = v.str();
  fail("{}", reason.empty() ? std::string("undefined value") : reason);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::undefined:
      return false;
    case Value::Kind::string:
      if (!item.is_string()) {
        fail("'in <string>' requires string as left operand, not {}", type_name(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::list:
    case Value::Kind::tuple:
      for (const Value& x : container.items()) {
        if (equals(x, item)) return true;
      }
      return false;
    case Value::Kind::dict:
      if (!hashable(item)) fail("unhashable type: '{}'", type_name(item));
      return container.dict_data().find(item) != nullptr;
    default:
      fail("argument of type '{}' is not iterable", type_name(container));
  }
}

}  // namespace fp8rl::jinja
