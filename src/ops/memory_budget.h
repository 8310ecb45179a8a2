// A device memory budget (--gpu-memory, YAML gpu_memory): one number that everything a run
// holds on its device must fit (weights, adapter, optimizer state, KV pool, activations, the
// scratch arena and the cuBLASLt workspace). Plain arithmetic and messages, no device: a
// command checks its memory plan against the budget before the first step (before the weights
// load for the weights themselves), the CUDA backend refuses an allocation beyond it, and the
// engine sizes its KV pool from what it leaves, all in the same words. What the driver holds
// outside our allocations (the CUDA context, CUDA graphs) is not in it.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace fp8rl {

// The largest budget taken: more than any GPU has, so a larger value is a mistake (bytes or
// MiB given where GiB are meant) rather than a budget.
inline constexpr double kMaxGpuMemoryGib = 4096;

// `gib` GiB in bytes; an error naming `key` (e.g. "gpu_memory", "--gpu-memory") unless
// 0 < gib <= kMaxGpuMemoryGib (NaN and infinities are errors too).
size_t gpu_memory_bytes(std::string_view key, double gib);

// bytes as GiB with two decimals: "9.44 GiB".
std::string gib_text(size_t bytes);

// One named part of what a run holds on the device.
struct MemoryPart {
  std::string name;
  size_t bytes = 0;
};

size_t memory_parts_total(std::span<const MemoryPart> parts);

// What `budget` leaves after `parts`; 0 when they do not fit.
size_t memory_budget_left(size_t budget, std::span<const MemoryPart> parts);

// Empty when `parts` fit `budget`; else what does not fit and by how much, then `hint`:
// "gpu_memory 16.00 GiB: weights 9.44 GiB + KV pool 8.00 GiB = 17.44 GiB, 1.44 GiB over;
// lower --kv-memory". Parts of 0 bytes are left out.
std::string memory_budget_excess(size_t budget, std::span<const MemoryPart> parts,
                                 std::string_view hint);
// Raises memory_budget_excess's message when the parts do not fit.
void check_memory_budget(size_t budget, std::span<const MemoryPart> parts, std::string_view hint);

// The refusal of one allocation of `request` bytes while `held` are held under `budget`:
// "gpu_memory 16.00 GiB: 15.20 GiB held, 1.40 GiB more asked for, 0.60 GiB over".
std::string memory_budget_refusal(size_t budget, size_t held, size_t request);

// What the engine leaves unclaimed when it sizes its KV pool from what a budget leaves: room
// for the few buffers made after the pool (per-step transfers, evaluation outputs) and for
// the alignment of the region's blocks. 1/64 of the budget, at least 64 MiB, at most 512 MiB.
size_t memory_budget_margin(size_t budget);

// The KV pool's bytes when no size is given: `fraction` of what is left (`left`, the device's
// free memory or what its budget leaves) after the step plan `plan`, less the budget margin
// when there is a budget (`budget` > 0), at most `usable` (what max_num_seqs full sequences
// can hold). 0 when nothing is left.
size_t kv_pool_bytes_from_left(size_t left, size_t plan, double fraction, size_t budget,
                               size_t usable);

}  // namespace fp8rl
