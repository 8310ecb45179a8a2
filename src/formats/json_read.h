// The one JSON reading policy of fp8rl: every JSON file or text the program reads goes through
// parse_json_text / read_json_file. Limits on size and nesting depth are enforced before and
// while parsing (an iterative scan and a SAX builder; no recursion that input can drive), and
// errors name the file, the byte offset and line, and the limit.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/spelling.h"

namespace fp8rl {

struct JsonLimits {
  // Real configs nest less than 10 deep; chat messages with tool schemas a few tens.
  int max_depth = 256;
  uint64_t max_bytes = uint64_t{64} << 20;
  // Duplicate keys are ambiguous (readers disagree on which one wins): an error by default.
  bool reject_duplicate_keys = true;
  // Formats the duplicate-key error (`path`: the keys leading to the object holding `key`);
  // the default says "duplicate key 'k' in object 'a/b'".
  std::function<std::string(const std::vector<std::string>& path, const std::string& key)>
      describe_duplicate;
};

// `what` names the source in errors (a path or "config.json of MODEL").
nlohmann::json parse_json_text(std::string_view text, std::string_view what,
                               const JsonLimits& limits = {});
nlohmann::ordered_json parse_ordered_json_text(std::string_view text, std::string_view what,
                                               const JsonLimits& limits = {});

// The file opened as an input file (core/input_file.h: regular files only, never blocking),
// read up to limits.max_bytes and parsed; errors name the path.
nlohmann::json read_json_file(const std::filesystem::path& path, const JsonLimits& limits = {});
nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path,
                                              const JsonLimits& limits = {});

// A JSON-lines dataset (core/input_file.h's InputLines, each line at most 64 MiB): every
// non-blank line parsed with this policy and handed to `row` with its 1-based line number. An
// fp8rl::Error or JSON error from the line or from `row` becomes "PATH:LINE: what".
void for_each_jsonl_row(
    const std::string& path,
    const std::function<void(const nlohmann::ordered_json& row, int64_t line)>& row);

// read(): one dataset row's reading, with a JSON library exception (a field of an unexpected
// type reached by .get<>()) turned into fp8rl::Error, which the fuzzers and callers expect.
template <class Read>
auto read_json_row(Read&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const nlohmann::json::exception& e) {
    RAISE("unexpected content: {}", e.what());
  }
}

// The keys of one JSON object as a reader asks for them; a key never asked for is an error
// (check_all_read), so that a misspelled one does not silently keep its default.
template <class Json>
struct JsonKeyReader {
  const Json& j;
  std::vector<std::string> asked;

  // The key's value; null for an absent or null key.
  const Json* get(const char* key) {
    asked.emplace_back(key);
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  // Keys that are accepted and change nothing.
  void ignore(std::initializer_list<const char*> keys) {
    for (const char* k : keys) asked.emplace_back(k);
  }
  // Raises "<prefix>'key' (did you mean 'near'?)" for the first key never asked for.
  void check_all_read(std::string_view prefix) const {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (std::find(asked.begin(), asked.end(), it.key()) != asked.end()) continue;
      const std::optional<std::string> near = nearest_spelling(it.key(), asked);
      RAISE("{}'{}'{}", prefix, it.key(),
            near ? fmt::format(" (did you mean '{}'?)", *near) : std::string());
    }
  }
};

// Throws fp8rl::Error naming `what`, the byte offset and line when `text` nests objects and
// arrays deeper than max_depth or holds a NUL byte (which nlohmann would take for the end of
// input). One pass, no recursion; for SAX parsers outside this file (tokenizer.json).
void check_json_text(std::string_view text, std::string_view what, int max_depth);

// At most max_chars characters of a JSON value for an error message, then "...": a bounded,
// depth-limited print, never the dump of an arbitrarily large input value.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars = 80);

// A value as one line of JSON (a protocol message), bytes that are not UTF-8 replaced by U+FFFD
// rather than thrown on.
std::string json_line(const nlohmann::json& value);

}  // namespace fp8rl
