#include "formats/json_read.h"

#include <algorithm>

#include "core/check.h"
#include "core/input_file.h"

namespace fp8rl {

namespace {

// 1-based line of a byte offset, for errors only.
size_t line_of(std::string_view text, size_t offset) {
  return size_t(1) + size_t(std::count(text.begin(), text.begin() + std::ptrdiff_t(offset), '\n'));
}

// Builds the DOM like nlohmann's json_sax_dom_parser (linear; its callback variant rescans the
// parent object after each child and is quadratic), with the depth and duplicate-key rules.
template <class J>
class DomBuilder final : public nlohmann::json_sax<J> {
 public:
  using typename nlohmann::json_sax<J>::number_integer_t;
  using typename nlohmann::json_sax<J>::number_unsigned_t;
  using typename nlohmann::json_sax<J>::number_float_t;
  using typename nlohmann::json_sax<J>::string_t;
  using typename nlohmann::json_sax<J>::binary_t;

  DomBuilder(J& root, std::string_view what, const JsonLimits& limits)
      : root_(root), what_(what), limits_(limits) {}

  bool null() override { return value(J(nullptr)); }
  bool boolean(bool b) override { return value(J(b)); }
  bool number_integer(number_integer_t v) override { return value(J(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(J(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(J(v)); }
  bool string(string_t& s) override { return value(J(std::move(s))); }
  bool binary(binary_t&) override { RAISE("{}: unexpected binary value", what_); }
  bool start_object(std::size_t) override { return open(J::object()); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(J::array()); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    J& top = *stack_.back();
    if (limits_.reject_duplicate_keys && top.contains(k)) {
      if (limits_.describe_duplicate) RAISE("{}: {}", what_, limits_.describe_duplicate(path_, k));
      std::string where;
      for (const std::string& p : path_) where += (where.empty() ? "" : "/") + p;
      RAISE("{}: duplicate key '{}' in {}", what_, k,
            path_.empty() ? std::string("the top-level object") : "object '" + where + "'");
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    RAISE("{} is not valid JSON: {}", what_, e.what());
  }

 private:
  J& slot_for(J v) {
    if (stack_.empty()) return root_ = std::move(v);
    J& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return top.back();
    }
    return top[key_] = std::move(v);
  }
  bool value(J v) {
    slot_for(std::move(v));
    return true;
  }
  bool open(J container) {
    // check_json_text has bounded the depth already; this keeps the builder safe on its own.
    CHECK(int(stack_.size()) < limits_.max_depth, "{}: nesting deeper than the limit of {}", what_,
          limits_.max_depth);
    const bool in_object = !stack_.empty() && stack_.back()->is_object();
    J& slot = slot_for(std::move(container));
    if (!stack_.empty()) path_.push_back(in_object ? key_ : "[]");
    stack_.push_back(&slot);
    return true;
  }
  bool close() {
    stack_.pop_back();
    if (!stack_.empty()) path_.pop_back();
    return true;
  }

  J& root_;
  std::string_view what_;
  const JsonLimits& limits_;
  std::vector<J*> stack_;
  std::vector<std::string> path_;  // keys leading to stack_.back() (one fewer than stack_)
  string_t key_;
};

template <class J>
J parse_text(std::string_view text, std::string_view what, const JsonLimits& limits) {
  CHECK(text.size() <= limits.max_bytes, "{}: {} bytes of JSON, above the limit of {} bytes", what,
        text.size(), limits.max_bytes);
  check_json_text(text, what, limits.max_depth);
  J root;
  DomBuilder<J> builder(root, what, limits);
  try {
    J::sax_parse(text.begin(), text.end(), &builder);
  } catch (const nlohmann::json::exception& e) {
    RAISE("{} is not valid JSON: {}", what, e.what());
  }
  return root;
}

// The longest prefix of `s` of at most `n` bytes that does not cut a UTF-8 sequence in two: a
// cut one is not text JSON can write (nlohmann's dump throws on it).
size_t utf8_prefix(std::string_view s, size_t n) {
  if (n >= s.size()) return s.size();
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

template <class J>
void excerpt(const J& v, size_t max_chars, int depth, std::string& out) {
  if (out.size() > max_chars) return;
  if (v.is_object() || v.is_array()) {
    const bool obj = v.is_object();
    if (depth >= 8) {
      out += obj ? "{...}" : "[...]";
      return;
    }
    out += obj ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= max_chars; ++it) {
      if (!first) out += ',';
      first = false;
      if (obj) {
        excerpt(J(it.key().substr(0, utf8_prefix(it.key(), max_chars + 1))), max_chars, depth + 1,
                out);
        out += ':';
      }
      excerpt(*it, max_chars, depth + 1, out);
    }
    out += obj ? '}' : ']';
    return;
  }
  if (v.is_string()) {
    const auto& s = v.template get_ref<const typename J::string_t&>();
    out += J(s.substr(0, utf8_prefix(s, max_chars + 1)))
               .dump(-1, ' ', false, J::error_handler_t::replace);
    return;
  }
  out += v.dump();  // a scalar: short
}

template <class J>
std::string excerpt(const J& v, size_t max_chars) {
  std::string out;
  excerpt(v, max_chars, 0, out);
  if (out.size() > max_chars) {
    out.resize(utf8_prefix(out, max_chars));
    out += "...";
  }
  return out;
}

}  // namespace

void check_json_text(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0')
      RAISE("{} is not valid JSON: NUL byte at byte {} (line {})", what, i, line_of(text, i));
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
        if (i < text.size() && text[i] == '\0')
          RAISE("{} is not valid JSON: NUL byte at byte {} (line {})", what, i, line_of(text, i));
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        RAISE("{}: JSON nested deeper than the limit of {} levels at byte {} (line {})", what,
              max_depth, i, line_of(text, i));
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced input is the parser's error to report
    }
  }
}

nlohmann::json parse_json_text(std::string_view text, std::string_view what,
                               const JsonLimits& limits) {
  return parse_text<nlohmann::json>(text, what, limits);
}

nlohmann::ordered_json parse_ordered_json_text(std::string_view text, std::string_view what,
                                               const JsonLimits& limits) {
  return parse_text<nlohmann::ordered_json>(text, what, limits);
}

nlohmann::json read_json_file(const std::filesystem::path& path, const JsonLimits& limits) {
  const std::string text = read_input_file(path, "JSON file", limits.max_bytes);
  return parse_json_text(text, path.string(), limits);
}

nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path,
                                              const JsonLimits& limits) {
  const std::string text = read_input_file(path, "JSON file", limits.max_bytes);
  return parse_ordered_json_text(text, path.string(), limits);
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  return excerpt(value, max_chars);
}

std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars) {
  return excerpt(value, max_chars);
}

void for_each_jsonl_row(
    const std::string& path,
    const std::function<void(const nlohmann::ordered_json& row, int64_t line)>& row) {
  constexpr uint64_t kMaxLineBytes = uint64_t{64} << 20;
  InputLines lines(path, "dataset", kMaxLineBytes);
  std::string line;
  while (lines.next(line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto number = int64_t(lines.line_number());
    try {
      row(parse_ordered_json_text(line, "the row"), number);
    } catch (const Error& e) {
      RAISE("{}:{}: {}", path, number, e.what());
    } catch (const nlohmann::json::exception& e) {
      RAISE("{}:{}: {}", path, number, e.what());
    }
  }
}

std::string json_line(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace fp8rl
