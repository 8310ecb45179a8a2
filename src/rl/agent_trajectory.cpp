#include "rl/agent_trajectory.h"

#include <algorithm>

#include "core/check.h"

namespace fp8rl {

AgentTrajectory::AgentTrajectory(int64_t max_prompt, int64_t max_completion)
    : max_prompt_(max_prompt), max_completion_(max_completion) {
  CHECK(max_prompt >= 1 && max_completion >= 1,
        "agent trajectory: a budget of {} prompt and {} completion tokens", max_prompt,
        max_completion);
}

bool AgentTrajectory::extends(const std::vector<int32_t>& prompt) const {
  if (sequences_.empty()) return false;
  const std::vector<int32_t>& last = sequences_.back().ids;
  return prompt.size() >= last.size() && std::equal(last.begin(), last.end(), prompt.begin());
}

int64_t AgentTrajectory::completion_tokens() const {
  int64_t n = -prompt_length_;
  for (const AgentSequence& s : sequences_) n += int64_t(s.ids.size());
  return n;
}

int64_t AgentTrajectory::room(const std::vector<int32_t>& prompt) const {
  const auto p = int64_t(prompt.size());
  if (sequences_.empty()) return max_completion_ - (p - std::min(p, max_prompt_));
  const int64_t added = extends(prompt) ? p - int64_t(sequences_.back().ids.size()) : p;
  return max_completion_ - completion_tokens() - added;
}

void AgentTrajectory::record(const std::vector<int32_t>& prompt, const std::vector<int32_t>& ids,
                             const std::vector<float>& logp) {
  CHECK(logp.size() == ids.size() && int64_t(ids.size()) <= room(prompt),
        "agent trajectory: a completion of {} tokens ({} logprobs) past its room of {} (a bug)",
        ids.size(), logp.size(), room(prompt));
  if (sequences_.empty()) prompt_length_ = std::min(int64_t(prompt.size()), max_prompt_);
  if (!extends(prompt)) sequences_.emplace_back();
  AgentSequence& s = sequences_.back();
  const size_t have = s.ids.size();
  s.ids.insert(s.ids.end(), prompt.begin() + ptrdiff_t(have), prompt.end());
  s.logp.resize(s.ids.size(), 0.0f);
  s.sampled.resize(s.ids.size(), 0);
  s.ids.insert(s.ids.end(), ids.begin(), ids.end());
  s.logp.insert(s.logp.end(), logp.begin(), logp.end());
  s.sampled.insert(s.sampled.end(), ids.size(), 1);
  ++completions_;
}

}  // namespace fp8rl
