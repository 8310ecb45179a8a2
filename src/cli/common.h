// Option parsing and model loading shared by the subcommands.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/model.h"
#include "ops/context.h"

namespace fp8rl::cli {

// "--fp8 auto|off|row|block|tensor": auto (nullopt) runs the checkpoint as stored.
std::optional<Fp8Scheme> parse_fp8_option(const std::string& value);
inline const char* kFp8Help =
    "FP8 scheme: auto (as stored), off, row, block or tensor (quantize on load)";

// "1,2,3" -> ids; rejects empty lists, non-integers and negative values with the offending item.
std::vector<int32_t> parse_ids(const std::string& text);

// "--device cpu|cuda" -> Device.
Device parse_device(const std::string& value);

// Positions 0..n-1.
std::vector<int32_t> iota(size_t n);

}  // namespace fp8rl::cli
