// The benchmarks' developer controls, off the user surface: one repeatable
// `--device-option KEY=VALUE` on the bench commands, whose keys are the names of the fields
// they set (CudaDeviceOptions, the random model's layout, the generation engine's options).
// The keys live in one table (device_options.cpp): adding a control is one entry there.
// `fp8rl bench --list-device-options` prints it.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "ops/context.h"
#include "ops/device.h"

namespace fp8rl::cli {

// What the controls set. The defaults are those of the structs the fields come from.
struct DeviceControls {
  CudaDeviceOptions cuda;
  bool stacked_qkv = true;  // random weights: q, k and v in one buffer (Model::random's pack_qkv)
  bool shared_prefix = EngineOptions{}.shared_prefix_attention;
  int64_t shared_prefix_min_tokens = EngineOptions{}.shared_prefix_min_tokens;
  std::optional<bool> async_scheduling = EngineOptions{}.async_scheduling;  // unset: the device's
  std::vector<std::string> given;            // the KEY=VALUE pairs set, in order
  std::vector<std::string> cuda_only_given;  // the keys of those that act on CUDA only
};

// Where a control acts; a bench command takes the keys of the scopes it has.
enum class ControlScope {
  cuda,    // CudaDeviceOptions: accepted on the CPU, where it changes nothing (reported so)
  model,   // the layout of random weights
  engine,  // the generation engine (bench generate)
};

struct DeviceOption {
  std::string key;   // the field's name
  std::string type;  // "bool" or "int"
  ControlScope scope;
  std::string description;                                       // one line
  std::function<void(DeviceControls&, const std::string&)> set;  // raises on a bad value
  std::function<std::string(const DeviceControls&)> get;
};

// Every control, in the order --list-device-options prints them.
const std::vector<DeviceOption>& device_options();

// Adds `--device-option KEY=VALUE` (repeatable) to `c`, collected into `values`.
void add_device_option_flag(CLI::App& c, std::vector<std::string>& values);

// The controls `values` set. An unknown key, a key outside `scopes` or a bad value is an error
// naming it and the valid keys; `command` names the benchmark in errors.
DeviceControls parse_device_options(const std::vector<std::string>& values,
                                    const std::string& command,
                                    const std::vector<ControlScope>& scopes);

// The table as `fp8rl bench --list-device-options` prints it: key, type, default, description.
std::string device_options_table();

// device_options: every KEY=VALUE given, in order; on the CPU also
// device_options_not_applied: the CUDA-only keys among them, which changed nothing.
void report_device_options(const DeviceControls& c, Device device, nlohmann::json& r);

// The JSON keys of the decode-step CUDA controls (concurrent_linears, decode_attention,
// persistent_decode, streaming_linears) as they ran on `device` (on the CPU none of those paths
// exists: decode_attention "CPU reference", the booleans false), then report_device_options.
void report_cuda_controls(const DeviceControls& c, Device device, nlohmann::json& r);

}  // namespace fp8rl::cli
