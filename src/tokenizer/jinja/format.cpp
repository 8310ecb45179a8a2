// Python's two string formatting mini-languages as templates reach them: str.format (through
// jinja2's sandboxed formatter, so field lookups go through the sandbox's getattr/getitem) and
// printf-style `str % args`.
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/unicode.h"

namespace fp8rl::jinja {
namespace {

std::string c_format(const std::string& spec, double v) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, spec.c_str(), v);
  if (n < static_cast<int>(sizeof buf))
    return std::string(buf, static_cast<std::size_t>(std::max(n, 0)));
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), spec.c_str(), v);
  big.resize(static_cast<std::size_t>(n));
  return big;
}

std::string c_format_int(const std::string& spec, long long v) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, spec.c_str(), v);
  if (n < static_cast<int>(sizeof buf))
    return std::string(buf, static_cast<std::size_t>(std::max(n, 0)));
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), spec.c_str(), v);
  big.resize(static_cast<std::size_t>(n));
  return big;
}

// A run of decimal digits at format[i], saturating at INT64_MAX (any budget is smaller).
std::int64_t parse_digits(std::u32string_view spec, std::size_t& i) {
  std::int64_t n = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
    const auto d = static_cast<std::int64_t>(spec[i++] - '0');
    n = n > (INT64_MAX - d) / 10 ? INT64_MAX : n * 10 + d;
  }
  return n;
}
std::int64_t parse_digits(std::string_view spec, std::size_t& i) {
  std::int64_t n = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
    const auto d = static_cast<std::int64_t>(spec[i++] - '0');
    n = n > (INT64_MAX - d) / 10 ? INT64_MAX : n * 10 + d;
  }
  return n;
}

std::string ascii_repr(const Value& v, std::int64_t max_bytes) {
  const std::string r = repr(v, max_bytes);
  std::string out;
  for (char32_t cp : utf8_decode(r)) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (cp <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
    }
  }
  return out;
}

// Pads to `width` code points; the padding is checked against the budget before it is made.
std::string pad(Budget& budget, const std::string& body, std::int64_t width, char32_t fill,
                char align, std::size_t sign_len = 0) {
  const auto len = static_cast<std::int64_t>(utf8_length(body));
  if (len >= width) return body;
  const auto total = static_cast<std::size_t>(width - len);
  std::string f;
  utf8_append(f, fill);
  budget.string_bytes(width, static_cast<std::int64_t>(f.size()), "a format width");
  const auto fills = [&](std::size_t n) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) s += f;
    return s;
  };
  switch (align) {
    case '<':
      return body + fills(total);
    case '^':
      return fills(total / 2) + body + fills(total - total / 2);
    case '=':
      return body.substr(0, sign_len) + fills(total) + body.substr(sign_len);
    default:
      return fills(total) + body;
  }
}

std::string group_digits(const std::string& digits, char sep, std::size_t every) {
  std::string out;
  const std::size_t n = digits.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out;
}

struct Spec {
  char32_t fill = ' ';
  char align = 0;
  char sign = 0;
  bool alternate = false;
  std::int64_t width = 0;
  char grouping = 0;
  std::int64_t precision = -1;
  char type = 0;
};

Spec parse_spec(std::string_view spec_text) {
  Spec s;
  const std::u32string spec = utf8_decode(spec_text);
  std::size_t i = 0;
  const auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    s.fill = spec[0];
    s.align = static_cast<char>(spec[1]);
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    s.align = static_cast<char>(spec[0]);
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) {
    s.sign = static_cast<char>(spec[i++]);
  }
  if (i < spec.size() && spec[i] == '#') {
    s.alternate = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (s.align == 0) {
      s.fill = '0';
      s.align = '=';
    }
    ++i;
  }
  s.width = parse_digits(spec, i);
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_'))
    s.grouping = static_cast<char>(spec[i++]);
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    if (i >= spec.size() || spec[i] < '0' || spec[i] > '9')
      fail("Format specifier missing precision");
    s.precision = parse_digits(spec, i);
  }
  if (i < spec.size()) s.type = static_cast<char>(spec[i++]);
  if (i != spec.size()) fail("Invalid format specifier '{}'", spec_text);
  return s;
}

std::string format_float_body(double v, const Spec& s, char type) {
  if (std::isnan(v) || std::isinf(v)) {
    std::string t = std::isnan(v) ? "nan" : "inf";
    if (type == 'F' || type == 'E' || type == 'G') t = std::isnan(v) ? "NAN" : "INF";
    return t;
  }
  std::string body;
  if (type == 0 && s.precision < 0) {
    body = float_repr(std::fabs(v));
  } else if (type == 0) {
    body = c_format(fmt::format("%.{}g", s.precision == 0 ? 1 : s.precision), std::fabs(v));
    if (body.find_first_of(".e") == std::string::npos) body += ".0";
  } else if (type == '%') {
    body =
        c_format(fmt::format("%{}.{}f", s.alternate ? "#" : "", s.precision < 0 ? 6 : s.precision),
                 std::fabs(v) * 100) +
        "%";
  } else {
    const char t = type == 'n' ? 'g' : type;
    body = c_format(
        fmt::format("%{}.{}{}", s.alternate ? "#" : "", s.precision < 0 ? 6 : s.precision, t),
        std::fabs(v));
  }
  if (s.grouping) {
    std::size_t end = body.find_first_not_of("0123456789");
    if (end == std::string::npos) end = body.size();
    body = group_digits(body.substr(0, end), s.grouping, 3) + body.substr(end);
  }
  return body;
}

std::string format_value(Budget& budget, const Value& v, std::string_view spec_text) {
  if (spec_text.empty()) return to_str(v, budget.limits().max_string_bytes);
  const Spec s = parse_spec(spec_text);
  // A float's precision is digits printed: within the string budget.
  if (v.is_number() && s.precision > 0) budget.string_bytes(s.precision, 1, "a format precision");
  if (v.is_string()) {
    if (s.type != 0 && s.type != 's')
      fail("Unknown format code '{}' for object of type 'str'", s.type);
    if (s.sign) fail("Sign not allowed in string format specifier");
    if (s.align == '=') fail("'=' alignment not allowed in string format specifier");
    std::string body = v.str();
    if (s.precision >= 0) {
      const std::u32string cps = utf8_decode(body);
      body = utf8_encode(std::u32string_view(cps).substr(0, static_cast<std::size_t>(s.precision)));
    }
    return pad(budget, body, s.width, s.fill, s.align ? s.align : '<');
  }
  if (!v.is_number()) fail("unsupported format string passed to {}.__format__", type_name(v));
  const bool negative =
      v.is_float() ? std::signbit(v.as_float()) && !std::isnan(v.as_float()) : v.as_int() < 0;
  std::string sign = negative ? "-" : (s.sign == '+' ? "+" : s.sign == ' ' ? " " : "");
  std::string body;
  const bool int_type = s.type == 0 || s.type == 'd' || s.type == 'n' || s.type == 'x' ||
                        s.type == 'X' || s.type == 'o' || s.type == 'b' || s.type == 'c';
  if (!v.is_float() && int_type) {
    if (s.precision >= 0) fail("Precision not allowed in integer format specifier");
    const std::int64_t i = v.as_int();
    const unsigned long long mag =
        i < 0 ? 0ULL - static_cast<unsigned long long>(i) : static_cast<unsigned long long>(i);
    std::string prefix;
    switch (s.type) {
      case 'x':
      case 'X':
        body = fmt::format("{:x}", mag);
        if (s.type == 'X') body = py_upper(body);
        prefix = s.alternate ? (s.type == 'X' ? "0X" : "0x") : "";
        break;
      case 'o':
        body = fmt::format("{:o}", mag);
        prefix = s.alternate ? "0o" : "";
        break;
      case 'b':
        body = fmt::format("{:b}", mag);
        prefix = s.alternate ? "0b" : "";
        break;
      case 'c':
        body.clear();
        utf8_append(body, static_cast<char32_t>(mag));
        sign.clear();
        break;
      default:
        body = std::to_string(mag);
    }
    if (s.grouping) {
      body =
          group_digits(body, s.grouping,
                       (s.type == 'x' || s.type == 'X' || s.type == 'o' || s.type == 'b') ? 4 : 3);
    }
    sign += prefix;
  } else {
    if (int_type && s.type != 0)
      fail("Unknown format code '{}' for object of type 'float'", s.type);
    const char type = s.type == 0 && !v.is_float() ? 'g' : s.type;
    body = format_float_body(v.as_number(), s, type);
  }
  const char align = s.align ? s.align : '>';
  return pad(budget, sign + body, s.width, s.fill, align, sign.size());
}

}  // namespace

std::string python_format(Interpreter& interp, std::string_view format, CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  bool manual = false, automatic = false;
  const auto resolve = [&](std::string_view field) -> Value {
    std::size_t i = 0;
    while (i < field.size() && field[i] != '.' && field[i] != '[') ++i;
    const std::string_view first = field.substr(0, i);
    Value obj;
    if (first.empty()) {
      if (manual)
        fail("cannot switch from manual field specification to automatic field numbering");
      automatic = true;
      if (auto_index >= args.positional.size())
        fail("Replacement index {} out of range for positional args tuple", auto_index);
      obj = args.positional[auto_index++];
    } else if (first.find_first_not_of("0123456789") == std::string_view::npos) {
      if (automatic)
        fail("cannot switch from automatic field numbering to manual field specification");
      manual = true;
      const std::size_t k = std::stoul(std::string(first));
      if (k >= args.positional.size())
        fail("Replacement index {} out of range for positional args tuple", k);
      obj = args.positional[k];
    } else {
      bool found = false;
      for (const auto& [key, value] : args.keyword) {
        if (key == first) {
          obj = value;
          found = true;
        }
      }
      if (!found) fail("KeyError: '{}'", first);
    }
    while (i < field.size()) {
      if (field[i] == '.') {
        std::size_t j = i + 1;
        while (j < field.size() && field[j] != '.' && field[j] != '[') ++j;
        obj = interp.getattr(obj, field.substr(i + 1, j - i - 1));
        i = j;
      } else {
        const std::size_t close = field.find(']', i);
        if (close == std::string_view::npos) fail("Missing ']' in format string");
        const std::string key(field.substr(i + 1, close - i - 1));
        const bool digits =
            !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
        obj = interp.getitem(obj, digits ? Value::integer(std::stoll(key)) : Value::string(key));
        i = close + 1;
      }
    }
    return obj;
  };

  for (std::size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      fail("Single '}}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    interp.budget().step();
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // Find the matching '}' (format specs may nest one level of {...}).
    std::size_t j = i + 1;
    int nesting = 1;
    for (; j < format.size(); ++j) {
      if (format[j] == '{') ++nesting;
      if (format[j] == '}' && --nesting == 0) break;
    }
    if (j >= format.size()) fail("expected '}}' before end of string");
    const std::string_view inner = format.substr(i + 1, j - i - 1);
    std::size_t colon = std::string_view::npos, bang = std::string_view::npos;
    for (std::size_t k = 0, depth = 0; k < inner.size(); ++k) {
      if (inner[k] == '[') ++depth;
      if (inner[k] == ']' && depth > 0) --depth;
      if (depth > 0) continue;
      if (inner[k] == '!' && bang == std::string_view::npos && colon == std::string_view::npos)
        bang = k;
      if (inner[k] == ':' && colon == std::string_view::npos) {
        colon = k;
        break;
      }
    }
    const std::string_view field = inner.substr(0, std::min(bang, colon));
    std::string spec(colon == std::string_view::npos ? std::string_view()
                                                     : inner.substr(colon + 1));
    Value v = resolve(field);
    if (bang != std::string_view::npos) {
      const std::string_view conv = inner.substr(
          bang + 1, (colon == std::string_view::npos ? inner.size() : colon) - bang - 1);
      if (conv == "r") {
        v = Value::string(repr(v, interp.budget().limits().max_string_bytes));
      } else if (conv == "s") {
        v = Value::string(interp.text(v));
      } else if (conv == "a") {
        v = Value::string(ascii_repr(v, interp.budget().limits().max_string_bytes));
      } else {
        fail("Unknown conversion specifier {}", conv);
      }
    }
    if (spec.find('{') != std::string::npos) {
      CallArgs nested_args = args;
      spec = python_format(interp, spec, nested_args);
    }
    const std::string piece = format_value(interp.budget(), v, spec);
    interp.budget().check_string(out.size() + piece.size(), "str.format()");
    out += piece;
    i = j;
  }
  return out;
}

std::string percent_format(Budget& budget, std::string_view format, const Value& args) {
  const std::int64_t max_bytes = budget.limits().max_string_bytes;
  std::vector<Value> positional;
  const Value* mapping = nullptr;
  // Python treats any non-tuple, non-str argument with __getitem__ (dict, list, Undefined) as a
  // mapping: then unused arguments are no error.
  bool mapping_like = false;
  if (args.is_tuple()) {
    positional = args.items();
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args;
    mapping_like = args.is_dict() || args.is_list() || args.is_undefined();
  }
  std::size_t next_arg = 0;
  bool used_mapping = false;
  const auto take = [&]() -> const Value& {
    if (next_arg >= positional.size()) fail("not enough arguments for format string");
    return positional[next_arg++];
  };
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) fail("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const std::size_t close = format.find(')', i);
      if (close == std::string_view::npos) fail("incomplete format key");
      if (args.is_undefined()) fail_undefined(args);
      if (mapping == nullptr) fail("format requires a mapping");
      const Value* v = mapping->dict_data().find(format.substr(i + 1, close - i - 1));
      if (v == nullptr) fail("KeyError: '{}'", format.substr(i + 1, close - i - 1));
      value = v;
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() &&
           std::string_view("#0- +").find(format[i]) != std::string_view::npos) {
      flags += format[i++];
    }
    // Widths and precisions are numbers checked against the budget before anything is padded
    // (a negative * width left-justifies, as in Python).
    std::int64_t width = 0, precision = 0;
    if (i < format.size() && format[i] == '*') {
      width = to_index(take(), "* width");
      if (width < 0) {
        flags += '-';
        width = width == INT64_MIN ? INT64_MAX : -width;
      }
      ++i;
    } else {
      width = parse_digits(format, i);
    }
    budget.string_bytes(width, 1, "a % format width");
    bool has_precision = false;
    if (i < format.size() && format[i] == '.') {
      has_precision = true;
      ++i;
      if (i < format.size() && format[i] == '*') {
        precision = to_index(take(), "* precision");
        if (precision < 0) has_precision = false;  // C and Python: as if omitted
        ++i;
      } else {
        precision = parse_digits(format, i);
      }
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) fail("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    const Value& v = value ? *value : take();
    if (has_precision && type != 's' && type != 'r' && type != 'a')
      budget.string_bytes(precision, 1, "a % format precision");
    std::string c_spec = "%" + flags;
    if (width > 0) c_spec += fmt::format("{}", width);
    if (has_precision) c_spec += fmt::format(".{}", precision);
    const std::size_t before = out.size();
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = type == 's'   ? to_str(v, max_bytes)
                        : type == 'r' ? repr(v, max_bytes)
                                      : ascii_repr(v, max_bytes);
        if (has_precision) {
          const std::u32string cps = utf8_decode(s);
          s = utf8_encode(std::u32string_view(cps).substr(0, static_cast<std::size_t>(precision)));
        }
        out += pad(budget, s, width, ' ', flags.find('-') != std::string::npos ? '<' : '>');
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'o':
      case 'x':
      case 'X': {
        long long n;
        if (v.is_int() || v.is_bool()) {
          n = v.as_int();
        } else if (v.is_float() && (type == 'd' || type == 'i' || type == 'u')) {
          if (!std::isfinite(v.as_float())) fail("cannot convert float infinity or NaN to integer");
          n = static_cast<long long>(std::trunc(v.as_float()));
        } else {
          fail("%{} format: {} is required, not {}", type,
               type == 'd' || type == 'i' || type == 'u' ? "a real number" : "an integer",
               type_name(v));
        }
        const char t = type == 'i' || type == 'u' ? 'd' : type;
        std::string s = c_format_int(c_spec + "ll" + t, n);
        // Python's alternate octal is 0o, C's is a bare 0.
        if (t == 'o' && flags.find('#') != std::string::npos) {
          const std::size_t z = s.find_first_of("01234567");
          if (z != std::string::npos && s[z] == '0') s.insert(z + 1, "o");
        }
        out += s;
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!v.is_number()) fail("must be real number, not {}", type_name(v));
        out += c_format(c_spec + type, v.as_number());
        break;
      }
      case 'c': {
        std::string s;
        if (v.is_int()) {
          utf8_append(s, static_cast<char32_t>(v.as_int()));
        } else if (v.is_string() && utf8_length(v.str()) == 1) {
          s = v.str();
        } else {
          fail("%c requires an int or a unicode character");
        }
        out += pad(budget, s, width, ' ', flags.find('-') != std::string::npos ? '<' : '>');
        break;
      }
      default:
        fail("unsupported format character '{}'", type);
    }
    budget.check_string(out.size(), "a % format");
    budget.charge_bytes(static_cast<std::int64_t>(out.size() - before));
  }
  if (!used_mapping && !mapping_like && next_arg < positional.size()) {
    fail("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace fp8rl::jinja
