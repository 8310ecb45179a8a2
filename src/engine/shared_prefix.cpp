#include "engine/shared_prefix.h"

#include <algorithm>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/check.h"

namespace fp8rl {

namespace {

struct Grouping {
  const StepInput& in;
  std::vector<int64_t> full;  // [S] blocks of s entirely below its position
  std::vector<std::pair<std::vector<int32_t>, int64_t>> groups;  // (members, prefix blocks)

  int32_t block(int32_t s, int64_t j) const {
    return in.block_tables[size_t(s * in.blocks_per_seq + j)];
  }

  // members (>= 2, in sequence order) agree on blocks [0, depth).
  void split(std::vector<int32_t> members, int64_t depth) {
    int64_t limit = full[size_t(members[0])];
    for (int32_t s : members) limit = std::min(limit, full[size_t(s)]);
    for (; depth < limit; ++depth) {
      const int32_t b = block(members[0], depth);
      if (!std::all_of(members.begin(), members.end(),
                       [&](int32_t s) { return block(s, depth) == b; }))
        break;
    }
    if (depth < limit) {  // the members differ at block `depth`: parts by its id
      std::vector<std::vector<int32_t>> parts;
      for (int32_t s : members) {
        auto it = std::find_if(parts.begin(), parts.end(), [&](const std::vector<int32_t>& p) {
          return block(p[0], depth) == block(s, depth);
        });
        if (it == parts.end())
          parts.push_back({s});
        else
          it->push_back(s);
      }
      if (std::any_of(parts.begin(), parts.end(), [](const auto& p) { return p.size() >= 2; })) {
        for (auto& p : parts)
          if (p.size() >= 2) split(std::move(p), depth + 1);
        return;
      }
    }
    if (depth > 0) groups.emplace_back(std::move(members), depth);
  }
};

}  // namespace

void describe_shared_prefixes(StepInput& in, int64_t block_size, int64_t min_tokens) {
  const int64_t seqs = in.num_seqs(), groups_cap = seqs / 2;
  CHECK(block_size > 0 && int64_t(in.block_tables.size()) == seqs * in.blocks_per_seq,
        "shared prefixes: the block tables ({} ids for {} sequences of {}) are not packed",
        in.block_tables.size(), seqs, in.blocks_per_seq);
  Grouping g{in, std::vector<int64_t>(size_t(seqs), 0), {}};
  std::vector<std::vector<int32_t>> by_first;       // sequences with a full block, by first block
  std::unordered_map<int32_t, size_t> first_index;  // first block -> its entry in by_first
  for (int64_t s = 0; s < seqs; ++s) {
    if (in.cu_q[size_t(s + 1)] - in.cu_q[size_t(s)] != 1) continue;
    const int64_t pos = in.context_lens[size_t(s)] - 1;
    g.full[size_t(s)] = std::min(std::max<int64_t>(pos, 0) / block_size, in.blocks_per_seq);
    if (g.full[size_t(s)] == 0) continue;
    const auto [it, added] = first_index.try_emplace(g.block(int32_t(s), 0), by_first.size());
    if (added)
      by_first.push_back({int32_t(s)});
    else
      by_first[it->second].push_back(int32_t(s));
  }
  for (auto& p : by_first)
    if (p.size() >= 2) g.split(std::move(p), 0);
  std::erase_if(g.groups, [&](const auto& grp) { return grp.second * block_size < min_tokens; });
  // Groups come out depth first; the kernel wants none in particular, tests want a fixed one.
  std::sort(g.groups.begin(), g.groups.end(),
            [](const auto& a, const auto& b) { return a.first[0] < b.first[0]; });

  in.has_prefixes = true;
  in.prefix_cu_members.assign(size_t(groups_cap + 1), 0);
  in.prefix_members.assign(size_t(seqs), 0);
  in.prefix_lens.assign(size_t(groups_cap), 0);
  in.prefix_len_of_seq.assign(size_t(seqs), 0);
  CHECK(int64_t(g.groups.size()) <= groups_cap, "shared prefixes: {} groups of {} sequences",
        g.groups.size(), seqs);
  int32_t m = 0;
  for (size_t k = 0; k < g.groups.size(); ++k) {
    const auto& [members, blocks] = g.groups[k];
    const int32_t len = int32_t(blocks * block_size);
    in.prefix_lens[k] = len;
    for (int32_t s : members) {
      in.prefix_members[size_t(m++)] = s;
      in.prefix_len_of_seq[size_t(s)] = len;
    }
    in.prefix_cu_members[k + 1] = m;
  }
  for (size_t k = g.groups.size() + 1; k < in.prefix_cu_members.size(); ++k)
    in.prefix_cu_members[k] = m;
}

}  // namespace fp8rl
