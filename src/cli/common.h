// Option parsing and model loading shared by the subcommands.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "model/model.h"
#include "ops/context.h"

namespace fp8rl::cli {

// What `fp8rl: error:` shows of an fp8rl::Error: its message; with FP8RL_DEBUG=1 in the
// environment also the source location that raised it (Error::describe).
std::string error_message(const Error& e);
inline const char* kDebugHelp =
    "Set FP8RL_DEBUG=1 in the environment to have errors name the source line that raised them.";

// "--fp8 auto|off|row|block|tensor": auto (nullopt) runs the checkpoint as stored.
std::optional<Fp8Scheme> parse_fp8_option(const std::string& value);
inline const char* kFp8Help =
    "FP8 scheme: auto (as stored), off, row, block or tensor (quantize on load)";

// "1,2,3" -> ids; rejects empty lists, non-integers and negative values with the offending item.
std::vector<int32_t> parse_ids(const std::string& text);

// "--device cpu|cuda" -> Device.
Device parse_device(const std::string& value);

// "--activations f32|bf16" for a CPU forward -> Context::bf16_activations: exact fp32, or the
// CUDA backend's bf16 roundings emulated (to compare CUDA results with their CPU reference).
// `given`: whether the option was on the command line; with --device cuda it is an error, as
// CUDA activations are always bf16.
bool parse_activations(const std::string& value, Device device, bool given);
inline const char* kActivationsHelp =
    "CPU activations: f32 (exact reference) or bf16 (round where the CUDA backend stores bf16, "
    "to compare with --device cuda); CUDA's are always bf16";

// Positions 0..n-1.
std::vector<int32_t> iota(size_t n);

}  // namespace fp8rl::cli
