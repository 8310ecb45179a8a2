#include "cli/device_options.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/run_config.h"
#include "core/check.h"

namespace fp8rl::cli {

namespace {

bool parse_bool_value(const std::string& v) {
  const std::optional<bool> b = parse_bool(v);
  CHECK(b.has_value(), "'{}' is not a bool (true, false, 1 or 0)", v);
  return *b;
}

int64_t parse_int(const std::string& v, int64_t lo) {
  const std::optional<int64_t> x = parse_integer(v);
  CHECK(x.has_value() && *x >= lo, "'{}' is not an integer >= {}", v, lo);
  return *x;
}

// The field a bool or int control sets, as a function of the controls (one entry a line).
using BoolField = bool& (*)(DeviceControls&);
using IntField = int64_t& (*)(DeviceControls&);

DeviceOption boolean(const char* key, ControlScope scope, const char* description,
                     BoolField field) {
  return {key,
          "bool",
          scope,
          description,
          [field](DeviceControls& c, const std::string& v) { field(c) = parse_bool_value(v); },
          [field](const DeviceControls& c) {
            DeviceControls copy = c;
            return std::string(field(copy) ? "true" : "false");
          }};
}

DeviceOption integer(const char* key, ControlScope scope, const char* description, int64_t lo,
                     IntField field) {
  return {key,
          "int",
          scope,
          description,
          [field, lo](DeviceControls& c, const std::string& v) { field(c) = parse_int(v, lo); },
          [field](const DeviceControls& c) {
            DeviceControls copy = c;
            return std::to_string(field(copy));
          }};
}

// What a scope's controls set, for errors.
const char* scope_subject(ControlScope s) {
  switch (s) {
    case ControlScope::cuda:
      return "CUDA kernels";
    case ControlScope::model:
      return "random weights";
    case ControlScope::engine:
      return "the generation engine";
  }
  return "?";
}

const char* scope_name(ControlScope s) {
  switch (s) {
    case ControlScope::cuda:
      return "cuda";
    case ControlScope::model:
      return "model";
    case ControlScope::engine:
      return "engine";
  }
  return "?";
}

std::string keys_of(const std::vector<ControlScope>& scopes) {
  std::string keys;
  for (const DeviceOption& o : device_options())
    if (std::find(scopes.begin(), scopes.end(), o.scope) != scopes.end())
      keys += (keys.empty() ? "" : ", ") + o.key;
  return keys;
}

}  // namespace

const std::vector<DeviceOption>& device_options() {
  using S = ControlScope;
  using C = DeviceControls;
  static const std::vector<DeviceOption> table = {
      boolean("concurrent_linears", S::cuda,
              "decode-sized FP8 GEMMs on a second stream (gate/up side by side, a lone GEMM as "
              "two K halves); false: one GEMM at a time",
              [](C& c) -> bool& { return c.cuda.concurrent_linears; }),
      boolean("decode_mma", S::cuda,
              "paged decode attention on the tensor-core kernel (bf16 or FP8 KV); false: "
              "the CUDA-core kernel",
              [](C& c) -> bool& { return c.cuda.decode_mma; }),
      {"persistent_decode", "bool", S::cuda,
       "tensor-core decode blocks that each take several items (persistent_decode_sms -1); "
       "false: a block per item (persistent_decode_sms 0)",
       [](C& c, const std::string& v) {
         c.cuda.persistent_decode_sms = parse_bool_value(v) ? -1 : 0;
       },
       [](const C& c) {
         return std::string(c.cuda.persistent_decode_sms != 0 ? "true" : "false");
       }},
      {"persistent_decode_sms", "int", S::cuda,
       "multiprocessors the persistent decode grid is sized to: -1 all, 0 a block per item, "
       "n > 0 n of them",
       [](C& c, const std::string& v) { c.cuda.persistent_decode_sms = int(parse_int(v, -1)); },
       [](const C& c) { return std::to_string(c.cuda.persistent_decode_sms); }},
      boolean("streaming_linears", S::cuda,
              "FP8 GEMMs of at most 16 rows (row or tensor scaled) on the weight-streaming "
              "kernel, a group's weights in one launch; false: cuBLASLt at every size",
              [](C& c) -> bool& { return c.cuda.streaming_linears; }),
      boolean("streaming_lora_down", S::cuda,
              "a group's LoRA down products computed inside its weight-streaming launch; "
              "false: a bf16 GEMM before it",
              [](C& c) -> bool& { return c.cuda.streaming_lora_down; }),
      boolean("wgmma_attention", S::cuda,
              "attention on the Hopper wgmma kernel where the device runs it; false: the "
              "mma.sync kernel",
              [](C& c) -> bool& { return c.cuda.wgmma_attention; }),
      boolean("shared_prefix_mma", S::cuda,
              "the shared-prefix decode kernel on the tensor cores (P in bf16); false: on the "
              "CUDA cores, P in fp32",
              [](C& c) -> bool& { return c.cuda.shared_prefix_mma; }),
      boolean("tiled_attention_backward", S::cuda,
              "attention backward on the tiled tensor-core kernels; false: the reference "
              "kernels (a warp per row)",
              [](C& c) -> bool& { return c.cuda.tiled_attention_backward; }),
      boolean("fp8_input_gradient", S::cuda,
              "a frozen FP8-row weight's input gradient as an FP8 GEMM; false: bf16 against "
              "the dequantized weight",
              [](C& c) -> bool& { return c.cuda.fp8_input_gradient; }),
      boolean("device_region", S::cuda,
              "every buffer, the scratch arena and the cuBLASLt workspace in one reserved "
              "device region; false: a cudaMalloc per buffer",
              [](C& c) -> bool& { return c.cuda.device_region; }),
      boolean("stacked_qkv", S::model,
              "random weights with q, k and v in one buffer (one GEMM); false: three buffers, "
              "three GEMMs",
              [](C& c) -> bool& { return c.stacked_qkv; }),
      boolean("shared_prefix", S::engine,
              "decode steps read a prompt's shared KV blocks once for all its samples; false: "
              "each sequence reads its whole cache",
              [](C& c) -> bool& { return c.shared_prefix; }),
      integer("shared_prefix_min_tokens", S::engine,
              "shortest prompt whose samples decode on the shared-prefix path", 0,
              [](C& c) -> int64_t& { return c.shared_prefix_min_tokens; }),
      {"async_scheduling", "bool", S::engine,
       "plan step k+1 while step k runs (auto: on for CUDA, off for the CPU); false: after "
       "step k has returned its tokens",
       [](C& c, const std::string& v) { c.async_scheduling = parse_bool_value(v); },
       [](const C& c) {
         return std::string(!c.async_scheduling ? "auto" : *c.async_scheduling ? "true" : "false");
       }},
  };
  return table;
}

void add_device_option_flag(CLI::App& c, std::vector<std::string>& values) {
  c.add_option("--device-option", values,
               "Developer control KEY=VALUE, repeatable (fp8rl bench --list-device-options)")
      ->type_name("KEY=VALUE")
      ->take_all()
      ->allow_extra_args(false);
}

DeviceControls parse_device_options(const std::vector<std::string>& values,
                                    const std::string& command,
                                    const std::vector<ControlScope>& scopes) {
  DeviceControls c;
  for (const std::string& kv : values) {
    const size_t eq = kv.find('=');
    CHECK(eq != std::string::npos && eq > 0,
          "{}: --device-option '{}' is not KEY=VALUE (valid keys: {})", command, kv,
          keys_of(scopes));
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    const auto& table = device_options();
    const auto it = std::find_if(table.begin(), table.end(),
                                 [&](const DeviceOption& o) { return o.key == key; });
    CHECK(it != table.end(), "{}: --device-option: unknown key '{}' (valid keys: {})", command, key,
          keys_of(scopes));
    CHECK(std::find(scopes.begin(), scopes.end(), it->scope) != scopes.end(),
          "{}: --device-option: key '{}' sets {}, which {} does not run (valid keys: {})", command,
          key, scope_subject(it->scope), command, keys_of(scopes));
    try {
      it->set(c, value);
    } catch (const Error& e) {
      RAISE("{}: --device-option {}: {} (valid keys: {})", command, kv, e.what(), keys_of(scopes));
    }
    c.given.push_back(kv);
    if (it->scope == ControlScope::cuda) c.cuda_only_given.push_back(key);
  }
  return c;
}

std::string device_options_table() {
  const DeviceControls defaults;
  std::string out =
      "Developer controls of the bench commands: --device-option KEY=VALUE, repeatable.\n"
      "Scope cuda: CUDA kernels (accepted on the CPU, where they change nothing); model: the\n"
      "layout of random weights; engine: bench generate's generation engine.\n\n";
  out += fmt::format("{:<26} {:<5} {:<8} {:<7} {}\n", "KEY", "TYPE", "DEFAULT", "SCOPE",
                     "DESCRIPTION");
  for (const DeviceOption& o : device_options())
    out += fmt::format("{:<26} {:<5} {:<8} {:<7} {}\n", o.key, o.type, o.get(defaults),
                       scope_name(o.scope), o.description);
  return out;
}

void report_device_options(const DeviceControls& c, Device device, nlohmann::json& r) {
  r["device_options"] = c.given;
  if (device != Device::cuda && !c.cuda_only_given.empty())
    r["device_options_not_applied"] = c.cuda_only_given;
}

void report_cuda_controls(const DeviceControls& c, Device device, nlohmann::json& r) {
  // What ran, not what was asked: on the CPU none of these CUDA paths exists.
  const bool cuda = device == Device::cuda;
  r["concurrent_linears"] = cuda && c.cuda.concurrent_linears;
  r["decode_attention"] = !cuda               ? "CPU reference"
                          : c.cuda.decode_mma ? "tensor cores"
                                              : "CUDA cores";
  r["persistent_decode"] = cuda && c.cuda.persistent_decode_sms != 0;
  r["streaming_linears"] = cuda && c.cuda.streaming_linears;
  r["streaming_lora_down"] = cuda && c.cuda.streaming_linears && c.cuda.streaming_lora_down;
  report_device_options(c, device, r);
}

}  // namespace fp8rl::cli
