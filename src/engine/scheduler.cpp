#include "engine/scheduler.h"

#include <algorithm>
#include <iterator>

#include "core/check.h"

namespace fp8rl {

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), blocks_(config.num_blocks, config.block_size, config.prefix_caching) {
  CHECK(config.max_num_batched_tokens > 0, "max_num_batched_tokens must be positive, got {}",
        config.max_num_batched_tokens);
  CHECK(config.max_num_seqs > 0, "max_num_seqs must be positive, got {}", config.max_num_seqs);
}

bool Scheduler::fits_ever(int64_t num_tokens) const {
  return blocks_.blocks_for(num_tokens) <= blocks_.num_blocks();
}

int64_t Scheduler::add_request(int64_t request, std::span<const int32_t> prompt,
                               int32_t num_samples, int64_t max_tokens) {
  CHECK(!prompt.empty(), "request {} has an empty prompt", request);
  CHECK(num_samples >= 1, "request {} asks for {} samples", request, num_samples);
  CHECK(max_tokens >= 1, "request {} has max_tokens {}", request, max_tokens);
  const int64_t total = int64_t(prompt.size()) + max_tokens;
  CHECK(fits_ever(total),
        "request {}: prompt of {} tokens + max_tokens {} needs {} KV blocks of {} tokens, the "
        "pool has {}; give the KV cache more memory or lower max_tokens",
        request, prompt.size(), max_tokens, blocks_.blocks_for(total), blocks_.block_size(),
        blocks_.num_blocks());
  Sequence seq;
  seq.id = next_id_++;
  seq.request = request;
  seq.num_samples = num_samples;
  seq.max_tokens = max_tokens;
  seq.tokens.assign(prompt.begin(), prompt.end());
  seq.prompt_len = int64_t(prompt.size());
  waiting_.push_back(seq.id);
  seqs_.emplace(seq.id, std::move(seq));
  return next_id_ - 1;
}

Sequence& Scheduler::get(int64_t seq) {
  const auto it = seqs_.find(seq);
  CHECK(it != seqs_.end(), "unknown sequence {}", seq);
  return it->second;
}

const Sequence& Scheduler::sequence(int64_t seq) const {
  const auto it = seqs_.find(seq);
  CHECK(it != seqs_.end(), "unknown sequence {}", seq);
  return it->second;
}

void Scheduler::preempt(int64_t id, StepPlan& plan) {
  Sequence& seq = get(id);
  blocks_.free_sequence(seq);
  seq.num_computed = 0;
  seq.status = SeqStatus::waiting;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  // Front of the queue: preempting from the newest backwards keeps admission order there.
  waiting_.push_front(id);
  plan.preempted.push_back(id);
  ++preemptions_;
}

void Scheduler::push_chunk(Sequence& seq, int64_t num_new, StepPlan& plan) {
  const size_t copies_before = plan.copies.size();
  blocks_.allocate_slots(seq, num_new, plan.copies);
  block_copies_ += int64_t(plan.copies.size() - copies_before);
  const bool last = seq.num_computed + num_new == seq.size();
  plan.chunks.push_back({seq.id, seq.num_computed, num_new, last ? seq.num_samples : 0});
  plan.num_tokens += num_new;
}

void Scheduler::schedule_decodes(StepPlan& plan, int64_t& budget) {
  // running_ may lose its tail while we walk it: the victims are always behind the cursor.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& seq = get(running_[i]);
    CHECK(seq.num_remaining() > 0,
          "sequence {} has no token to compute: after a step that sampled it, append_token, "
          "fork or finish it",
          seq.id);
    if (seq.num_remaining() != 1) continue;
    if (budget == 0 || int64_t(plan.chunks.size()) >= config_.max_num_seqs) break;
    // Recounted after each preemption: a victim may be a fork sample sharing seq's partial
    // block, which then needs no copy any more.
    while (blocks_.blocks_needed(seq, 1) > blocks_.num_free() && running_.back() != seq.id)
      preempt(running_.back(), plan);
    if (blocks_.blocks_needed(seq, 1) > blocks_.num_free()) {
      preempt(seq.id, plan);  // it is the newest itself
      break;
    }
    push_chunk(seq, 1, plan);
    --budget;
  }
}

void Scheduler::schedule_prefills(StepPlan& plan, int64_t& budget) {
  for (int64_t id : running_) {
    if (budget == 0 || int64_t(plan.chunks.size()) >= config_.max_num_seqs) return;
    Sequence& seq = get(id);
    if (seq.num_remaining() <= 1) continue;  // decodes had their pass
    const int64_t n =
        blocks_.max_new_tokens(seq, blocks_.num_free(), std::min(seq.num_remaining(), budget));
    if (n == 0) continue;
    push_chunk(seq, n, plan);
    budget -= n;
  }
}

void Scheduler::admit_waiting(StepPlan& plan, int64_t& budget) {
  // The running sequences' width: their rows to sample once forked (a prompt of n samples
  // becomes n sequences). Admission keeps it within max_num_seqs, so no step, before or after
  // a fork, has more rows to sample than the engine's plan holds.
  int64_t width = 0;
  for (int64_t id : running_) width += get(id).num_samples;
  while (!waiting_.empty() && budget > 0 && int64_t(plan.chunks.size()) < config_.max_num_seqs) {
    Sequence& seq = get(waiting_.front());
    if (width + seq.num_samples > config_.max_num_seqs) return;  // FIFO, as below
    // A sequence preempted by this very step waits for the next: readmitting it now would
    // take back the blocks its preemption just gave to an older sequence.
    if (std::find(plan.preempted.begin(), plan.preempted.end(), seq.id) != plan.preempted.end())
      return;
    const PrefixMatch match = blocks_.match_prefix(seq);
    const int64_t cached = match.num_tokens(blocks_.block_size());
    const int64_t n = std::min(seq.size() - cached, budget);
    // The cached blocks are full, so the chunk only needs blocks past them; cached blocks that
    // are free now stop being free once adopted.
    const int64_t need = blocks_.blocks_for(cached + n) - int64_t(match.blocks.size());
    if (need + match.num_free > blocks_.num_free()) return;  // FIFO: nobody overtakes the head
    waiting_.pop_front();
    blocks_.adopt_prefix(seq, match);
    prefix_hit_tokens_ += cached;
    seq.status = SeqStatus::running;
    running_.push_back(seq.id);
    width += seq.num_samples;
    push_chunk(seq, n, plan);
    budget -= n;
  }
}

void Scheduler::check_copies_independent(const StepPlan& plan) {
  std::vector<int32_t> src, dst;
  for (const BlockCopy& c : plan.copies) {
    src.push_back(c.src);
    dst.push_back(c.dst);
  }
  std::sort(src.begin(), src.end());
  std::sort(dst.begin(), dst.end());
  CHECK(std::adjacent_find(dst.begin(), dst.end()) == dst.end(),
        "step {}: two block copies share a destination", plan.step);
  std::vector<int32_t> both;
  std::set_intersection(src.begin(), src.end(), dst.begin(), dst.end(), std::back_inserter(both));
  CHECK(both.empty(), "step {}: block {} is a copy source and destination", plan.step,
        both.empty() ? -1 : both[0]);
}

StepPlan Scheduler::schedule() {
  CHECK(uncommitted_ < 0, "schedule() while step {} awaits commit()", uncommitted_);
  StepPlan plan;
  plan.step = next_step_++;
  for (;;) {
    int64_t budget = config_.max_num_batched_tokens;
    schedule_decodes(plan, budget);
    schedule_prefills(plan, budget);
    admit_waiting(plan, budget);
    if (!plan.empty() || running_.empty()) break;
    // Every running sequence is stuck on blocks (prefills that filled the pool between them):
    // the newest gives its blocks back. Nothing was allocated, so the pass simply reruns.
    preempt(running_.back(), plan);
  }
  // Copy sources are partial blocks shared by fork samples, which sit next to each other in
  // running_; preemption only takes sequences behind the decode cursor, so a source is never
  // freed and handed out again as a destination within one plan. Checked, as the engine's
  // batched copy relies on it.
  check_copies_independent(plan);
  uncommitted_ = plan.step;
  return plan;
}

void Scheduler::commit(const StepPlan& plan) {
  CHECK(plan.step == uncommitted_, "commit() of step {}, the step awaiting commit is {}", plan.step,
        uncommitted_);
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& seq = get(c.seq);
    CHECK(seq.status == SeqStatus::running && seq.num_computed == c.start,
          "sequence {} changed between schedule() and commit()", c.seq);
    seq.num_computed += c.num_new;
    blocks_.register_computed(seq);
  }
  uncommitted_ = -1;
}

void Scheduler::append_token(int64_t id, int32_t token) {
  Sequence& seq = get(id);
  CHECK(seq.status == SeqStatus::running && seq.num_remaining() == 0,
        "append_token to sequence {} whose last token has not been computed", id);
  CHECK(seq.num_samples == 1, "sequence {} samples {} tokens: fork() it first", id,
        seq.num_samples);
  CHECK(seq.num_generated() < seq.max_tokens,
        "sequence {} already has its max_tokens {}: finish() it", id, seq.max_tokens);
  seq.tokens.push_back(token);
}

void Scheduler::resolve_token(int64_t id, int32_t token) {
  Sequence& seq = get(id);
  CHECK(seq.status != SeqStatus::finished && seq.num_generated() > 0 &&
            seq.tokens.back() == kPendingToken,
        "resolve_token of sequence {}, whose last token is not pending", id);
  CHECK(token != kPendingToken, "resolve_token of sequence {} with the pending value", id);
  seq.tokens.back() = token;
}

std::vector<int64_t> Scheduler::fork(int64_t id, int32_t n) {
  Sequence& parent = get(id);
  CHECK(parent.status == SeqStatus::running && parent.num_remaining() == 0 &&
            parent.num_generated() == 0,
        "fork of sequence {} whose prompt is not just computed", id);
  CHECK(n == parent.num_samples, "fork of sequence {} into {}, its request has {} samples", id, n,
        parent.num_samples);
  parent.num_samples = 1;
  std::vector<int64_t> ids{id};
  std::vector<int64_t> children;
  for (int32_t k = 1; k < n; ++k) {
    Sequence child;
    child.id = next_id_++;
    child.request = parent.request;
    child.sample = k;
    child.num_samples = 1;
    child.max_tokens = parent.max_tokens;
    child.tokens = parent.tokens;
    child.prompt_len = parent.prompt_len;
    child.num_computed = parent.num_computed;
    child.status = SeqStatus::running;
    blocks_.fork(parent, child);
    ids.push_back(child.id);
    children.push_back(child.id);
    seqs_.emplace(child.id, std::move(child));
  }
  // Samples take their request's place in admission order, so preemption picks newer
  // requests before them.
  const auto pos = std::find(running_.begin(), running_.end(), id);
  running_.insert(pos + 1, children.begin(), children.end());
  return ids;
}

void Scheduler::finish(int64_t id) {
  Sequence& seq = get(id);
  CHECK(uncommitted_ < 0, "finish() of sequence {} while step {} awaits commit()", id,
        uncommitted_);
  if (seq.status == SeqStatus::running)
    running_.erase(std::find(running_.begin(), running_.end(), id));
  else if (seq.status == SeqStatus::waiting)
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  else
    RAISE("sequence {} finished twice", id);
  blocks_.free_sequence(seq);
  seq.status = SeqStatus::finished;
}

void Scheduler::forget(int64_t id) {
  CHECK(get(id).status == SeqStatus::finished, "forget() of unfinished sequence {}", id);
  seqs_.erase(id);
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.blocks_used = blocks_.num_used();
  s.blocks_free = blocks_.num_free();
  s.blocks_shared = blocks_.num_shared();
  s.blocks_cached = blocks_.num_cached();
  s.prefix_hit_tokens = prefix_hit_tokens_;
  s.preemptions = preemptions_;
  s.block_copies = block_copies_;
  s.num_running = int64_t(running_.size());
  s.num_waiting = int64_t(waiting_.size());
  return s;
}

}  // namespace fp8rl
