#include "formats/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "core/check.h"
#include "formats/json_read.h"

namespace fp8rl {

using nlohmann::json;

namespace {

struct StDtype {
  std::string_view name;
  int bits;
};
// enum Dtype of safetensors/src/tensor.rs.
constexpr std::array<StDtype, 22> kStDtypes = {
    {{"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
     {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
     {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
     {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
     {"I64", 64},        {"U64", 64}}};

struct Context {
  const std::string& path;
  [[noreturn]] void fail(const std::string& what) const {
    RAISE("safetensors file '{}': {}", path, what);
  }
  [[noreturn]] void fail(const std::string& tensor, const std::string& what) const {
    RAISE("safetensors file '{}': tensor '{}': {}", path, tensor, what);
  }
};

uint64_t unsigned_entry(const Context& cx, const std::string& name, const char* field,
                        const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer())
    cx.fail(name, fmt::format("negative {} entry {}", field, json_excerpt(v)));
  cx.fail(name, fmt::format("{} entry {} is not a non-negative integer", field, json_excerpt(v)));
}

SafetensorsTensorInfo parse_entry(const Context& cx, const std::string& name, const json& e,
                                  size_t buffer_size) {
  if (!e.is_object())
    cx.fail(name, fmt::format("entry is a JSON {}, not an object", e.type_name()));
  for (const auto& [k, v] : e.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      cx.fail(name, fmt::format("unexpected key '{}' (expected dtype, shape, data_offsets)", k));
  }
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!e.contains(k)) cx.fail(name, fmt::format("missing '{}'", k));

  SafetensorsTensorInfo info;
  info.name = name;
  const json& dt = e["dtype"];
  if (!dt.is_string()) cx.fail(name, fmt::format("dtype {} is not a string", json_excerpt(dt)));
  info.dtype_str = dt.get<std::string>();
  const int bits = safetensors_dtype_bits(info.dtype_str);
  if (bits == 0) cx.fail(name, fmt::format("unknown dtype '{}'", info.dtype_str));
  info.supported = dtype_from_safetensors(info.dtype_str, &info.dtype);

  const json& sh = e["shape"];
  if (!sh.is_array()) cx.fail(name, fmt::format("shape {} is not an array", json_excerpt(sh)));
  if (sh.size() > size_t(kMaxDims))
    cx.fail(name, fmt::format("rank {} above the supported {}", sh.size(), kMaxDims));
  // The extent ignores zero dims: strides of an empty [0, 2^62, 2^62] would still overflow
  // int64 in TensorView, so the product of the nonzero dims times the element size must fit.
  uint64_t numel = 1, extent = 1, extent_bits;
  for (const json& d : sh) {
    const uint64_t n = unsigned_entry(cx, name, "shape", d);
    if (__builtin_mul_overflow(extent, std::max<uint64_t>(n, 1), &extent))
      cx.fail(name, fmt::format("shape {} overflows", json_excerpt(sh)));
    numel *= n;  // <= extent
    info.shape.dims[info.shape.rank++] = int64_t(n);
  }
  if (__builtin_mul_overflow(extent, uint64_t(bits), &extent_bits) ||
      extent_bits / 8 > uint64_t(std::numeric_limits<int64_t>::max()))
    cx.fail(name, fmt::format("shape {} overflows", json_excerpt(sh)));
  const uint64_t total_bits = numel * uint64_t(bits);
  if (total_bits % 8 != 0)
    cx.fail(name, fmt::format("{} elements of {} do not fill whole bytes", numel, info.dtype_str));
  const uint64_t nbytes = total_bits / 8;

  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    cx.fail(name, fmt::format("data_offsets {} is not [begin, end]", json_excerpt(off)));
  const uint64_t begin = unsigned_entry(cx, name, "data_offsets", off[0]);
  const uint64_t end = unsigned_entry(cx, name, "data_offsets", off[1]);
  if (begin > end) cx.fail(name, fmt::format("data_offsets [{}, {}] has begin > end", begin, end));
  if (end > buffer_size)
    cx.fail(name, fmt::format("data_offsets [{}, {}] out of bounds of the {}-byte data buffer",
                              begin, end, buffer_size));
  if (end - begin != nbytes)
    cx.fail(name, fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                              json_excerpt(sh), info.dtype_str, nbytes, begin, end, end - begin));
  info.begin = size_t(begin);
  info.end = size_t(end);
  return info;
}

// Rust's reader requires the ranges to tile the buffer exactly; so do we.
void check_coverage(const Context& cx, const std::vector<SafetensorsTensorInfo>& tensors,
                    size_t buffer_size) {
  std::vector<const SafetensorsTensorInfo*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  size_t pos = 0;
  const SafetensorsTensorInfo* prev = nullptr;
  for (const auto* t : order) {
    if (t->begin < pos)
      cx.fail(t->name, fmt::format("data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", t->begin,
                                   t->end, prev->name, prev->begin, prev->end));
    if (t->begin > pos)
      cx.fail(t->name, fmt::format("hole in the data buffer: bytes [{}, {}) before it belong to "
                                   "no tensor",
                                   pos, t->begin));
    pos = t->end;
    prev = t;
  }
  if (pos != buffer_size)
    cx.fail(fmt::format("hole in the data buffer: bytes [{}, {}) at its end belong to no tensor",
                        pos, buffer_size));
}

}  // namespace

int safetensors_dtype_bits(std::string_view dtype_str) {
  for (const auto& d : kStDtypes)
    if (d.name == dtype_str) return d.bits;
  return 0;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, size_t buffer_size,
                                           const std::string& path) {
  const Context cx{path};
  if (text.empty() || text.front() != '{')
    cx.fail("header does not start with '{' (not a safetensors file?)");
  // JSON never holds a raw NUL, but nlohmann's lexer takes one for the end of input and would
  // accept whatever follows it.
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos)
    cx.fail(fmt::format("header is not valid JSON: NUL byte at offset {}", nul));
  // nlohmann alone keeps the last of duplicate keys silently; a header with two entries of one
  // name is ambiguous, so duplicates at any depth are errors.
  JsonLimits limits;
  limits.max_bytes = text.size();  // the caller bounds the header length
  limits.describe_duplicate = [](const std::vector<std::string>& keys, const std::string& key) {
    if (keys.empty()) return fmt::format("tensor '{}': duplicate tensor name in the header", key);
    return fmt::format("tensor '{}': duplicate key '{}' in its entry", keys[0], key);
  };
  const json j = parse_json_text(text, fmt::format("safetensors file '{}': header", path), limits);
  if (!j.is_object()) cx.fail(fmt::format("header is a JSON {}, not an object", j.type_name()));

  SafetensorsHeader h;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) cx.fail("__metadata__ is not a string->string object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          cx.fail(
              fmt::format("__metadata__ value of '{}' is {}, not a string", k, json_excerpt(v)));
        h.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    h.tensors.push_back(parse_entry(cx, name, entry, buffer_size));
  }
  // json objects iterate in key order, so tensors are already sorted by name.
  check_coverage(cx, h.tensors, buffer_size);
  return h;
}

}  // namespace fp8rl
