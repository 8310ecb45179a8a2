#include "cli/common.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "core/check.h"

namespace fp8rl::cli {

std::string error_message(const Error& e) {
  // A user acts on the message; the location is for whoever debugs fp8rl itself.
  const char* debug = std::getenv("FP8RL_DEBUG");
  return debug != nullptr && std::strcmp(debug, "1") == 0 ? e.describe() : e.what();
}

std::optional<Fp8Scheme> parse_fp8_option(const std::string& value) {
  if (value == "auto") return std::nullopt;
  return parse_scheme(value);
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    CHECK(!item.empty() && ec == std::errc() && ptr == item.data() + item.size() && v >= 0 &&
              v <= INT32_MAX,
          "--ids: '{}' is not a token id (expected comma-separated non-negative integers)", item);
    ids.push_back(int32_t(v));
    start = end + 1;
  }
  return ids;
}

Device parse_device(const std::string& value) {
  if (value == "cpu") return Device::cpu;
  if (value == "cuda") return Device::cuda;
  RAISE("--device: '{}' is not a device (cpu, cuda)", value);
}

bool parse_activations(const std::string& value, Device device, bool given) {
  CHECK(value == "f32" || value == "bf16", "--activations: '{}' is not f32 or bf16", value);
  CHECK(!given || device == Device::cpu,
        "--activations {} applies to --device cpu only; CUDA activations are always bf16", value);
  return value == "bf16";
}

std::vector<int32_t> iota(size_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace fp8rl::cli
