#include "cli/run_config.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>

#include "core/input_file.h"
#include "core/spelling.h"
#include "formats/json_read.h"
#include "tokenizer/unicode.h"

namespace fp8rl::cli {

namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out.append(sep);
    out.append(s);
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// A finite decimal number ("1e-6", "0.5", "3"); YAML 1.1's requirement of a dot in exponent
// forms is not kept, as Python users write 1e-6.
std::optional<double> parse_real(const std::string& text) {
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
  const char* end = text.data() + text.size();
  double v = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, v, std::chars_format::general);
  if (begin == end || ec != std::errc() || ptr != end || !std::isfinite(v)) return std::nullopt;
  return v;
}

// One scalar as a value of the key's (scalar) type; throws naming what was expected.
nlohmann::json scalar_value(const KeySpec& k, KeyType type, const std::string& text) {
  switch (type) {
    case KeyType::integer:
      if (auto v = parse_integer(text)) return *v;
      break;
    case KeyType::real:
      if (auto v = parse_real(text)) return *v;
      break;
    case KeyType::boolean:
      if (auto v = parse_bool(text)) return *v;
      break;
    case KeyType::string:
      return text;
    case KeyType::choice: {
      if (std::find(k.choices.begin(), k.choices.end(), text) != k.choices.end()) return text;
      for (const auto& [spelling, canonical] : k.choice_aliases)
        if (spelling == text) return canonical;
      break;
    }
    default:
      break;
  }
  RAISE("expected {}, got '{}'", k.describe_type(), text);
}

bool is_list(KeyType t) {
  return t == KeyType::string_list || t == KeyType::real_list;
}
KeyType element_type(KeyType t) {
  return t == KeyType::real_list ? KeyType::real : KeyType::string;
}

// A list key's value written as one text, "q_proj,v_proj": its comma-separated items, as a
// flag and a YAML scalar both give it; blank text is the empty list.
nlohmann::json split_list(const KeySpec& k, const std::string& text) {
  nlohmann::json a = nlohmann::json::array();
  if (trim(text).empty()) return a;
  std::string item;
  std::istringstream items(text);
  while (std::getline(items, item, ','))
    a.push_back(scalar_value(k, element_type(k.type), trim(item)));
  return a;
}

// A scalar's text. yaml-cpp decodes the escapes \N and \_ of double-quoted scalars to the
// single bytes 0x85 and 0xA0, which are not UTF-8; they are U+0085 and U+00A0 (as PyYAML reads
// them). The document itself is checked to be UTF-8 (read_yaml), so no other ill-formed byte
// can reach a scalar.
std::string scalar_text(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  size_t bad = tok::find_invalid_utf8(s);
  if (bad == std::string::npos) return s;
  std::string out;
  size_t from = 0;
  while (bad != std::string::npos) {
    const size_t at = from + bad;
    const auto byte = static_cast<unsigned char>(s[at]);
    out.append(s, from, at - from);
    if (byte == 0x85 || byte == 0xA0) {
      out += '\xC2';
      out += char(byte);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD, as any other decoder would
    }
    from = at + 1;
    bad = tok::find_invalid_utf8(std::string_view(s).substr(from));
  }
  out.append(s, from, std::string::npos);
  return out;
}

// A key as an error quotes it: as it is when short and printable, else a bounded JSON excerpt
// (an explicit YAML key may be megabytes long or hold newlines).
std::string key_text(const std::string& name) {
  const bool plain = name.size() <= 80 && std::none_of(name.begin(), name.end(), [](char c) {
                       return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
                     });
  return plain ? name : json_excerpt(nlohmann::json(name), 80);
}

const char* node_kind(const YAML::Node& n) {
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "null";
}

// What converting one run config's values may create. A YAML alias repeats the node its anchor
// names without repeating its text, so a few hundred bytes of nested aliases name billions of
// nodes (the "billion laughs"), and an alias inside its own anchor names a cycle; the parser's
// depth guard sees neither. Run configs hold a few hundred nodes.
constexpr int64_t kMaxYamlNodes = 100000;
constexpr int64_t kMaxYamlScalarBytes = int64_t{16} << 20;
constexpr size_t kMaxYamlDepth = 256;  // as JSON (formats/json_read.h)

// The budget of one document's conversion, and where in the value it is (for errors:
// "rewards[0].reward_process").
class YamlBudget {
 public:
  void enter(const YAML::Node& n, std::string part) {
    CHECK(path_.size() < kMaxYamlDepth,
          "{}: nested deeper than the limit of {} levels (an alias inside its own anchor "
          "repeats it without end)",
          where(), kMaxYamlDepth);
    path_.push_back(std::move(part));
    try {
      CHECK(++nodes_ <= kMaxYamlNodes,
            "{}: the value expands past the limit of {} YAML nodes (aliases repeat the nodes "
            "their anchors name)",
            where(), kMaxYamlNodes);
      if (n.IsScalar()) {
        bytes_ += int64_t(n.Scalar().size());
        CHECK(bytes_ <= kMaxYamlScalarBytes,
              "{}: the value expands past the limit of {} bytes of YAML scalars (aliases "
              "repeat the nodes their anchors name)",
              where(), kMaxYamlScalarBytes);
      }
    } catch (const Error&) {
      path_.pop_back();  // the scope that entered is not built, so it will not leave
      throw;
    }
  }
  // A mapping key's bytes count too (an alias may name a long scalar as a key).
  void charge_key(const std::string& key) {
    bytes_ += int64_t(key.size());
    CHECK(bytes_ <= kMaxYamlScalarBytes,
          "{}: the value expands past the limit of {} bytes of YAML scalars (aliases repeat the "
          "nodes their anchors name)",
          where(), kMaxYamlScalarBytes);
  }
  void leave() { path_.pop_back(); }
  // The path to the current node, cut where it is long.
  std::string where() const {
    std::string s;
    for (const std::string& p : path_) {
      if (s.size() > 120) return s + "...";
      s += p;
    }
    return s;
  }

 private:
  std::vector<std::string> path_;
  int64_t nodes_ = 0, bytes_ = 0;
};

// Counts `n` against the budget for the scope: entered under `part`, left at its end.
class BudgetScope {
 public:
  BudgetScope(YamlBudget& b, const YAML::Node& n, std::string part) : budget_(b) {
    budget_.enter(n, std::move(part));
  }
  ~BudgetScope() { budget_.leave(); }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  YamlBudget& budget_;
};

// A YAML node as JSON (json keys): plain scalars become null, bools, integers or numbers
// when they read as such, quoted ones stay strings. Mapping keys must be strings (JSON's keys
// are); a null key is "null", as Python's json.dumps writes PyYAML's None.
nlohmann::json yaml_to_json(const YAML::Node& n, YamlBudget& budget) {
  if (n.IsNull()) return nullptr;
  if (n.IsScalar()) {
    const std::string s = scalar_text(n);
    if (n.Tag() == "?") {
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      if (auto v = parse_integer(s)) return *v;
      if (auto v = parse_real(s)) return *v;
    }
    return s;
  }
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    size_t i = 0;
    for (const YAML::Node& e : n) {
      const BudgetScope scope(budget, e, fmt::format("[{}]", i++));
      a.push_back(yaml_to_json(e, budget));
    }
    return a;
  }
  nlohmann::json o = nlohmann::json::object();
  for (const auto& kv : n) {
    std::string key = "null";
    if (!kv.first.IsNull()) {
      CHECK(kv.first.IsScalar(),
            "{}: a mapping key must be a string, not {} (line {}): JSON's keys are strings",
            budget.where(), node_kind(kv.first), kv.first.Mark().line + 1);
      key = scalar_text(kv.first);
    }
    budget.charge_key(key);
    const BudgetScope scope(budget, kv.second, "." + key_text(key));
    o[key] = yaml_to_json(kv.second, budget);
  }
  return o;
}

// The typed value of `n` for key `k`; throws a message without the location. Every node it
// reads counts against `budget`, entered at the key.
nlohmann::json yaml_value(const KeySpec& k, const YAML::Node& n, YamlBudget& budget) {
  const BudgetScope scope(budget, n, k.name);
  if (k.type == KeyType::json) return yaml_to_json(n, budget);
  if (n.IsNull()) {
    if (k.nullable) return nullptr;
    if (k.type == KeyType::string) return "";  // TRL configs write None for unset paths
    RAISE("expected {}, got null", k.describe_type());
  }
  if (is_list(k.type)) {
    if (n.IsScalar()) return split_list(k, n.Scalar());
    nlohmann::json a = nlohmann::json::array();
    if (n.IsScalar()) {
      a.push_back(scalar_value(k, element_type(k.type), scalar_text(n)));
      return a;
    }
    CHECK(n.IsSequence(), "expected {}, got {}", k.describe_type(), node_kind(n));
    size_t i = 0;
    for (const YAML::Node& e : n) {
      const BudgetScope element(budget, e, fmt::format("[{}]", i++));
      CHECK(e.IsScalar(), "expected {}, got {} inside the list", k.describe_type(), node_kind(e));
      a.push_back(scalar_value(k, element_type(k.type), scalar_text(e)));
    }
    return a;
  }
  CHECK(n.IsScalar(), "expected {}, got {}", k.describe_type(), node_kind(n));
  return scalar_value(k, k.type, scalar_text(n));
}

// Shortest text that reads back to the same double, always with a '.' or exponent so that a
// json key's value stays a number of the same kind.
std::string real_text(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

void emit(YAML::Emitter& out, const nlohmann::json& v, bool plain_strings) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      out << YAML::Null;
      break;
    case nlohmann::json::value_t::boolean:
      out << (v.get<bool>() ? "true" : "false");
      break;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      out << v.dump();
      break;
    case nlohmann::json::value_t::number_float:
      out << real_text(v.get<double>());
      break;
    case nlohmann::json::value_t::string:
      if (plain_strings)
        out << v.get<std::string>();
      else
        out << YAML::DoubleQuoted << v.get<std::string>();
      break;
    case nlohmann::json::value_t::array: {
      const bool flat = std::none_of(v.begin(), v.end(), [](const nlohmann::json& e) {
        return e.is_array() || e.is_object();
      });
      out << (flat ? YAML::Flow : YAML::Block) << YAML::BeginSeq;
      for (const nlohmann::json& e : v) emit(out, e, false);
      out << YAML::EndSeq;
      break;
    }
    case nlohmann::json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, e] : v.items()) {
        out << YAML::Key << YAML::DoubleQuoted << key << YAML::Value;
        emit(out, e, false);
      }
      out << YAML::EndMap;
      break;
    default:
      RAISE("cannot write a {} value as YAML", v.type_name());
  }
}

// The value's form in --help.
const char* type_label(KeyType t) {
  switch (t) {
    case KeyType::integer:
      return "INT";
    case KeyType::real:
      return "NUM";
    case KeyType::boolean:
      return "[BOOL]";
    case KeyType::string:
      return "TEXT";
    case KeyType::choice:
      return "NAME";
    case KeyType::string_list:
      return "A,B,...";
    case KeyType::real_list:
      return "X,Y,...";
    case KeyType::json:
      return "JSON";
  }
  return "";
}

}  // namespace

std::optional<int64_t> parse_integer(const std::string& text) {
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);
  const char* end = text.data() + text.size();
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  if (begin == end || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::optional<bool> parse_bool(const std::string& text) {
  const std::string t = lower(text);
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  return std::nullopt;
}

std::string KeySpec::describe_type() const {
  std::string t;
  switch (type) {
    case KeyType::integer:
      t = "an integer";
      break;
    case KeyType::real:
      t = "a number";
      break;
    case KeyType::boolean:
      t = "true or false";
      break;
    case KeyType::string:
      t = "a string";
      break;
    case KeyType::choice:
      t = "one of " + join(choices, ", ");
      break;
    case KeyType::string_list:
      t = "a list of strings";
      break;
    case KeyType::real_list:
      t = "a list of numbers";
      break;
    case KeyType::json:
      t = "any YAML value";
      break;
  }
  return nullable && type != KeyType::json ? t + ", or null" : t;
}

const KeySpec* find_key(const std::vector<KeySpec>& keys, std::string_view name) {
  for (const KeySpec& k : keys) {
    if (k.name == name) return &k;
    for (const std::string& a : k.aliases)
      if (a == name) return &k;
  }
  return nullptr;
}

std::optional<std::string> nearest_key(const std::vector<KeySpec>& keys, std::string_view name) {
  std::vector<std::string> names;
  for (const KeySpec& k : keys) {
    // A key accepted only to be ignored is never what a typo meant.
    if (!k.note.empty() && !k.recorded) continue;
    names.push_back(k.name);
    names.insert(names.end(), k.aliases.begin(), k.aliases.end());
  }
  return nearest_spelling(name, names);
}

std::string flag_name(std::string_view key) {
  std::string f = "--" + std::string(key);
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

void reject_unknown_arguments(const std::vector<KeySpec>& keys,
                              const std::vector<std::string>& arguments) {
  if (arguments.empty()) return;
  const std::string& a = arguments.front();
  CHECK(a.size() > 1 && a[0] == '-', "unexpected argument '{}'", a);
  std::string name = a.substr(0, a.find('='));
  name.erase(0, name.find_first_not_of('-'));
  std::replace(name.begin(), name.end(), '-', '_');
  const std::optional<std::string> near = nearest_key(keys, name);
  RAISE("unknown flag '{}'{}", a.substr(0, a.find('=')),
        near ? fmt::format(" (did you mean '{}'?)", flag_name(*near)) : std::string());
}

nlohmann::json read_yaml(const std::vector<KeySpec>& keys, const std::string& text,
                         const std::string& file) {
  // YAML is Unicode text; yaml-cpp passes ill-formed bytes through to values that JSON cannot
  // hold and that the run's config.yaml would not read back the same.
  const size_t bad = tok::find_invalid_utf8(text);
  CHECK(bad == std::string::npos,
        "{}:{}: not valid YAML: not UTF-8 text (ill-formed byte 0x{:02X} at byte offset {})", file,
        1 + std::count(text.begin(), text.begin() + std::ptrdiff_t(bad), '\n'),
        static_cast<uint8_t>(text[bad]), bad);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own message for this is "bad file".
    RAISE("{}:{}: not valid YAML: nested deeper than the parser's limit ({} levels of recursion)",
          file, e.mark.line + 1, e.depth());
  } catch (const YAML::Exception& e) {
    RAISE("{}:{}: not valid YAML: {}", file, e.mark.line + 1, e.msg);
  }
  nlohmann::json values = nlohmann::json::object();
  if (root.IsNull()) return values;  // an empty file sets nothing
  CHECK(root.IsMap(), "{}: a run config is a YAML mapping of key: value, not {}", file,
        root.IsSequence() ? "a list" : "a single value");
  std::map<std::string, int> line_of;  // canonical name -> line where set
  YamlBudget budget;                   // one for the whole file
  for (const auto& kv : root) {
    const int line = kv.first.Mark().line + 1;
    CHECK(kv.first.IsScalar(), "{}:{}: a key must be a name, not {}", file, line,
          node_kind(kv.first));
    const std::string name = scalar_text(kv.first);
    const KeySpec* k = find_key(keys, name);
    if (k == nullptr) {
      // A typo of a key is about as long as the key (the edit distance is quadratic in it).
      const std::optional<std::string> near =
          name.size() <= 80 ? nearest_key(keys, name) : std::nullopt;
      RAISE("unknown key '{}' in {}:{}{}", key_text(name), file, line,
            near ? fmt::format(" (did you mean '{}'?)", *near) : std::string());
    }
    // A translated key (use_gradient_checkpointing) counts as setting the keys it writes.
    const std::vector<std::string> sets =
        k->writes.empty() ? std::vector<std::string>{k->name} : k->writes;
    for (const std::string& target : sets) {
      const auto [seen, fresh] = line_of.emplace(target, line);
      CHECK(fresh, "key '{}' in {}:{} sets {} again (already set on line {})", name, file, line,
            target, seen->second);
    }
    try {
      values[k->name] = yaml_value(*k, kv.second, budget);
      if (k->check) k->check(values[k->name]);
    } catch (const Error& e) {
      RAISE("key '{}' in {}:{}: {}", name, file, line, e.what());
    } catch (const YAML::Exception& e) {
      RAISE("key '{}' in {}:{}: {}", name, file, line, e.msg);
    }
  }
  return values;
}

nlohmann::json read_yaml_file(const std::vector<KeySpec>& keys, const std::string& path) {
  // An input file (core/input_file.h): a FIFO, device or directory given as --config is an
  // error at once, not a hang, an endless read or an empty config.
  constexpr uint64_t kMaxConfigBytes = 4 << 20;  // run configs are a few kB
  return read_yaml(keys, read_input_file(path, "config file", kMaxConfigBytes), path);
}

nlohmann::json parse_flag_value(const KeySpec& k, const std::string& flag,
                                const std::string& text) {
  try {
    if (k.type == KeyType::json) {
      // The one JSON policy (formats/json_read.h), with its depth limit, as for the YAML path:
      // a flag value nested 30k deep overflowed the stack.
      nlohmann::json j;
      try {
        j = parse_json_text(text, "the value");
      } catch (const Error& e) {
        // An ignored key's flag value is free text (--report-to none) unless it reads as JSON.
        CHECK(!k.recorded, "expected JSON text, got '{}' ({})", text.substr(0, 200), e.what());
        j = text;
      }
      if (k.check) k.check(j);
      return j;
    }
    if (k.nullable && (text == "none" || text == "null")) return nullptr;
    if (is_list(k.type)) return split_list(k, text);
    nlohmann::json v = scalar_value(k, k.type, text);
    if (k.check) k.check(v);
    return v;
  } catch (const Error& e) {
    RAISE("{}: {}", flag, e.what());
  }
}

void apply_values(const std::vector<KeySpec>& keys, const nlohmann::json& values, void* config) {
  for (const auto& [name, value] : values.items()) {
    const KeySpec* k = find_key(keys, name);
    CHECK(k != nullptr, "unknown config key '{}'", name);
    k->set(config, value);
  }
}

nlohmann::ordered_json config_to_json(const std::vector<KeySpec>& keys, const void* config) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const KeySpec& k : keys)
    if (k.recorded) j[k.name] = nlohmann::ordered_json(k.get(config));
  return j;
}

std::string config_to_yaml(const std::vector<KeySpec>& keys, const void* config) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  for (const KeySpec& k : keys) {
    if (!k.recorded) continue;
    out << YAML::Key << k.name << YAML::Value;
    emit(out, k.get(config), k.type == KeyType::choice);
  }
  out << YAML::EndMap;
  CHECK(out.good(), "writing the config as YAML failed: {}", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> config_notes(const std::vector<KeySpec>& keys,
                                      const nlohmann::json& values) {
  std::vector<std::string> lines;
  for (const KeySpec& k : keys)
    if (!k.note.empty() && values.contains(k.name))
      lines.push_back(
          fmt::format("note: {} = {} ignored: {}", k.name, values[k.name].dump(), k.note));
  return lines;
}

void FlagValues::record(const std::string& key, const std::string& option,
                        const std::string& value) {
  const auto [it, fresh] = given_.emplace(key, Given{option, value});
  CHECK(fresh || it->second.option == option, "{} given twice ({} and {})", key, it->second.option,
        option);
  it->second.value = value;
}

void FlagValues::add_to(CLI::App& app, const std::vector<KeySpec>& keys, const void* defaults) {
  app.add_option("--config", config_path_,
                 "YAML file of run keys (TRL's names); flags given here override it");
  for (const KeySpec& k : keys) {
    std::string names = flag_name(k.name);
    for (const std::string& a : k.aliases) names.append(",").append(flag_name(a));
    std::string help = k.help;
    if (k.type == KeyType::choice) help += " (" + join(k.choices, "|") + ")";
    const std::string option = flag_name(k.name);
    const std::string name = k.name;
    CLI::Option* o = app.add_option(
        names,
        [this, name, option](const CLI::results_t& r) {
          record(name, option, r.back());
          return true;
        },
        help);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    // expected(0) marks the option flag-like, so that CLI11 hands a bare flag over as "true"
    // (not as the default string); expected(0, 1) then lets it take a value too.
    if (k.bare) o->expected(0)->expected(0, 1);
    // --help shows the default as the flag would spell it.
    const nlohmann::json d = k.get(defaults);
    std::string shown;
    if (d.is_null()) {
      shown = k.type == KeyType::json ? "null" : "none";
    } else if (d.is_string()) {
      shown = d.get<std::string>();
    } else if (d.is_array() && k.type != KeyType::json) {
      for (const nlohmann::json& e : d)
        shown.append(shown.empty() ? "" : ",")
            .append(e.is_string() ? e.get<std::string>() : e.dump());
    } else {
      shown = d.dump();
    }
    if (!k.recorded) shown.clear();  // their values live in the keys they write
    // Keys ignored for TRL / accelerate compatibility stay out of --help.
    if (!k.note.empty() && k.type == KeyType::json) o->group("");
    o->default_str(shown);
    o->type_name(k.bare && k.type != KeyType::boolean ? "[" + std::string(type_label(k.type)) + "]"
                                                      : std::string(type_label(k.type)));
  }
}

CLI::Option* FlagValues::add_positional(CLI::App& app, const std::vector<KeySpec>& keys,
                                        const std::string& key, const std::string& help) {
  const KeySpec* k = find_key(keys, key);
  CHECK(k != nullptr, "no config key '{}' for a positional argument", key);
  std::string option = k->name;
  for (char& c : option) c = char(std::toupper(static_cast<unsigned char>(c)));
  const std::string name = k->name;
  return app.add_option(
      k->name,
      [this, name, option](const CLI::results_t& r) {
        record(name, option, r.back());
        return true;
      },
      help);
}

nlohmann::json FlagValues::values(const std::vector<KeySpec>& keys) const {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& [name, given] : given_) {
    const KeySpec* k = find_key(keys, name);
    CHECK(k != nullptr, "unknown config key '{}'", name);
    values[name] = parse_flag_value(*k, given.option, given.value);
  }
  return values;
}

}  // namespace fp8rl::cli
