// The per-op-family split of a CUDA profile (CudaDevice::profile), shared by the benchmarks.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

}  // namespace fp8rl::cli
