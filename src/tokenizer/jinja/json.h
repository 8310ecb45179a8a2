// JSON in and out of the value model. dump_json is HF transformers' `tojson` filter, which is
// Python's json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys): insertion order kept, non-ASCII written as is, Python's float repr,
// NaN/Infinity spelled as Python does.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "tokenizer/jinja/value.h"

namespace fp8rl::jinja {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;          // None: one line
  std::optional<std::string> item_separator;  // default ", " (one line) or "," (indented)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
  // >= 0: a budget error once the text passes this many bytes (list * n shares its items, so a
  // small list can print as a huge text).
  std::int64_t max_bytes = -1;
};

std::string dump_json(const Value& value, const JsonDumpOptions& options);

// JSON objects keep their key order. Integers beyond the int64 range become floats.
Value from_json(const nlohmann::ordered_json& json);

}  // namespace fp8rl::jinja
