// Global functions a chat template can call: jinja2's defaults (range, dict, namespace, joiner)
// and the two HF transformers adds (raise_exception, strftime_now).
#include <chrono>
#include <ctime>
#include <memory>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"

namespace fp8rl::jinja {
namespace {

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr std::int64_t kMaxRange = 100000;

Value g_range(Interpreter&, CallArgs& args) {
  if (!args.keyword.empty()) fail("range() takes no keyword arguments");
  const auto n = args.positional.size();
  if (n < 1 || n > 3) fail("range expected 1 to 3 arguments, got {}", n);
  std::int64_t start = 0, stop, step = 1;
  if (n == 1) {
    stop = to_index(args.positional[0], "range() argument");
  } else {
    start = to_index(args.positional[0], "range() argument");
    stop = to_index(args.positional[1], "range() argument");
    if (n == 3) step = to_index(args.positional[2], "range() argument");
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  std::int64_t count = 0;
  if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
  if (step < 0 && start > stop) count = (start - stop - 1) / (-step) + 1;
  if (count > kMaxRange) {
    fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  }
  std::vector<Value> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) items: a mapping or an iterable of pairs, then keywords.
std::vector<std::pair<Value, Value>> dict_items(Interpreter& interp, std::string_view fn,
                                                CallArgs& args) {
  std::vector<std::pair<Value, Value>> items;
  if (args.positional.size() > 1)
    fail("{} expected at most 1 argument, got {}", fn, args.positional.size());
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      items = src.dict_data().items;
    } else if (src.is_object() && src.object_ptr()->is_namespace) {
      fail("'Namespace' object is not iterable");
    } else {
      for (const Value& pair : interp.items_of(src)) {
        std::vector<Value> kv = interp.items_of(pair);
        if (kv.size() != 2) {
          fail("dictionary update sequence element has length {}; 2 is required", kv.size());
        }
        items.emplace_back(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) items.emplace_back(Value::string(k), v);
  return items;
}

Value g_dict(Interpreter& interp, CallArgs& args) {
  return Value::dict(dict_items(interp, "dict", args));
}

Value g_namespace(Interpreter& interp, CallArgs& args) {
  const Value attrs = Value::dict(dict_items(interp, "namespace", args));
  Value::Object* ns = interp.new_object("Namespace", true);
  for (const auto& [k, v] : attrs.dict_data().items) {
    if (!k.is_string()) fail("namespace attribute names must be strings");
    ns->set(k.str(), v);
  }
  return Value::object(ns);
}

Value g_joiner(Interpreter&, CallArgs& args) {
  Args a("joiner", args, {"sep"}, 0);
  const std::string sep = a.has(0) ? to_str(a[0]) : ", ";
  auto used = std::make_shared<bool>(false);
  return Value::callable("joiner", [sep, used](Interpreter&, CallArgs& call_args) {
    Args none("joiner", call_args, {}, 0);
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

Value g_raise_exception(Interpreter&, CallArgs& args) {
  Args a("raise_exception", args, {"message"}, 1);
  throw TemplateError(TemplateError::Kind::raised, to_str(a[0]));
}

// Python's datetime.strftime on a naive local time: %f is microseconds, %z and %Z are empty; the
// rest is the C library's strftime in the "C" locale, as Python calls it.
Value g_strftime_now(Interpreter& interp, CallArgs& args) {
  Args a("strftime_now", args, {"format"}, 1);
  if (!a[0].is_string()) fail("strftime() argument 1 must be str, not {}", type_name(a[0]));
  std::tm tm{};
  long micros = 0;
  if (interp.options().fixed_now) {
    tm = *interp.options().fixed_now;
  } else {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    localtime_r(&t, &tm);
    micros = static_cast<long>(
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
        1000000);
  }
  const std::string& format = a[0].str();
  std::string pattern;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[i + 1];
      if (c == 'f') {
        pattern += fmt::format("{:06d}", micros);
        ++i;
        continue;
      }
      if (c == 'z' || c == 'Z') {
        ++i;
        continue;
      }
      pattern += format[i];
      pattern += c;
      ++i;
      continue;
    }
    pattern += format[i];
  }
  if (pattern.empty()) return Value::string("");
  // strftime returns 0 both for "too small" and for an empty result; grow until it fits or is
  // clearly empty output.
  for (std::size_t size = 64; size <= (std::size_t{1} << 20); size *= 4) {
    std::string buf(size, '\0');
    const std::size_t n = std::strftime(buf.data(), buf.size(), pattern.c_str(), &tm);
    if (n > 0 || size > pattern.size() * 16 + 256) {
      buf.resize(n);
      return Value::string(std::move(buf));
    }
  }
  return Value::string("");
}

struct GlobalEntry {
  std::string_view name;
  Value (*fn)(Interpreter&, CallArgs&);
};

constexpr GlobalEntry kGlobals[] = {
    {"range", g_range},
    {"dict", g_dict},
    {"namespace", g_namespace},
    {"joiner", g_joiner},
    {"raise_exception", g_raise_exception},
    {"strftime_now", g_strftime_now},
};

}  // namespace

std::optional<Value> find_global(std::string_view name) {
  for (const GlobalEntry& g : kGlobals) {
    if (g.name == name) return Value::callable(std::string(name), g.fn);
  }
  return std::nullopt;
}

}  // namespace fp8rl::jinja
