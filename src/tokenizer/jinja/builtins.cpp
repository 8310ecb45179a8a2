#include "tokenizer/jinja/builtins.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace fp8rl::jinja {

Args::Args(std::string_view function, CallArgs& args,
           std::initializer_list<std::string_view> params, std::size_t required)
    : bound_(params.size()) {
  const std::vector<std::string_view> names(params);
  if (args.positional.size() > names.size()) {
    fail("{}() takes at most {} argument(s) ({} given)", function, names.size(),
         args.positional.size());
  }
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound_[i] = args.positional[i];
  for (auto& [key, value] : args.keyword) {
    std::size_t i = 0;
    while (i < names.size() && names[i] != key) ++i;
    if (i == names.size()) fail("{}() got an unexpected keyword argument '{}'", function, key);
    if (bound_[i]) fail("{}() got multiple values for argument '{}'", function, key);
    bound_[i] = value;
  }
  for (std::size_t i = 0; i < required; ++i) {
    if (!bound_[i]) fail("{}() missing required argument '{}'", function, names[i]);
  }
}

const Value& Args::operator[](std::size_t i) const {
  static const Value kUndefined;
  return bound_[i] ? *bound_[i] : kUndefined;
}

std::int64_t to_index(const Value& v, std::string_view what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_undefined()) fail_undefined(v);
  fail("{} must be an integer, not '{}'", what, type_name(v));
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double python_round(double x, int ndigits) {
  if (!std::isfinite(x) || x == 0.0) return x;
  if (ndigits > 320) return x;
  if (ndigits >= 0) {
    // printf rounds the exact binary value half-to-even, as Python's dtoa-based round() does.
    std::vector<char> buf(static_cast<std::size_t>(ndigits) + 330);
    std::snprintf(buf.data(), buf.size(), "%.*f", ndigits, x);
    return std::strtod(buf.data(), nullptr);
  }
  if (ndigits < -308) return std::copysign(0.0, x);
  const double scale = std::pow(10.0, -ndigits);
  return std::nearbyint(x / scale) * scale;
}

}  // namespace fp8rl::jinja
