// The value model of the interpreter: Python's objects as jinja2 sees them in a chat template.
//
// Kinds follow Python: undefined (jinja2's Undefined, carrying the reason it is undefined),
// None, bool, int (64-bit; overflow is an error rather than a big integer), float, str (UTF-8,
// with a flag for jinja2's Markup), list, tuple, dict (insertion-ordered, any hashable key),
// object (namespace() and loop, owned by the Interpreter) and callable (built-ins, bound methods,
// macros). Lists, tuples and dicts are immutable once built (the ImmutableSandboxedEnvironment HF
// uses forbids mutating them) and shared by reference. Containers record their nesting depth and
// refuse to exceed kMaxValueDepth, so that recursive algorithms over values (repr, tojson,
// equality, destruction) have a bounded stack.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fp8rl::jinja {

class Interpreter;
class Value;

inline constexpr int kMaxValueDepth = 500;

// A failure inside the template: a syntax error, a runtime error (Python would raise TypeError,
// UndefinedError, ...), the template's own raise_exception(), or a render that ran out of its
// budget (budget.h; never caught by constant folding). `line` is the template line, 0 while
// unknown; the renderer fills it in from the innermost statement being run.
class TemplateError : public std::runtime_error {
 public:
  enum class Kind { syntax, runtime, raised, budget };
  TemplateError(Kind kind, const std::string& message, int line = 0)
      : std::runtime_error(message), kind_(kind), line_(line) {}
  Kind kind() const { return kind_; }
  int line() const { return line_; }
  void set_line(int line) { line_ = line; }

 private:
  Kind kind_;
  int line_;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw TemplateError(TemplateError::Kind::runtime,
                      fmt::format(format, std::forward<Args>(args)...));
}

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<Value(Interpreter&, CallArgs&)>;

class Value {
 public:
  enum class Kind : std::uint8_t {
    undefined,
    none,
    boolean,
    integer,
    floating,
    string,
    list,
    tuple,
    dict,
    object,
    callable
  };
  struct ListData;
  struct DictData;
  struct Object;
  struct Callable;

  Value() = default;  // undefined, no reason given
  static Value undefined(std::string reason);
  static Value none() { return Value(Kind::none); }
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value floating(double f);
  static Value string(std::string s, bool safe = false);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  // Later duplicates of a key replace the earlier value in place (Python dict semantics).
  static Value dict(std::vector<std::pair<Value, Value>> items);
  static Value object(Object* object);
  static Value callable(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::floating; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python's numbers.Number
  bool is_string() const { return kind_ == Kind::string; }
  bool is_safe() const { return kind_ == Kind::string && flag_; }  // jinja2 Markup
  bool is_list() const { return kind_ == Kind::list; }
  bool is_tuple() const { return kind_ == Kind::tuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_object() const { return kind_ == Kind::object; }
  bool is_callable() const { return kind_ == Kind::callable; }

  bool as_bool() const { return scalar_.i != 0; }
  std::int64_t as_int() const { return scalar_.i; }  // int or bool
  double as_float() const { return scalar_.f; }
  double as_number() const;                 // bool, int or float as double
  const std::string& str() const;           // string, or the reason of an undefined
  const std::vector<Value>& items() const;  // list or tuple
  const DictData& dict_data() const;
  Object* object_ptr() const { return scalar_.o; }
  const Callable& callable_data() const;
  int depth() const;  // nesting depth of a container, 0 for scalars
  // The bytes of this string (or the slots of this list, tuple or dict, sizeof(Value) each) when
  // no other value shares them, i.e. when the value was just created; 0 otherwise. What the
  // render's total budget counts (budget.h).
  std::size_t unshared_bytes() const;
  // Python's `is` for reference kinds: the same list, dict, string object or callable.
  bool same_ref(const Value& other) const { return ref_ != nullptr && ref_ == other.ref_; }

 private:
  explicit Value(Kind kind) : kind_(kind) {}

  Kind kind_ = Kind::undefined;
  bool flag_ = false;
  union {
    std::int64_t i;
    double f;
    Object* o;
  } scalar_{};
  std::shared_ptr<const void> ref_;  // string, ListData, DictData, Callable
};

struct Value::ListData {
  std::vector<Value> items;
  int depth = 1;
};

struct Value::DictData {
  std::vector<std::pair<Value, Value>> items;
  int depth = 1;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;  // a string key
};

// Names to values in insertion order. Past kIndexFrom names a hash index is kept beside them, so
// that a template defining 100k macros or namespace attributes runs in linear time, while the
// small tables of loops and macro calls stay a plain vector.
class NameTable {
 public:
  static constexpr std::size_t kIndexFrom = 16;
  Value* find(std::string_view name);
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);
  void clear();
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, std::size_t, Hash, std::equal_to<>> index_;
};

// namespace() objects and loop contexts. Attribute names are strings; only namespaces accept
// assignment from templates.
struct Value::Object {
  std::string type_name;  // "Namespace" or "LoopContext"
  bool is_namespace = false;
  NameTable attrs;
  const Value* find(std::string_view name) const { return attrs.find(name); }
  void set(std::string_view name, Value value) { attrs.set(name, std::move(value)); }
};

struct Value::Callable {
  std::string name;
  NativeFunction fn;
};

// Python semantics over values.
bool truthy(const Value& v);
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);  // a < b; TypeError for unorderable kinds
bool hashable(const Value& v);
std::string type_name(const Value& v);  // Python's type(v).__name__
// str(v) and repr(v). `max_bytes` (>= 0) bounds the text of a container: past it, a budget
// error instead of building it (a list of 4M references to one long string prints as 4M copies).
std::string to_str(const Value& v, std::int64_t max_bytes = -1);
std::string repr(const Value& v, std::int64_t max_bytes = -1);
std::string float_repr(double f);  // repr(float)
std::string string_repr(std::string_view s);
// len(v): strings in code points; TypeError for kinds without a length.
std::int64_t length(const Value& v);
// list(v): list/tuple items, string code points, dict keys; undefined is empty.
std::vector<Value> iterate(const Value& v);
[[noreturn]] void fail_undefined(const Value& v);
// Python's `a in b`.
bool contains(const Value& container, const Value& item);

}  // namespace fp8rl::jinja
