// What every fuzz target shares: an fp8rl::Error is a clean rejection of the input; anything
// else (another exception, a sanitizer report, a crash, a timeout, running out of memory) is a
// finding. Inputs that hold two files are split by a 4-byte little-endian length prefix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/check.h"

namespace fp8rl::fuzz {

// Runs `parse` on one input; returns libFuzzer's "keep going" 0.
template <class F>
int run(F&& parse) {
  try {
    parse();
  } catch (const Error&) {
  }
  return 0;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// [u32 little-endian n][n bytes][the rest]; a prefix beyond the input takes all of it.
inline std::pair<std::string_view, std::string_view> split_prefixed(std::string_view in) {
  if (in.size() < 4) return {in, {}};
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(static_cast<unsigned char>(in[size_t(i)])) << (8 * i);
  in.remove_prefix(4);
  const size_t first = n < in.size() ? n : in.size();
  return {in.substr(0, first), in.substr(first)};
}

// A file of the repository (the targets' fixed tokenizer and templates).
inline std::string source_path(std::string_view relative) {
  return std::string(FP8RL_SOURCE_DIR) + "/" + std::string(relative);
}

// A deterministic choice among n from the input, so that a crash reproduces from its file.
inline size_t pick(std::string_view in, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : in) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return size_t(h % n);
}

}  // namespace fp8rl::fuzz
