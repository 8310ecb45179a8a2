// Small helpers for reading tokenizer.json-style configs with errors that name the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/check.h"
#include "formats/json_read.h"

namespace fp8rl::tok {

using Json = nlohmann::json;

// The value at key, which must exist (an fp8rl::Error names `where` and the key otherwise).
inline const Json& json_at(const Json& j, std::string_view key, std::string_view where) {
  CHECK(j.is_object(), "{}: expected a JSON object", where);
  auto it = j.find(key);
  CHECK(it != j.end(), "{}: missing field '{}'", where, key);
  return *it;
}

inline std::string json_string(const Json& j, std::string_view key, std::string_view where) {
  const Json& v = json_at(j, key, where);
  CHECK(v.is_string(), "{}: field '{}' must be a string", where, key);
  return v.get<std::string>();
}

// Optional fields: `fallback` when absent or null.
inline bool json_bool_or(const Json& j, std::string_view key, bool fallback,
                         std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  CHECK(it->is_boolean(), "{}: field '{}' must be true or false", where, key);
  return it->get<bool>();
}

inline std::string json_string_or(const Json& j, std::string_view key, std::string fallback,
                                  std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  CHECK(it->is_string(), "{}: field '{}' must be a string", where, key);
  return it->get<std::string>();
}

inline std::string json_type(const Json& j, std::string_view where) {
  return json_string(j, "type", where);
}

// Token ids index dense tables (id -> token): one id of 4e8 would allocate gigabytes. The
// bound is 64x the largest vocabulary released (Gemma 3: 262k).
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// Sequence normalizers, pre-tokenizers, decoders and post-processors nest (a Sequence may hold
// Sequences); real tokenizers nest at most two deep, and the bound keeps construction and
// application from recursing as deep as the input says.
constexpr int kMaxSequenceDepth = 16;
inline void check_sequence_depth(int depth, std::string_view where) {
  CHECK(depth < kMaxSequenceDepth, "{}: Sequence nested deeper than the limit of {}", where,
        kMaxSequenceDepth);
}

// A single-character field (Metaspace replacement, Strip content) as UTF-8.
std::string json_char(const Json& j, std::string_view key, std::string_view where);

}  // namespace fp8rl::tok
