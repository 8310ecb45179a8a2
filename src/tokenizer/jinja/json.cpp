#include "tokenizer/jinja/json.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/budget.h"
#include "tokenizer/jinja/unicode.h"

namespace fp8rl::jinja {
namespace {

void dump_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
          }
        } else {
          utf8_append(out, cp);
        }
    }
  }
  out += '"';
}

std::string float_json(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return float_repr(f);
}

// json.dumps turns non-string keys of these kinds into strings; others are a TypeError.
std::string key_string(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::string:
      return key.str();
    case Value::Kind::boolean:
      return key.as_bool() ? "true" : "false";
    case Value::Kind::integer:
      return std::to_string(key.as_int());
    case Value::Kind::floating:
      return float_json(key.as_float());
    case Value::Kind::none:
      return "null";
    default:
      fail("keys must be str, int, float, bool or None, not {}", type_name(key));
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options)
      : options_(options),
        item_sep_(options.item_separator.value_or(options.indent ? "," : ", ")),
        key_sep_(options.key_separator.value_or(": ")) {}

  void write(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::none:
        out_ += "null";
        return;
      case Value::Kind::boolean:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::integer:
        out_ += std::to_string(v.as_int());
        return;
      case Value::Kind::floating:
        out_ += float_json(v.as_float());
        return;
      case Value::Kind::string:
        dump_string(out_, v.str(), options_.ensure_ascii);
        return;
      case Value::Kind::list:
      case Value::Kind::tuple: {
        const auto& items = v.items();
        if (items.empty()) {
          out_ += "[]";
          return;
        }
        out_ += '[';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out_ += item_sep_;
          newline(level + 1);
          write(items[i], level + 1);
          check();
        }
        newline(level);
        out_ += ']';
        return;
      }
      case Value::Kind::dict: {
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.dict_data().items) items.push_back(&kv);
        if (items.empty()) {
          out_ += "{}";
          return;
        }
        if (options_.sort_keys) {
          std::stable_sort(items.begin(), items.end(),
                           [](const auto* a, const auto* b) { return less(a->first, b->first); });
        }
        out_ += '{';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i > 0) out_ += item_sep_;
          newline(level + 1);
          dump_string(out_, key_string(items[i]->first), options_.ensure_ascii);
          out_ += key_sep_;
          write(items[i]->second, level + 1);
          check();
        }
        newline(level);
        out_ += '}';
        return;
      }
      default:
        fail("Object of type {} is not JSON serializable", type_name(v));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (!options_.indent) return;
    out_ += '\n';
    if (options_.max_bytes >= 0 && static_cast<std::int64_t>(options_.indent->size()) * level >
                                       options_.max_bytes - static_cast<std::int64_t>(out_.size()))
      fail_size();
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  void check() const {
    if (options_.max_bytes >= 0 && static_cast<std::int64_t>(out_.size()) > options_.max_bytes)
      fail_size();
  }
  [[noreturn]] void fail_size() const {
    fail_budget(
        fmt::format("{} bytes per string (RenderLimits::max_string_bytes; tojson() asks for more)",
                    options_.max_bytes));
  }

  const JsonDumpOptions& options_;
  std::string item_sep_;
  std::string key_sep_;
  std::string out_;
};

Value from_json_at(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxValueDepth) fail("JSON nested deeper than {} levels", kMaxValueDepth);
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(json.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(INT64_MAX)) {
        return Value::integer(static_cast<std::int64_t>(u));
      }
      return Value::floating(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::floating(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        items.emplace_back(Value::string(key), from_json_at(item, depth + 1));
      }
      return Value::dict(std::move(items));
    }
    default:
      fail("unsupported JSON value of type {}", json.type_name());
  }
}

}  // namespace

std::string dump_json(const Value& value, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  writer.write(value, 0);
  return writer.take();
}

Value from_json(const nlohmann::ordered_json& json) {
  return from_json_at(json, 0);
}

}  // namespace fp8rl::jinja
