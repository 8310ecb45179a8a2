#include "formats/quant_config.h"

#include <cstdint>

#include "core/check.h"
#include "formats/json_read.h"

namespace fp8rl {

using json = nlohmann::json;

std::string_view scheme_name(Fp8Scheme s) {
  switch (s) {
    case Fp8Scheme::off:
      return "off";
    case Fp8Scheme::tensor:
      return "tensor";
    case Fp8Scheme::row:
      return "row";
    case Fp8Scheme::block:
      return "block";
  }
  RAISE("unknown FP8 scheme {}", int(s));
}

Fp8Scheme parse_scheme(std::string_view s) {
  for (Fp8Scheme v : {Fp8Scheme::off, Fp8Scheme::tensor, Fp8Scheme::row, Fp8Scheme::block})
    if (scheme_name(v) == s) return v;
  RAISE("unknown FP8 scheme '{}' (valid: off, row, block, tensor)", s);
}

std::string_view act_scaling_name(ActScaling a) {
  switch (a) {
    case ActScaling::none:
      return "none";
    case ActScaling::tensor:
      return "tensor";
    case ActScaling::token:
      return "token";
    case ActScaling::group:
      return "group128";
    case ActScaling::static_tensor:
      return "static-tensor";
  }
  RAISE("unknown activation scaling {}", int(a));
}

ActScaling matching_act_scaling(Fp8Scheme s) {
  switch (s) {
    case Fp8Scheme::off:
      return ActScaling::none;
    case Fp8Scheme::tensor:
      return ActScaling::tensor;
    case Fp8Scheme::row:
      return ActScaling::token;
    case Fp8Scheme::block:
      return ActScaling::group;
  }
  RAISE("unknown FP8 scheme {}", int(s));
}

namespace {

std::string str_field(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  CHECK(it != j.end() && it->is_string(), "quantization_config: {} needs a string '{}'", where,
        key);
  return it->get<std::string>();
}

// Optional fields: the fallback when absent or null, an fp8rl::Error naming the field when it
// holds another type. (json::value() throws nlohmann's type_error instead, with no field name,
// and converts a float to an int, undefined behaviour for 1e300.)
const json* optional_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string opt_string(const json& j, const char* key, const std::string& fallback,
                       const std::string& where) {
  const json* v = optional_field(j, key);
  if (v == nullptr) return fallback;
  CHECK(v->is_string(), "quantization_config: {} field '{}' must be a string, got {}", where, key,
        json_excerpt(*v, 40));
  return v->get<std::string>();
}

bool opt_bool(const json& j, const char* key, bool fallback, const std::string& where) {
  const json* v = optional_field(j, key);
  if (v == nullptr) return fallback;
  CHECK(v->is_boolean(), "quantization_config: {} field '{}' must be true or false, got {}", where,
        key, json_excerpt(*v, 40));
  return v->get<bool>();
}

int64_t opt_int(const json& j, const char* key, int64_t fallback, const std::string& where) {
  const json* v = optional_field(j, key);
  if (v == nullptr) return fallback;
  const bool too_big = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX);
  CHECK(v->is_number_integer() && !too_big,
        "quantization_config: {} field '{}' must be an integer, got {}", where, key,
        json_excerpt(*v, 40));
  return v->get<int64_t>();
}

bool is_128x128(const json& b) {
  if (b.is_string()) return b == "128x128";
  return b.is_array() && b.size() == 2 && b[0] == kFp8Block && b[1] == kFp8Block;
}

void check_fp8_args(const json& a, const std::string& where) {
  CHECK(a.is_object(), "quantization_config: {} must be an object", where);
  const int64_t num_bits = opt_int(a, "num_bits", 8, where);
  const std::string type = opt_string(a, "type", "float", where);
  CHECK(num_bits == 8 && type == "float",
        "quantization_config: {} is not 8-bit float quantization (num_bits={}, type={}); only "
        "FP8 checkpoints are supported",
        where, num_bits, type);
  CHECK(opt_bool(a, "symmetric", true, where),
        "quantization_config: {} is asymmetric; FP8 needs symmetric", where);
}

CheckpointQuant parse_compressed_tensors(const json& q) {
  CheckpointQuant r;
  r.method = "compressed-tensors";
  r.weight_scale_name = "weight_scale";
  const std::string format = opt_string(q, "format", "float-quantized", "the top level");
  CHECK(format == "float-quantized" || format == "naive-quantized",
        "quantization_config: compressed-tensors format '{}' is not supported (float-quantized)",
        format);
  auto groups = q.find("config_groups");
  CHECK(groups != q.end() && groups->is_object() && !groups->empty(),
        "quantization_config: compressed-tensors needs a non-empty 'config_groups' object");
  bool first = true;
  for (const auto& [gname, g] : groups->items()) {
    const std::string where = "config_groups." + gname;
    CHECK(g.is_object(), "quantization_config: {} must be an object", where);
    auto w = g.find("weights");
    CHECK(w != g.end() && !w->is_null(), "quantization_config: {} has no 'weights'", where);
    check_fp8_args(*w, where + ".weights");
    const std::string ws = str_field(*w, "strategy", where + ".weights");
    Fp8Scheme scheme;
    if (ws == "tensor") {
      scheme = Fp8Scheme::tensor;
    } else if (ws == "channel") {
      scheme = Fp8Scheme::row;
    } else if (ws == "block") {
      CHECK(w->contains("block_structure") && is_128x128((*w)["block_structure"]),
            "quantization_config: {}.weights block_structure must be [128, 128]", where);
      scheme = Fp8Scheme::block;
    } else {
      RAISE(
          "quantization_config: {}.weights strategy '{}' is not supported (tensor, channel, "
          "block)",
          where, ws);
    }
    ActScaling act = ActScaling::none;
    auto a = g.find("input_activations");
    if (a != g.end() && !a->is_null()) {
      check_fp8_args(*a, where + ".input_activations");
      const std::string as = str_field(*a, "strategy", where + ".input_activations");
      const bool dynamic = a->contains("dynamic") && (*a)["dynamic"].is_boolean()
                               ? (*a)["dynamic"].get<bool>()
                               : a->contains("dynamic");  // "local" counts as dynamic
      if (scheme == Fp8Scheme::block) {
        act = ActScaling::group;  // vLLM uses 1x128 groups for block weights, whatever is said
      } else if (as == "token") {
        act = ActScaling::token;
      } else if (as == "tensor") {
        act = dynamic ? ActScaling::tensor : ActScaling::static_tensor;
      } else if (as == "group") {
        CHECK(opt_int(*a, "group_size", 0, where + ".input_activations") == kFp8Block,
              "quantization_config: {}.input_activations group_size must be 128", where);
        act = ActScaling::group;
      } else {
        RAISE("quantization_config: {}.input_activations strategy '{}' is not supported", where,
              as);
      }
    }
    CHECK(first || (scheme == r.weight && act == r.act),
          "quantization_config: config groups with different FP8 schemes are not supported");
    r.weight = scheme;
    r.act = act;
    first = false;
  }
  return r;
}

CheckpointQuant parse_fp8_method(const json& q) {
  CheckpointQuant r;
  r.method = "fp8";
  const std::string fmt_name = opt_string(q, "fmt", "e4m3", "the top level");
  CHECK(fmt_name == "e4m3", "quantization_config: fp8 fmt '{}' is not supported (e4m3)", fmt_name);
  const std::string act = opt_string(q, "activation_scheme", "dynamic", "the top level");
  CHECK(act == "dynamic" || act == "static",
        "quantization_config: activation_scheme '{}' must be dynamic or static", act);
  auto bs = q.find("weight_block_size");
  if (bs != q.end() && !bs->is_null()) {
    CHECK(is_128x128(*bs),
          "quantization_config: weight_block_size {} is not supported ([128, 128])",
          json_excerpt(*bs));
    CHECK(act == "dynamic", "quantization_config: block FP8 needs activation_scheme dynamic");
    r.weight = Fp8Scheme::block;
    r.act = ActScaling::group;
    r.weight_scale_name = "weight_scale_inv";
  } else {
    r.weight = Fp8Scheme::tensor;
    r.act = act == "static" ? ActScaling::static_tensor : ActScaling::tensor;
    r.weight_scale_name = "weight_scale";
  }
  return r;
}

}  // namespace

CheckpointQuant parse_quantization_config(const json& q) {
  if (q.is_null()) return {};
  CHECK(q.is_object(), "quantization_config must be an object");
  const std::string method = str_field(q, "quant_method", "the top level");
  if (method == "compressed-tensors") return parse_compressed_tensors(q);
  if (method == "fp8") return parse_fp8_method(q);
  RAISE("quantization_config: quant_method '{}' is not supported (compressed-tensors, fp8)",
        method);
}

Fp8Format parse_fp8_format(std::string_view s) {
  if (s == "compressed-tensors") return Fp8Format::compressed_tensors;
  if (s == "fp8") return Fp8Format::fp8;
  RAISE("unknown checkpoint format '{}' (valid: compressed-tensors, fp8)", s);
}

std::string_view weight_scale_name(Fp8Format format) {
  return format == Fp8Format::fp8 ? "weight_scale_inv" : "weight_scale";
}

json make_quantization_config(Fp8Scheme scheme, Fp8Format format) {
  CHECK(scheme != Fp8Scheme::off, "no quantization_config for an unquantized checkpoint");
  if (format == Fp8Format::fp8) {
    CHECK(scheme == Fp8Scheme::block,
          "the fp8 (weight_scale_inv) format stores 128x128 block scales only; use --format "
          "compressed-tensors for the {} scheme",
          scheme_name(scheme));
    return {{"quant_method", "fp8"},
            {"fmt", "e4m3"},
            {"activation_scheme", "dynamic"},
            {"weight_block_size", {kFp8Block, kFp8Block}},
            {"modules_to_not_convert", {"lm_head"}}};
  }
  // Only long-standing QuantizationArgs keys: compressed-tensors validates with extra="forbid".
  json weights = {
      {"num_bits", 8},       {"type", "float"},       {"symmetric", true},
      {"dynamic", false},    {"group_size", nullptr}, {"block_structure", nullptr},
      {"actorder", nullptr}, {"observer", "minmax"},  {"observer_kwargs", json::object()}};
  json acts = {{"num_bits", 8},       {"type", "float"},       {"symmetric", true},
               {"dynamic", true},     {"group_size", nullptr}, {"block_structure", nullptr},
               {"actorder", nullptr}, {"observer", nullptr},   {"observer_kwargs", json::object()}};
  switch (scheme) {
    case Fp8Scheme::tensor:
      weights["strategy"] = "tensor";
      acts["strategy"] = "tensor";
      break;
    case Fp8Scheme::row:
      weights["strategy"] = "channel";
      acts["strategy"] = "token";
      break;
    case Fp8Scheme::block:
      weights["strategy"] = "block";
      weights["block_structure"] = {kFp8Block, kFp8Block};
      acts["strategy"] = "group";
      acts["group_size"] = kFp8Block;
      break;
    case Fp8Scheme::off:
      break;
  }
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"global_compression_ratio", nullptr},
          {"kv_cache_scheme", nullptr},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"format", "float-quantized"},
              {"weights", weights},
              {"input_activations", acts},
              {"output_activations", nullptr}}}}}};
}

}  // namespace fp8rl
