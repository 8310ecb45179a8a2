// FP8 checkpoint formats: what a config.json "quantization_config" says about how the
// decoder linears are stored, and the config fp8rl writes for its own FP8 checkpoints.
//
// Read: compressed-tensors (float-quantized / naive-quantized; strategies tensor, channel,
// block 128x128; activations token, tensor dynamic or static, group 128, or none) and
// quant_method "fp8" (block 128x128 with weight_scale_inv, or per-tensor with weight_scale
// and optional static input_scale). Which linears are quantized is decided by the stored
// weight dtype (F8_E4M3), so `ignore` lists need no matching here.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace fp8rl {

// Weight scale granularity; `off` means the linear is not FP8.
enum class Fp8Scheme { off, tensor, row, block };
// Activation quantization in the forward: dynamic per tensor, per token (row), per 1x128
// group along K, a static per-tensor input_scale from the checkpoint, or none (weight-only).
enum class ActScaling { none, tensor, token, group, static_tensor };

inline constexpr int kFp8Block = 128;

std::string_view scheme_name(Fp8Scheme s);        // "off" | "tensor" | "row" | "block"
Fp8Scheme parse_scheme(std::string_view s);       // throws naming the valid values
std::string_view act_scaling_name(ActScaling a);  // "none" | "tensor" | "token" | ...
// The activation scaling that matches a weight scheme when quantizing on the fly.
ActScaling matching_act_scaling(Fp8Scheme s);

struct CheckpointQuant {
  Fp8Scheme weight = Fp8Scheme::off;
  ActScaling act = ActScaling::none;
  std::string weight_scale_name = "weight_scale";  // or "weight_scale_inv"
  std::string method;                              // "compressed-tensors" | "fp8"
};

// Parses config.json's quantization_config (null: unquantized checkpoint).
CheckpointQuant parse_quantization_config(const nlohmann::json& q);

enum class Fp8Format { compressed_tensors, fp8 };
Fp8Format parse_fp8_format(std::string_view s);  // "compressed-tensors" | "fp8"
// The quantization_config fp8rl writes for a checkpoint quantized with `scheme`.
nlohmann::json make_quantization_config(Fp8Scheme scheme, Fp8Format format);
// Name of the weight scale tensor in that format ("weight_scale" / "weight_scale_inv").
std::string_view weight_scale_name(Fp8Format format);

}  // namespace fp8rl
