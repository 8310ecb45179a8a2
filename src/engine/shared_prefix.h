// Shared prefixes of a decode step: the n samples of a GRPO prompt are forked from one prefill
// (engine/block_manager.h), so their block tables begin with the same physical blocks. The
// CUDA decode kernel reads such blocks once for the whole group (ops::PagedBatch's prefix_*);
// this finds the groups on the host from the step's tables alone, no device reads.
//
// A group's prefix is a run of leading blocks with the same ids in every member's table, each
// a full block lying entirely below every member's position (never written by this step, and
// no key of it past a member's query). Sequences are grouped by their first block; a group whose
// members' tables then differ at some block splits there by that block's id when at least one
// part keeps two or more members (members left alone run per sequence: the samples of two
// prompts that share a chat template's first blocks become two groups with their whole
// prompts as prefixes), and otherwise stops there (the samples' private blocks after their
// common prompt). A group stops at the shortest member's full blocks. Groups of one member are
// not groups. Sliding windows are the kernel's concern: layers with a window ignore the groups.
#pragma once

#include <cstdint>

#include "model/step.h"

namespace fp8rl {

// Fills in.prefix_* and sets in.has_prefixes for a step whose tables are packed
// (StepInput::pack_block_tables): groups in the order of their first member, members in
// sequence order, capacities S / 2 groups and S members (the unused tail: empty groups, length
// 0). Sequences with more than one new token (prefill chunks) are never grouped. Prefix lengths
// are in tokens (whole blocks of block_size); groups whose prefix is shorter than min_tokens
// are not formed (their members run per sequence: EngineOptions::shared_prefix_min_tokens).
void describe_shared_prefixes(StepInput& in, int64_t block_size, int64_t min_tokens = 0);

}  // namespace fp8rl
