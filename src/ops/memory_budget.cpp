#include "ops/memory_budget.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/check.h"

namespace fp8rl {

namespace {
constexpr double kGib = double(size_t(1) << 30);
}  // namespace

size_t gpu_memory_bytes(std::string_view key, double gib) {
  CHECK(gib > 0 && gib <= kMaxGpuMemoryGib,  // NaN fails both comparisons
        "{} = {} is out of range (must be in (0, {}] GiB: the device memory the run may hold)", key,
        gib, kMaxGpuMemoryGib);
  return size_t(gib * kGib);
}

std::string gib_text(size_t bytes) {
  return fmt::format("{:.2f} GiB", double(bytes) / kGib);
}

size_t memory_parts_total(std::span<const MemoryPart> parts) {
  size_t total = 0;
  for (const MemoryPart& p : parts) total += p.bytes;
  return total;
}

size_t memory_budget_left(size_t budget, std::span<const MemoryPart> parts) {
  const size_t total = memory_parts_total(parts);
  return total < budget ? budget - total : 0;
}

std::string memory_budget_excess(size_t budget, std::span<const MemoryPart> parts,
                                 std::string_view hint) {
  const size_t total = memory_parts_total(parts);
  if (total <= budget) return {};
  std::string sum;
  for (const MemoryPart& p : parts) {
    if (p.bytes == 0) continue;
    sum += fmt::format("{}{} {}", sum.empty() ? "" : " + ", p.name, gib_text(p.bytes));
  }
  return fmt::format("gpu_memory {}: {} = {}, {} over{}{}", gib_text(budget), sum, gib_text(total),
                     gib_text(total - budget), hint.empty() ? "" : "; ", hint);
}

void check_memory_budget(size_t budget, std::span<const MemoryPart> parts, std::string_view hint) {
  const std::string excess = memory_budget_excess(budget, parts, hint);
  CHECK(excess.empty(), "{}", excess);
}

std::string memory_budget_refusal(size_t budget, size_t held, size_t request) {
  const size_t after = held + request;
  return fmt::format("gpu_memory {}: {} held, {} more asked for, {} over", gib_text(budget),
                     gib_text(held), gib_text(request),
                     gib_text(after > budget ? after - budget : 0));
}

size_t memory_budget_margin(size_t budget) {
  return std::clamp(budget / 64, size_t(64) << 20, size_t(512) << 20);
}

size_t kv_pool_bytes_from_left(size_t left, size_t plan, double fraction, size_t budget,
                               size_t usable) {
  const size_t reserved = plan + (budget > 0 ? memory_budget_margin(budget) : 0);
  if (left <= reserved) return 0;
  return std::min(size_t(double(left - reserved) * fraction), usable);
}

}  // namespace fp8rl
