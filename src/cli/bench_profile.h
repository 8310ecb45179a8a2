// What the benchmarks share: the per-op-family split of a CUDA profile (CudaDevice::profile)
// and the JSON results output.
#pragma once

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "core/output_file.h"
#include "ops/device.h"

namespace fp8rl::cli {

// {"linear": {"ms", "calls", "share"}, ...}: times summed by the op name's first word.
inline nlohmann::json op_split(const std::vector<OpTime>& prof, double* total_ms = nullptr) {
  std::map<std::string, std::pair<double, int64_t>> by_op;
  double total = 0;
  for (const OpTime& t : prof) {
    const std::string op = t.name.substr(0, t.name.find(' '));
    by_op[op].first += t.ms;
    by_op[op].second += t.calls;
    total += t.ms;
  }
  nlohmann::json split = nlohmann::json::object();
  for (const auto& [op, e] : by_op)
    split[op] = {{"ms", e.first}, {"calls", e.second}, {"share", e.first / total}};
  if (total_ms != nullptr) *total_ms = total;
  return split;
}

// The `top` most expensive op names with their shapes ("linear 4096x32 off"), by time.
inline nlohmann::json op_detail(std::vector<OpTime> prof, size_t top) {
  std::sort(prof.begin(), prof.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  nlohmann::json detail = nlohmann::json::array();
  for (size_t i = 0; i < std::min(top, prof.size()); ++i)
    detail.push_back({{"op", prof[i].name}, {"ms", prof[i].ms}, {"calls", prof[i].calls}});
  return detail;
}

// The result on stdout, and into `out` when set (replaced as a whole, a regular file only: the
// command checked it with check_output_file before running).
inline void print_bench_json(const nlohmann::json& result, const std::string& out) {
  const std::string text = result.dump(2) + "\n";
  fmt::print("{}", text);
  if (!out.empty()) write_file_replacing(out, text);
}

}  // namespace fp8rl::cli
