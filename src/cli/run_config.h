// Run configurations (sft, grpo, dpo) from YAML and flags, through one declarative table per
// config struct.
//
// A KeyTable<C> lists C's keys: each binds a member of C (or of a base of C) under its TRL
// name, with its type (taken from the member), allowed values, aliases and help. From it come
//   - load_yaml: a YAML mapping of key: value (`--config F.yaml`); every error names the file,
//     the line and the key, and an unknown key gets the nearest valid name suggested; its paths
//     are taken as written, a relative one from the working directory as in TRL (never from the
//     file's folder), so a flag and a config key name the same file;
//   - ConfigFlags: a CLI11 flag per key and per alias, the name with dashes (learning_rate ->
//     --learning-rate, alias lr -> --lr), applied over the YAML; bool flags take `--flag`,
//     `--flag true|false`; list flags take comma-separated values (as a list key's YAML scalar
//     does: `lora_target_modules: q_proj,v_proj`); a json key takes JSON text; the flags'
//     underscore spelling (--learning_rate, TRL's) is read as the dashed one (main.cpp);
//   - to_json / dump_yaml: the record of a run's configuration, which load_yaml reads back to
//     the same values.
// Between these, a key's value travels as JSON of its type (see KeyType).
#pragma once

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/check.h"

namespace fp8rl::cli {

// A key's type and the JSON its value travels as: integer (number_integer), real (number),
// boolean, string, choice (a string among fixed names), string_list / real_list (arrays),
// json (anything: the `rewards` specs, interpreted elsewhere). A nullable key also takes null.
enum class KeyType { integer, real, boolean, string, choice, string_list, real_list, json };

struct KeySpec {
  std::string name;                  // TRL's name: the YAML key; --name-with-dashes
  std::vector<std::string> aliases;  // other YAML keys and flags for the same value
  KeyType type = KeyType::string;
  bool nullable = false;  // TRL's Optional: `null` / `~` in YAML, `none` as a flag value
  // choice: the names shown in help, errors and dumps, and other accepted spellings, each
  // mapped to its canonical name (adamw_torch -> adamw).
  std::vector<std::string> choices;
  std::vector<std::pair<std::string, std::string>> choice_aliases;
  std::string help;
  // The flag may stand alone, meaning "true" (bool keys; --resume); else it needs a value.
  bool bare = false;
  // Store a value (JSON of `type`, already checked) into a config / read it from one.
  std::function<void(void*, const nlohmann::json&)> set;
  std::function<nlohmann::json(const void*)> get;
  // Keys copied from TRL, accelerate or Unsloth configs that are not fp8rl's own: `recorded`
  // false keeps the key out of dumps and the run's config.yaml (the keys it sets are there);
  // `note`, when not empty, is printed once at start when the key is given; `writes` names the
  // recorded keys it sets (a file may set each once); `check` rejects values that would change
  // the run (it throws naming the value).
  bool recorded = true;
  std::string note;
  std::vector<std::string> writes;
  std::function<void(const nlohmann::json&)> check;

  KeySpec& alias(std::string other) {
    aliases.push_back(std::move(other));
    return *this;
  }
  KeySpec& bare_flag() {
    bare = true;
    return *this;
  }
  // "an integer", "one of constant, linear, cosine", ... (", or null" when nullable).
  std::string describe_type() const;
};

// --- The generic machinery over a key list and a type-erased config (run_config.cpp). ---

// The key called `name` (or aliased so); null if none.
// A whole string as an integer ("+3" allowed), or nullopt.
std::optional<int64_t> parse_integer(const std::string& text);
// true/yes/on/1 or false/no/off/0 (any case), or nullopt.
std::optional<bool> parse_bool(const std::string& text);

const KeySpec* find_key(const std::vector<KeySpec>& keys, std::string_view name);
// The valid name or alias nearest to `name` by edit distance, if near enough to be a typo.
std::optional<std::string> nearest_key(const std::vector<KeySpec>& keys, std::string_view name);
// "learning_rate" -> "--learning-rate".
std::string flag_name(std::string_view key);
// Throws for the first of `arguments` (those CLI11 did not recognize), naming the nearest
// flag: "unknown flag '--max-step' (did you mean '--max-steps'?)".
void reject_unknown_arguments(const std::vector<KeySpec>& keys,
                              const std::vector<std::string>& arguments);

// The keys of a YAML document as {canonical name: typed value}. `file` names the source in
// errors ("unknown key 'max_step' in run.yaml:3 (did you mean 'max_steps'?)").
nlohmann::json read_yaml(const std::vector<KeySpec>& keys, const std::string& text,
                         const std::string& file);
nlohmann::json read_yaml_file(const std::vector<KeySpec>& keys, const std::string& path);
// A value for `key` from text (a flag's argument): the key's type, comma-separated lists, JSON
// text for json keys, `none` for null. Errors name `flag`.
nlohmann::json parse_flag_value(const KeySpec& key, const std::string& flag,
                                const std::string& text);
// Stores {name: value} into the config through the keys' setters.
void apply_values(const std::vector<KeySpec>& keys, const nlohmann::json& values, void* config);
// {name: value} of every key, in table order.
nlohmann::ordered_json config_to_json(const std::vector<KeySpec>& keys, const void* config);
// The same as a YAML document that read_yaml reads back to the same values.
std::string config_to_yaml(const std::vector<KeySpec>& keys, const void* config);
// One line per key of `values` that has a note, in table order: "note: use_vllm = true
// ignored: fp8rl has its own engine (no vLLM)".
std::vector<std::string> config_notes(const std::vector<KeySpec>& keys,
                                      const nlohmann::json& values);

namespace detail {

// A member type's KeyType and its JSON conversions.
template <class M>
struct KeyTraits;
template <>
struct KeyTraits<int64_t> {
  static constexpr KeyType type = KeyType::integer;
  static constexpr bool nullable = false;
  static nlohmann::json to(int64_t v) { return v; }
  static int64_t from(const nlohmann::json& j) { return j.get<int64_t>(); }
};
template <>
struct KeyTraits<double> {
  static constexpr KeyType type = KeyType::real;
  static constexpr bool nullable = false;
  static nlohmann::json to(double v) { return v; }
  static double from(const nlohmann::json& j) { return j.get<double>(); }
};
template <>
struct KeyTraits<bool> {
  static constexpr KeyType type = KeyType::boolean;
  static constexpr bool nullable = false;
  static nlohmann::json to(bool v) { return v; }
  static bool from(const nlohmann::json& j) { return j.get<bool>(); }
};
template <>
struct KeyTraits<std::string> {
  static constexpr KeyType type = KeyType::string;
  static constexpr bool nullable = false;
  static nlohmann::json to(const std::string& v) { return v; }
  static std::string from(const nlohmann::json& j) { return j.get<std::string>(); }
};
template <>
struct KeyTraits<std::vector<std::string>> {
  static constexpr KeyType type = KeyType::string_list;
  static constexpr bool nullable = false;
  static nlohmann::json to(const std::vector<std::string>& v) { return v; }
  static std::vector<std::string> from(const nlohmann::json& j) {
    return j.get<std::vector<std::string>>();
  }
};
template <>
struct KeyTraits<std::vector<double>> {
  static constexpr KeyType type = KeyType::real_list;
  static constexpr bool nullable = false;
  static nlohmann::json to(const std::vector<double>& v) { return v; }
  static std::vector<double> from(const nlohmann::json& j) { return j.get<std::vector<double>>(); }
};
template <>
struct KeyTraits<nlohmann::json> {
  static constexpr KeyType type = KeyType::json;
  static constexpr bool nullable = true;
  static nlohmann::json to(const nlohmann::json& v) { return v; }
  static nlohmann::json from(const nlohmann::json& j) { return j; }
};
template <class T>
struct KeyTraits<std::optional<T>> {
  static constexpr KeyType type = KeyTraits<T>::type;
  static constexpr bool nullable = true;
  static nlohmann::json to(const std::optional<T>& v) {
    return v ? KeyTraits<T>::to(*v) : nlohmann::json(nullptr);
  }
  static std::optional<T> from(const nlohmann::json& j) {
    if (j.is_null()) return std::nullopt;
    return KeyTraits<T>::from(j);
  }
};

}  // namespace detail

// The keys of config struct C, in the order they are listed (the order of dumps and --help).
template <class C>
class KeyTable {
 public:
  // A member of C or of one of its bases; its type gives the key's type. The returned
  // reference (for .alias(...)) is valid until the next add.
  template <class M, class B>
  KeySpec& add(std::string name, M B::*member, std::string help) {
    static_assert(std::is_base_of_v<B, C>, "the member must belong to C or a base of C");
    using T = detail::KeyTraits<M>;
    M C::*m = member;
    KeySpec k = make(std::move(name), T::type, std::move(help));
    k.nullable = T::nullable;
    if constexpr (T::type == KeyType::boolean) k.bare = true;
    k.set = [m](void* c, const nlohmann::json& v) { static_cast<C*>(c)->*m = T::from(v); };
    k.get = [m](const void* c) { return T::to(static_cast<const C*>(c)->*m); };
    keys_.push_back(std::move(k));
    return keys_.back();
  }

  // A member with fixed values (an enum, or a string): `names` maps each accepted name to its
  // value; the first name of a value is canonical, later ones are accepted spellings.
  template <class M, class B>
  KeySpec& add_enum(std::string name, M B::*member, std::vector<std::pair<std::string, M>> names,
                    std::string help) {
    static_assert(std::is_base_of_v<B, C>, "the member must belong to C or a base of C");
    M C::*m = member;
    KeySpec k = make(std::move(name), KeyType::choice, std::move(help));
    for (size_t i = 0; i < names.size(); ++i) {
      size_t first = 0;
      while (!(names[first].second == names[i].second)) ++first;
      if (first == i)
        k.choices.push_back(names[i].first);
      else
        k.choice_aliases.emplace_back(names[i].first, names[first].first);
    }
    // set() receives canonical names only; get() returns the canonical name of the value.
    k.set = [m, names, key = k.name](void* c, const nlohmann::json& v) {
      const std::string s = v.get<std::string>();
      for (const auto& [n, value] : names)
        if (n == s) {
          static_cast<C*>(c)->*m = value;
          return;
        }
      RAISE("{}: '{}' is not a valid name", key, s);
    };
    k.get = [m, names, key = k.name](const void* c) -> nlohmann::json {
      for (const auto& [n, value] : names)
        if (value == static_cast<const C*>(c)->*m) return n;
      RAISE("{} holds a value that has no name", key);
    };
    keys_.push_back(std::move(k));
    return keys_.back();
  }

  // A string member that takes one of `names`.
  template <class B>
  KeySpec& add_choice(std::string name, std::string B::*member, std::vector<std::string> names,
                      std::string help) {
    std::vector<std::pair<std::string, std::string>> pairs;
    for (std::string& n : names) pairs.emplace_back(n, n);
    return add_enum(std::move(name), member, std::move(pairs), std::move(help));
  }

  // A key of TRL's, accelerate's or Unsloth's configs with no meaning here: any value is
  // accepted (unless `check` throws for it) and changes nothing; `note` says why, once.
  KeySpec& ignore(std::string name, std::string note,
                  std::function<void(const nlohmann::json&)> check = {}) {
    KeySpec k = make(std::move(name), KeyType::json, "Accepted and ignored: " + note);
    k.nullable = true;
    k.bare = true;
    k.recorded = false;
    k.note = std::move(note);
    k.check = std::move(check);
    k.set = [](void*, const nlohmann::json&) {};
    k.get = [](const void*) { return nlohmann::json(); };
    keys_.push_back(std::move(k));
    return keys_.back();
  }

  // Another program's spelling of fp8rl keys: `set` translates a value of `type` into the
  // keys named by `writes`, which the dumps record instead of this one.
  KeySpec& translate(std::string name, KeyType type, std::vector<std::string> writes,
                     std::function<void(C&, const nlohmann::json&)> set, std::string help) {
    KeySpec k = make(std::move(name), type, std::move(help));
    k.recorded = false;
    k.bare = type == KeyType::boolean;
    k.writes = std::move(writes);
    k.set = [set](void* c, const nlohmann::json& v) { set(*static_cast<C*>(c), v); };
    k.get = [](const void*) { return nlohmann::json(); };
    keys_.push_back(std::move(k));
    return keys_.back();
  }

  const std::vector<KeySpec>& keys() const { return keys_; }
  const KeySpec* find(std::string_view name) const { return find_key(keys_, name); }

  // Sets the keys of the YAML file (or text) in `config`; keys the file does not name keep
  // their values.
  void load_yaml(const std::string& path, C& config) const {
    apply_values(keys_, read_yaml_file(keys_, path), &config);
  }
  void load_yaml_text(const std::string& text, const std::string& file, C& config) const {
    apply_values(keys_, read_yaml(keys_, text, file), &config);
  }
  nlohmann::ordered_json to_json(const C& config) const { return config_to_json(keys_, &config); }
  std::string dump_yaml(const C& config) const { return config_to_yaml(keys_, &config); }

 private:
  KeySpec make(std::string name, KeyType type, std::string help) {
    CHECK(find_key(keys_, name) == nullptr, "config key '{}' listed twice", name);
    KeySpec k;
    k.name = std::move(name);
    k.type = type;
    k.help = std::move(help);
    return k;
  }

  std::vector<KeySpec> keys_;
};

// The raw flag values of one command line, before they are typed (ConfigFlags's untyped
// half). The CLI11 callbacks point into this object: it must not move after add_to.
class FlagValues {
 public:
  FlagValues() = default;
  FlagValues(const FlagValues&) = delete;
  FlagValues& operator=(const FlagValues&) = delete;

  // --config FILE, and one option per key with its aliases (`defaults`: a config whose values
  // --help shows).
  void add_to(CLI::App& app, const std::vector<KeySpec>& keys, const void* defaults);
  // A positional argument (e.g. MODEL) that sets `key`.
  CLI::Option* add_positional(CLI::App& app, const std::vector<KeySpec>& keys,
                              const std::string& key, const std::string& help);
  const std::string& config_path() const { return config_path_; }
  // {name: typed value} of the flags given.
  nlohmann::json values(const std::vector<KeySpec>& keys) const;

 private:
  void record(const std::string& key, const std::string& option, const std::string& value);

  std::string config_path_;
  struct Given {
    std::string option;  // as written in errors: "--max-steps", "MODEL"
    std::string value;
  };
  std::map<std::string, Given> given_;  // by key name
};

// A config's flags on a CLI11 command:
//   auto flags = std::make_shared<ConfigFlags<SftConfig>>(*cmd, sft_keys());
//   flags->add_positional(*cmd, "model", "Hugging Face model directory");
//   cmd->callback([flags] { run_sft(flags->resolve()); });
// Keep it alive and in place while the command parses (the callbacks point into it).
template <class C>
class ConfigFlags {
 public:
  // Also lets `app` keep arguments it does not know, for merge() to reject them with the
  // nearest flag suggested (CLI11 alone names no alternative).
  ConfigFlags(CLI::App& app, KeyTable<C> table) : app_(&app), table_(std::move(table)) {
    const C defaults{};
    values_.add_to(app, table_.keys(), &defaults);
    app.allow_extras();
  }
  ConfigFlags(const ConfigFlags&) = delete;
  ConfigFlags& operator=(const ConfigFlags&) = delete;

  CLI::Option* add_positional(CLI::App& app, const std::string& key, const std::string& help) {
    return values_.add_positional(app, table_.keys(), key, help);
  }
  // C's defaults, then the --config file's keys, then the flags; not validated.
  // The notes of the keys given that fp8rl ignores go to stderr, one line each.
  C merge() const {
    reject_unknown_arguments(table_.keys(), app_->remaining());
    C config{};
    nlohmann::json file = nlohmann::json::object();
    if (!values_.config_path().empty()) file = read_yaml_file(table_.keys(), values_.config_path());
    const nlohmann::json flags = values_.values(table_.keys());
    apply_values(table_.keys(), file, &config);
    apply_values(table_.keys(), flags, &config);
    nlohmann::json given = file;
    given.update(flags);
    for (const std::string& line : config_notes(table_.keys(), given))
      fmt::print(stderr, "{}\n", line);
    return config;
  }
  // The keys the --config file or the flags set (by key name), whatever their values.
  std::set<std::string> given_keys() const {
    std::set<std::string> names;
    nlohmann::json file = nlohmann::json::object();
    if (!values_.config_path().empty()) file = read_yaml_file(table_.keys(), values_.config_path());
    const nlohmann::json flags = values_.values(table_.keys());
    for (const nlohmann::json* set : {static_cast<const nlohmann::json*>(&file), &flags})
      for (auto it = set->begin(); it != set->end(); ++it) names.insert(it.key());
    return names;
  }
  // merge(), validated (C::validate()).
  C resolve() const {
    C config = merge();
    config.validate();
    return config;
  }
  const KeyTable<C>& table() const { return table_; }

 private:
  CLI::App* app_;
  KeyTable<C> table_;
  FlagValues values_;
};

}  // namespace fp8rl::cli
