#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_set>

#include "core/check.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/wall_clock.h"
#include "engine/scheduler.h"
#include "engine/shared_prefix.h"
#include "model/forward.h"
#include "ops/device.h"
#include "ops/memory.h"
#include "ops/memory_budget.h"
#include "ops/ops.h"
#include "ops/sampling.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

const char* finish_reason_name(FinishReason r) {
  return r == FinishReason::stop ? "stop" : "length";
}

namespace {

// The random stream of one sample: a function of (seed, request, sample index) only; the
// sampler adds the position. A request with its own seed ignores its index in the call, so
// the same seed gives the same completions wherever the request sits.
uint64_t sample_stream(uint64_t seed, uint64_t request, uint64_t sample) {
  return splitmix64(splitmix64(splitmix64(seed) ^ request) ^ (sample + 0x9e37u));
}

// The host-side state of one sample's completion.
struct SampleState {
  CompletionOutput out;
  std::unique_ptr<tok::IncrementalDecoder> decoder;
  int64_t seq = -1;
  bool done = false;
};

struct RequestState {
  const GenerationRequest* req = nullptr;
  int64_t index = 0;              // in the generate() call; serve(): the feed's id
  std::vector<int32_t> stop_ids;  // eos (unless ignore_eos) and stop_token_ids
  std::vector<SampleState> samples;
  GenerationRequest owned;  // serve(): the request (req points here)
  bool aborted = false;     // serve(): its sequences end without output
  bool done() const {
    return std::all_of(samples.begin(), samples.end(), [](const SampleState& s) { return s.done; });
  }
};

// The requests of a run by index (generate) or id (serve).
using RequestTable = std::unordered_map<int64_t, RequestState>;

// The sampled rows of one step and what the sampler reads besides the logits.
struct StepRows {
  std::vector<ops::SampleRow> rows;
  std::vector<int32_t> history;  // penalized ids and banned ids the rows point into
  int top_k = 0;                 // top logprobs to return per row
  bool want_processed = false;   // processed logprobs too
  bool needs_tokens = false;     // the rows read sequences' token values (repetition penalty)
};

// What happens to a sampled row's sequence when its token comes back.
enum class RowState {
  sync,     // nothing done yet: append the token or end the sequence
  pending,  // a pending token was appended when the next step was planned: resolve it
  ended,    // ended when the next step was planned (this is its max_tokens-th token)
  dropped,  // the sequence stopped at the step before: nobody reads this row
};

// A step queued on the device whose results have not been read.
struct InFlight {
  StepPlan plan;
  int64_t rows = 0;         // sampled rows that are real
  int64_t rows_padded = 0;  // rows the sampler ran (a captured step's bucket)
  int top_k = 0;
  bool want_processed = false;
  int half = 0;            // which half of the double-buffered host staging it uses
  bool committed = false;  // commit() ran
  // Per sampled row, once committed: the sequence (fork samples resolved; Impl::owner names its
  // request and sample) and what its token does.
  std::vector<int64_t> row_seq;
  std::vector<RowState> row_state;
  std::unordered_map<int64_t, int32_t> row_of_seq;  // pending sequences' rows
};

}  // namespace

struct Engine::Impl {
  Context& ctx;
  const Model& model;
  const LoraAdapter* adapter;  // null: the base model alone
  const tok::Tokenizer* tokenizer;
  std::vector<int32_t> eos;
  EngineOptions opt;
  StandbyRegion* region = nullptr;  // where the pool lies; null: the pool owns its memory
  std::unique_ptr<KvPool> pool;
  SchedulerConfig sched_config;
  std::unique_ptr<Scheduler> sched;
  EngineStats stats;
  uint64_t adapter_version = 0;
  int64_t max_rows = 0;  // sampled rows of one step at most
  // The sampler's inputs and outputs live outside the step's arena, sized once (the history
  // of repetition-penalty ids grows between steps when a longer one comes).
  DeviceBuffer rows_buf, out_buf, history_buf;
  // Page-locked host sides of the step's transfers (plain memory on the CPU): the upload, the
  // sample rows and the input-id moves are laid out there and copied without staging, the
  // results come back there. Two of each: a step is queued while the one before may still
  // read its half; the step after waits for that one's results, so halves alternate.
  DeviceBuffer step_host[2], rows_host[2], moves_host[2], returned_host[2];
  DeviceBuffer moves_buf;  // [max_rows, 2] i32: ops::copy_elements' moves of a step's ids
  // Around each step's device work: its time (EngineStats::seconds_device) and, at the end,
  // when its results are on the host.
  std::vector<ops::StreamMark> step_begin, step_end;  // [2] each, by half
  int next_half = 0;
  bool async = false;  // EngineOptions::async_scheduling on this device
  // Which request and sample each live sequence is (a wave's prompt, before its fork: its
  // first sample).
  std::unordered_map<int64_t, std::pair<int64_t, int32_t>> owner;
  // Sequences that stopped at a step whose next step was already queued with them: ended at
  // that step's commit, their rows there dropped.
  std::unordered_set<int64_t> stopped;
  // record_routing: each live sequence's experts by position, [positions, L, k], -1 unset.
  std::unordered_map<int64_t, std::vector<int32_t>> routing;
  // The step's upload (ids, positions, slots, tables) at a fixed address, so that a captured
  // step reads each new step's values.
  DeviceBuffer step_buf;
  int32_t null_block = 0;          // a pool block no sequence owns: padding sequences read it
  int64_t hold_region_blocks = 0;  // the pool's blocks when it lies in the region
  int64_t max_table_width = 1;
  // Decode steps captured as CUDA graphs, by (batch bucket, table width, top logprobs,
  // processed logprobs, shared-prefix groups or none); each replays the forward and the
  // sampler of a padded step.
  std::map<std::tuple<int64_t, int64_t, int, bool, bool>, CudaGraph> graphs;
  const void* graphs_scratch = nullptr;  // the scratch arena's base the graphs captured

  Impl(Context& c, const Model& m, const LoraAdapter* a, const tok::Tokenizer* t,
       std::vector<int32_t> e, const EngineOptions& o, StandbyRegion* r)
      : ctx(c), model(m), adapter(a), tokenizer(t), eos(std::move(e)), opt(o), region(r) {
    if (adapter != nullptr) adapter->check_fits(model);
  }

  void setup();
  // The KV pool over the standby region (taken back from whoever held it since the last
  // generate: the pool is zeroed, the prefix cache starts empty, and graphs recorded with the
  // old addresses go if the region moved).
  void hold_region();
  // The sampler's output views of n rows in out_buf.
  ops::SampleOutput sample_outputs(int64_t n, int top_k, bool processed) const;
  // The device part of a step after its upload: forward and sampling (also run as the
  // measuring dry run of the plan, and captured as a CUDA graph for decode steps).
  void device_step(Context& c, const KvPool& kv, const StepBatch& step, const TensorView& rows,
                   const TensorView& history, int top_k, const ops::SampleOutput& out);
  void run(RequestTable& states, const std::function<void(int64_t)>& progress,
           const TokenCallback& token_callback);
  // The sampled rows of a plan (one per sample to draw; a prompt that just finished gives n
  // rows reading the same logits row) and the ids they need for penalties and bans.
  void sample_rows(const StepPlan& plan, const RequestTable& states, StepRows& out);
  // Queues one step of the scheduler's plan on the device: block copies, the upload, with
  // `prev` the copy of its pending input ids from prev's samples, the forward and sampler,
  // and the copy of the results back. Returns at once on CUDA.
  InFlight launch(StepPlan plan, const StepRows& rows, const InFlight* prev);
  // Commits a launched step's plan: forks a finished prompt into its samples, ends the
  // sequences that stopped while the step was planned (their rows are dropped). `ahead`: the
  // results are not read yet; each sampled sequence gets a pending token, or ends now when
  // this token is its max_tokens-th.
  void commit(InFlight& f, bool ahead);
  // Waits for a launched (and committed) step's results and hands each kept row to on_token.
  void collect(InFlight& f, RequestTable& states, const TokenCallback& token_callback);
  void on_token(RequestState& rs, int32_t sample, int64_t seq, RowState state, int32_t token,
                float lp, float plp, const int32_t* top_ids, const float* top_lps,
                const TokenCallback& token_callback);
  // The state of a request (stop ids, a decoder per sample) and its waves of sequences queued.
  void admit(RequestTable& states, int64_t index, const GenerationRequest& req);
  // serve(): ends the sequences of aborted requests that no queued step samples, releases the
  // finished sequences no queued step reads, and drops the requests left without sequences.
  // `queued`: the committed step whose results are not read yet (null: none).
  void release(RequestTable& states, const InFlight* queued);
  // serve(): between steps, the feed's arrivals admitted and its aborts marked (after the
  // feed says stop, every request is aborted and the feed is not asked again).
  void poll_feed(RequestTable& states, const InFlight* queued);
  void validate(const GenerationRequest& req) const;  // Engine::validate
  RequestFeed* feed = nullptr;                        // serve()'s
  bool stopping = false;                              // serve(): the feed said stop
};

void Engine::Impl::setup() {
  const ModelConfig& c = model.config();
  CHECK(model.device() == ctx.device, "engine: the model is on {}, the context on {}",
        device_name(model.device()), device_name(ctx.device));
  CHECK(opt.max_num_seqs > 0 && opt.max_num_batched_tokens > 0,
        "engine: max_num_seqs ({}) and max_num_batched_tokens ({}) must be positive",
        opt.max_num_seqs, opt.max_num_batched_tokens);
  const size_t budget = ops::device_memory_budget(ctx);
  const double kv_fraction = opt.kv_memory_fraction.value_or(budget > 0 ? 1.0 : 0.9);
  CHECK(kv_fraction > 0 && kv_fraction <= 1, "engine: kv memory fraction {} outside (0, 1]",
        kv_fraction);
  // The scheduler counts sequences in int32; the buffers below hold a row per sequence.
  CHECK(opt.max_num_seqs <= INT32_MAX, "engine: max_num_seqs = {} is above {}", opt.max_num_seqs,
        INT32_MAX);
  if (ctx.device == Device::cpu)
    check_host_bytes(
        size_t(opt.max_num_seqs) * (ops::kSampleRowWords + 3 + 2 * ops::kMaxTopLogprobs + 2) * 4,
        fmt::format("engine: max_num_seqs = {} (a buffer row per sequence)", opt.max_num_seqs));
  max_rows = opt.max_num_seqs;
  rows_buf = DeviceBuffer(ctx, size_t(max_rows * ops::kSampleRowWords) * 4);
  out_buf = DeviceBuffer(ctx, size_t(max_rows) * (3 + 2 * ops::kMaxTopLogprobs) * 4);
  moves_buf = DeviceBuffer(ctx, size_t(max_rows) * 2 * 4);
  for (int h = 0; h < 2; ++h) {
    rows_host[h] = DeviceBuffer::pinned_host(ctx, rows_buf.size());
    moves_host[h] = DeviceBuffer::pinned_host(ctx, moves_buf.size());
    returned_host[h] = DeviceBuffer::pinned_host(ctx, out_buf.size());
    step_begin.emplace_back(ctx);
    step_end.emplace_back(ctx);
  }
  async = opt.async_scheduling.value_or(ctx.device == Device::cuda);
  // A recorded step's experts are read back as it returns: no step queued ahead of it.
  CHECK(!opt.record_routing || (!async && ctx.device == Device::cpu && c.has_moe()),
        "engine: record_routing needs an MoE model on the CPU, scheduled synchronously");
  // The step plan first: a dry run of the largest step (every op takes its declared scratch
  // from a measuring arena, nothing runs), then the KV pool from what is left.
  StepShape shape;
  shape.tokens = opt.max_num_batched_tokens;
  shape.seqs = std::min(opt.max_num_seqs, opt.max_num_batched_tokens);
  shape.logit_rows = shape.seqs;
  shape.max_context = c.max_context;
  const size_t block = KvPool::block_bytes(c, ctx, opt.kv_dtype);
  KvPool probe(c, 1, ctx, opt.kv_dtype);  // the plan does not depend on the pool's size
  Arena measuring = Arena::measuring(ctx.device, ctx.device == Device::cuda ? 256 : 64);
  {
    Context dry = ctx;
    dry.dry_run = true;
    dry.scratch = &measuring;
    StepInput in = step_of_shape(shape, probe.block_size());
    in.pack_block_tables();
    max_table_width = in.blocks_per_seq;
    // Room for a decode step's shared-prefix description (engine/shared_prefix.h) too.
    step_buf =
        DeviceBuffer(ctx, size_t(step_elements(in) + shared_prefix_elements(shape.seqs)) * 4);
    for (DeviceBuffer& h : step_host) h = DeviceBuffer::pinned_host(ctx, step_buf.size());
    const StepBatch step = upload_step(dry, in, step_buf.view({step_elements(in)}, DType::i32));
    const TensorView rows = rows_buf.view({shape.logit_rows, ops::kSampleRowWords}, DType::i32);
    device_step(dry, probe, step, rows, TensorView(), ops::kMaxTopLogprobs,
                sample_outputs(shape.logit_rows, ops::kMaxTopLogprobs, true));
  }
  size_t plan = measuring.high_water();
  stats.scratch_bytes = plan;
  size_t kv_bytes = opt.kv_memory_bytes;
  if (kv_bytes == 0) {
    // What max_num_seqs full-length sequences can hold at once: more is never used by a step,
    // and for a small model a fraction of a large GPU is millions of blocks whose bookkeeping
    // and zeroing every generate() pays (the 0.8M-parameter demo on an H200: 125 GiB, 0.69 s
    // a GRPO step; capped: 0.03 s).
    const int64_t per_seq = (c.max_context + kKvBlockSize - 1) / kKvBlockSize;
    const size_t usable = c.max_context > 0 ? size_t(opt.max_num_seqs * per_seq) * block
                                            : std::numeric_limits<size_t>::max();
    if (ctx.device == Device::cpu) {
      // Host memory is not reserved for us: at most 1 GiB.
      kv_bytes = std::min(size_t(1) << 30, usable);
    } else if (const std::optional<size_t> left = ops::device_memory_left(ctx); !left) {
      // A dry run's estimate without the device and without a budget, whose free memory is
      // unknown: what the pool can use at most (a device with less free memory gets less).
      kv_bytes = usable;
    } else {
      // A standby region's memory is ours to reuse: count it as free.
      const size_t free_now = *left + (region != nullptr ? region->size() : 0);
      kv_bytes = kv_pool_bytes_from_left(free_now, plan, kv_fraction, budget, usable);
      if (budget > 0) {
        CHECK(kv_bytes >= block,
              "engine: gpu_memory {} leaves {} after the weights: the step plan ({}) and a "
              "margin of {} leave no room for one KV block ({} bytes); give a larger "
              "--gpu-memory, or fewer max_num_batched_tokens",
              gib_text(budget), gib_text(free_now), gib_text(plan),
              gib_text(memory_budget_margin(budget)), block);
      } else {
        CHECK(free_now > plan, "engine: {} bytes free on the device, the step plan needs {}",
              free_now, plan);
      }
    }
  }
  if (ctx.device == Device::cpu && opt.kv_memory_bytes != 0)
    check_host_bytes(kv_bytes, "engine: the KV pool of kv_memory");
  // A pool of a given size beside the step plan must fit what the budget leaves: an error
  // naming both now, rather than the allocator's refusal of one block.
  if (const std::optional<size_t> left = ops::device_memory_left(ctx);
      opt.kv_memory_bytes != 0 && budget > 0 && left) {
    const size_t room = *left + (region != nullptr ? region->size() : 0);
    CHECK(kv_bytes + plan <= room,
          "engine: gpu_memory {}: a KV pool of {} (kv_memory) and the step plan ({}) do not fit "
          "the {} it leaves after the weights; lower kv_memory (or leave it unset: the pool then "
          "takes what is left), or give a larger gpu_memory",
          gib_text(budget), gib_text(kv_bytes), gib_text(plan), gib_text(room));
  }
  const int64_t blocks = int64_t(kv_bytes / block);
  CHECK(blocks >= 1, "engine: a KV budget of {} bytes holds no block ({} bytes each)", kv_bytes,
        block);
  // One block more than the scheduler hands out: the null block of padding sequences.
  if (region != nullptr)
    hold_region_blocks = blocks + 1;
  else
    pool = std::make_unique<KvPool>(c, blocks + 1, ctx, opt.kv_dtype);
  null_block = int32_t(blocks);
  ops::scratch_reserve(ctx, plan);
  sched_config.num_blocks = int32_t(std::min<int64_t>(blocks, INT32_MAX));
  sched_config.block_size = int32_t(kKvBlockSize);
  sched_config.max_num_batched_tokens = opt.max_num_batched_tokens;
  sched_config.max_num_seqs = int32_t(opt.max_num_seqs);
  sched_config.prefix_caching = opt.prefix_caching;
  if (region != nullptr) {
    hold_region();
  } else {
    sched = std::make_unique<Scheduler>(sched_config);
    sched->set_adapter_version(adapter_version);
  }
  stats.kv_blocks = blocks;
  stats.kv_bytes = pool->nbytes();
}

void Engine::Impl::hold_region() {
  if (region->holder() == this && pool != nullptr) return;
  const ModelConfig& c = model.config();
  const size_t bytes = size_t(hold_region_blocks) * KvPool::block_bytes(c, ctx, opt.kv_dtype);
  void* base = region->acquire(this, bytes);
  if (pool != nullptr && pool->k(0).data != base) graphs.clear();
  pool = std::make_unique<KvPool>(c, hold_region_blocks, ctx, opt.kv_dtype, base);
  // Every sequence of the last generate() has finished; the cached prefixes' KV is gone.
  sched = std::make_unique<Scheduler>(sched_config);
  sched->set_adapter_version(adapter_version);
  ++stats.region_takebacks;
}

namespace {
// Where one of sample_outputs' views starts in out_buf, in i32 words (tokens come first).
int64_t word_offset(const ops::SampleOutput& out, const TensorView& v) {
  return static_cast<const int32_t*>(v.data) - static_cast<const int32_t*>(out.tokens.data);
}
// The i32 words of out_buf that sample_outputs' views span.
int64_t words_spanned(const ops::SampleOutput& out) {
  int64_t end = 0;
  for (const TensorView* v :
       {&out.tokens, &out.logprobs, &out.processed_logprobs, &out.top_ids, &out.top_logprobs})
    if (!v->empty()) end = std::max(end, word_offset(out, *v) + v->numel());
  return end;
}
}  // namespace

ops::SampleOutput Engine::Impl::sample_outputs(int64_t n, int top_k, bool processed) const {
  ops::SampleOutput out;
  size_t off = 0;
  auto take = [&](Shape shape, DType dt) {
    const TensorView v = out_buf.view(shape, dt, off);
    off += size_t(shape.numel()) * 4;
    return v;
  };
  out.tokens = take({n}, DType::i32);  // first: word_offset and words_spanned count from it
  out.logprobs = take({n}, DType::f32);
  if (processed) out.processed_logprobs = take({n}, DType::f32);
  if (top_k > 0) {
    out.top_ids = take({n, top_k}, DType::i32);
    out.top_logprobs = take({n, top_k}, DType::f32);
  }
  return out;
}

void Engine::Impl::device_step(Context& c, const KvPool& kv, const StepBatch& step,
                               const TensorView& rows, const TensorView& history, int top_k,
                               const ops::SampleOutput& out) {
  ops::ScratchScope scope(c);
  const TensorView logits =
      ops::scratch_alloc(c, {step.num_logit_rows(), model.config().vocab_size}, DType::f32);
  forward(c, model, adapter, kv, step, logits);
  if (rows.numel() > 0) ops::sample(c, logits, rows, history, top_k, out);
}

InFlight Engine::Impl::launch(StepPlan plan, const StepRows& sr, const InFlight* prev) {
  Clock::time_point t0 = Clock::now();
  InFlight f;
  f.half = next_half;
  next_half ^= 1;
  step_begin[size_t(f.half)].record();
  // Copy on write: a shared partial block is copied before anyone writes into it.
  for (const BlockCopy& cp : plan.copies)
    for (int64_t l = 0; l < pool->num_layers(); ++l)
      for (const TensorView& t : {pool->k(l), pool->v(l), pool->k_scale(l), pool->v_scale(l)})
        if (!t.empty())
          ops::copy(ctx, t.slice_rows(cp.src, cp.src + 1), t.slice_rows(cp.dst, cp.dst + 1));
  StepInput in;
  bool decode_only = true;
  // A pending token (the step before has not returned it) goes up as id 0 and is replaced on
  // the device: moves hold (index in the step's ids, row of prev's samples).
  static const int32_t kZeroId = 0;
  std::vector<int32_t> moves;
  for (const ScheduledChunk& ch : plan.chunks) {
    const Sequence& s = sched->sequence(ch.seq);
    std::span<const int32_t> ids{s.tokens.data() + ch.start, size_t(ch.num_new)};
    if (ch.start + ch.num_new <= s.prompt_len)
      stats.prefill_tokens += ch.num_new;
    else
      stats.decode_tokens += ch.num_new;
    if (ch.num_new == 1 && ids[0] == kPendingToken) {
      CHECK(prev != nullptr && prev->row_of_seq.count(ch.seq) != 0,
            "engine: sequence {} has a pending token that no queued step samples (a bug)", ch.seq);
      moves.push_back(int32_t(in.num_tokens()));
      moves.push_back(prev->row_of_seq.at(ch.seq));
      ids = {&kZeroId, 1};
    }
    in.add_sequence(ids, ch.start, sched->block_table(ch.seq), pool->block_size(),
                    ch.needs_logits() ? StepInput::Logits::last : StepInput::Logits::none);
    decode_only = decode_only && ch.num_new == 1 && ch.num_samples == 1;
  }
  const std::vector<ops::SampleRow>& rows = sr.rows;
  const int64_t n = int64_t(rows.size());
  CHECK(n <= max_rows, "engine: {} rows to sample, the plan holds {}", n, max_rows);
  // A decode step (one token and one draw per sequence) on CUDA runs as a captured graph of
  // its bucket: padded to a power-of-two batch and table width so that its shapes repeat.
  const bool graph =
      ctx.device == Device::cuda && opt.cuda_graphs && decode_only && sr.history.empty();
  std::vector<ops::SampleRow> padded_rows;
  const std::vector<ops::SampleRow>* sample_rows = &rows;
  std::tuple<int64_t, int64_t, int, bool, bool> key;
  if (graph) {
    const int64_t cap = std::min(opt.max_num_seqs, opt.max_num_batched_tokens);
    int64_t bucket = 1, width = 1, needed = 1;
    while (bucket < in.num_seqs()) bucket *= 2;
    bucket = std::min(bucket, cap);
    for (const ScheduledChunk& ch : plan.chunks)
      needed = std::max<int64_t>(needed, int64_t(sched->block_table(ch.seq).size()));
    while (width < needed) width *= 2;
    width = std::min(width, max_table_width);
    padded_rows = rows;
    for (int64_t s = in.num_seqs(); s < bucket; ++s) {
      in.add_padding_sequence(null_block);
      ops::SampleRow pad = rows.front();
      pad.logit_row = int32_t(s);
      padded_rows.push_back(pad);
    }
    in.pad_to_width(width, pool->block_size());
    sample_rows = &padded_rows;
    key = {bucket, width, sr.top_k, sr.want_processed, false};
  }
  in.validate(model.config(), pool->num_blocks(), pool->block_size());
  in.pack_block_tables();
  // A decode step with shared-prefix groups carries their description (the CPU forward
  // ignores it); one without runs the plain decode path, which launches no prefix kernel. The
  // two kinds of step are captured apart, so a graph's kernels and upload layout repeat.
  if (decode_only && opt.shared_prefix_attention) {
    describe_shared_prefixes(in, pool->block_size(), opt.shared_prefix_min_tokens);
    const int64_t grouped = in.prefix_cu_members.back();
    stats.shared_prefix_steps += grouped > 0 ? 1 : 0;
    stats.shared_prefix_seq_steps += grouped;
    if (grouped == 0) {
      in.has_prefixes = false;
      in.prefix_cu_members.clear();
      in.prefix_members.clear();
      in.prefix_lens.clear();
      in.prefix_len_of_seq.clear();
    }
    std::get<4>(key) = grouped > 0;
  }
  const int64_t rows_n = int64_t(sample_rows->size());
  CHECK(step_elements(in) * 4 <= int64_t(step_buf.size()),
        "engine: a step of {} i32 does not fit its buffer of {} bytes", step_elements(in),
        step_buf.size());
  const int h = f.half;
  const StepBatch step = upload_step(ctx, in, step_buf.view({step_elements(in)}, DType::i32),
                                     step_host[h].view({step_elements(in)}, DType::i32));
  if (!moves.empty()) {  // prev's sampled ids, still in out_buf, into this step's ids
    const int64_t m = int64_t(moves.size()) / 2;
    const TensorView staged = moves_host[h].view({m, 2}, DType::i32);
    std::memcpy(staged.data, moves.data(), moves.size() * 4);
    const TensorView moves_dev = moves_buf.view({m, 2}, DType::i32);
    ops::copy(ctx, staged, moves_dev);
    ops::copy_elements(ctx, out_buf.view({prev->rows_padded}, DType::i32), moves_dev, step.ids);
  }
  // The sampler's inputs go to their own buffers (grown between steps, never inside one).
  const TensorView rows_dev = rows_buf.view({rows_n, ops::kSampleRowWords}, DType::i32);
  const TensorView rows_staged = rows_host[h].view({rows_n, ops::kSampleRowWords}, DType::i32);
  if (rows_n > 0) {  // a step of prefill chunks only samples nothing
    std::memcpy(rows_staged.data, sample_rows->data(), size_t(rows_staged.nbytes()));
    ops::copy(ctx, rows_staged, rows_dev);
  }
  TensorView hist_dev;
  if (!sr.history.empty()) {
    // From pageable memory: the copy has read it when it returns, and it lands in stream
    // order, after a queued step's sampler has read the ids before. Growing the buffer frees
    // the old one: only once the queued steps are done with it.
    const size_t bytes = sr.history.size() * 4;
    if (history_buf.size() < bytes) {
      ops::synchronize(ctx);
      history_buf = DeviceBuffer(ctx, std::max(bytes * 2, size_t(1) << 16));
    }
    hist_dev = history_buf.view({int64_t(sr.history.size())}, DType::i32);
    ops::copy(ctx,
              TensorView(const_cast<int32_t*>(sr.history.data()), DType::i32,
                         {int64_t(sr.history.size())}),
              hist_dev);
  }
  const ops::SampleOutput out = sample_outputs(rows_n, sr.top_k, sr.want_processed);
  stats.seconds_host += seconds_since(t0);
  t0 = Clock::now();
  if (graph) {
    auto it = graphs.find(key);
    if (it != graphs.end()) {
      it->second.replay();
    } else {
      // The first step of a bucket runs eagerly (GEMM plans are made on the host here), then
      // the same step is recorded for the next ones.
      device_step(ctx, *pool, step, rows_dev, hist_dev, sr.top_k, out);
      CudaDevice::begin_capture(ctx);
      device_step(ctx, *pool, step, rows_dev, hist_dev, sr.top_k, out);
      graphs.emplace(key, CudaDevice::end_capture(ctx));
      ++stats.graphs_captured;
    }
    ++stats.graph_steps;
  } else if (opt.record_routing) {
    // [L, T, k] of this step, then each token's rows into its sequence's record.
    const ModelConfig& c = model.config();
    const int64_t t = in.num_tokens(), k = c.moe.top_k, layers = c.num_layers;
    std::vector<int32_t> rec(size_t(layers * t * k), -1);
    StepBatch recording = step;
    recording.routing_record = TensorView(rec.data(), DType::i32, {layers, t, k});
    device_step(ctx, *pool, recording, rows_dev, hist_dev, sr.top_k, out);
    int64_t row = 0;
    for (const ScheduledChunk& ch : plan.chunks) {
      std::vector<int32_t>& r = routing[ch.seq];
      r.resize(std::max(r.size(), size_t((ch.start + ch.num_new) * layers * k)), -1);
      for (int64_t j = 0; j < ch.num_new; ++j, ++row)
        for (int64_t l = 0; l < layers; ++l)
          std::copy_n(rec.data() + (l * t + row) * k, k,
                      r.data() + ((ch.start + j) * layers + l) * k);
    }
  } else {
    device_step(ctx, *pool, step, rows_dev, hist_dev, sr.top_k, out);
  }
  // The CPU's ops are done on return: the forward's time is the device's.
  if (ctx.device == Device::cpu) stats.seconds_device += seconds_since(t0);
  // Only the sampled ids and the requested logprobs come back: the outputs lie one after the
  // other in out_buf (sample_outputs), one transfer brings them all.
  const int64_t words = words_spanned(out);
  if (words > 0)
    ops::copy_to_host_async(ctx, out_buf.view({words}, DType::i32),
                            returned_host[h].view({words}, DType::i32));
  step_end[size_t(h)].record();
  stats.seconds_forward += seconds_since(t0);
  f.plan = std::move(plan);
  f.rows = n;
  f.rows_padded = rows_n;
  f.top_k = sr.top_k;
  f.want_processed = sr.want_processed;
  return f;
}

void Engine::Impl::sample_rows(const StepPlan& plan, const RequestTable& states, StepRows& out) {
  Clock::time_point t0 = Clock::now();
  out.rows.clear();
  out.history.clear();
  out.top_k = 0;
  out.want_processed = false;
  out.needs_tokens = false;
  int32_t logit_row = 0;
  for (const ScheduledChunk& ch : plan.chunks) {
    if (!ch.needs_logits()) continue;
    const Sequence& s = sched->sequence(ch.seq);
    const auto [req_index, sample0] = owner.at(ch.seq);
    const RequestState& rs = states.at(req_index);
    const SamplingParams& p = rs.req->params;
    out.top_k = std::max(out.top_k, p.logprobs);
    out.want_processed = out.want_processed || p.processed_logprobs;
    const uint64_t seed = p.seed.value_or(opt.seed);
    const uint64_t req_key = p.seed ? 0 : uint64_t(req_index);
    int32_t hist_begin = 0, hist_end = 0, ban_begin = 0, ban_end = 0;
    if (p.repetition_penalty != 1.0) {
      out.needs_tokens = true;
      hist_begin = int32_t(out.history.size());
      out.history.insert(out.history.end(), s.tokens.begin(), s.tokens.end());
      hist_end = int32_t(out.history.size());
    }
    if (s.num_generated() < p.min_tokens && !rs.stop_ids.empty()) {
      ban_begin = int32_t(out.history.size());
      out.history.insert(out.history.end(), rs.stop_ids.begin(), rs.stop_ids.end());
      ban_end = int32_t(out.history.size());
    }
    for (int32_t k = 0; k < ch.num_samples; ++k) {
      ops::SampleRow row;
      row.logit_row = logit_row;
      row.temperature = float(p.temperature);
      row.top_p = float(p.top_p);
      row.min_p = float(p.min_p);
      row.repetition_penalty = float(p.repetition_penalty);
      row.top_k = p.top_k < 0 ? 0 : p.top_k;
      // A wave's prompt chunk samples for its samples first .. first + k (sample0: the first).
      const int32_t sample = ch.num_samples > 1 ? sample0 + k : sample0;
      row.stream = sample_stream(seed, req_key, uint64_t(sample));
      row.position = s.size();  // the position of the token drawn now
      row.history_begin = hist_begin;
      row.history_end = hist_end;
      row.banned_begin = ban_begin;
      row.banned_end = ban_end;
      out.rows.push_back(row);
    }
    ++logit_row;
  }
  stats.seconds_host += seconds_since(t0);
}

void Engine::Impl::commit(InFlight& f, bool ahead) {
  Clock::time_point t0 = Clock::now();
  sched->commit(f.plan);
  f.committed = true;
  ++stats.steps;
  for (const ScheduledChunk& ch : f.plan.chunks) {
    if (!ch.needs_logits()) continue;
    std::vector<int64_t> ids{ch.seq};
    if (ch.num_samples > 1) {
      const auto [req_index, first] = owner.at(ch.seq);
      ids = sched->fork(ch.seq, ch.num_samples);
      for (int32_t k = 0; k < ch.num_samples; ++k) owner[ids[size_t(k)]] = {req_index, first + k};
      if (opt.record_routing)
        for (int64_t id : ids)
          if (id != ch.seq) routing[id] = routing[ch.seq];
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      const int64_t seq = ids[k];
      RowState state = RowState::sync;
      if (stopped.count(seq) != 0) {
        state = RowState::dropped;
        ++stats.rows_dropped;
      } else if (ahead) {
        const Sequence& s = sched->sequence(seq);
        if (s.num_generated() + 1 >= s.max_tokens) {
          state = RowState::ended;  // this row's token is its last whatever it is
          sched->finish(seq);
        } else {
          state = RowState::pending;
          f.row_of_seq[seq] = int32_t(f.row_seq.size());
          sched->append_token(seq, kPendingToken);
        }
      }
      f.row_seq.push_back(seq);
      f.row_state.push_back(state);
    }
  }
  CHECK(int64_t(f.row_seq.size()) == f.rows, "engine: {} rows sampled, {} committed (a bug)",
        f.rows, f.row_seq.size());
  // Those that stopped while this step was queued end now (one preempted by this step's plan
  // waits, and ends all the same).
  for (int64_t seq : stopped) sched->finish(seq);
  stopped.clear();
  stats.seconds_host += seconds_since(t0);
}

void Engine::Impl::collect(InFlight& f, RequestTable& states, const TokenCallback& token_callback) {
  Clock::time_point t0 = Clock::now();
  const int h = f.half;
  step_end[size_t(h)].wait();
  stats.seconds_forward += seconds_since(t0);
  if (ctx.device == Device::cuda)
    stats.seconds_device += step_end[size_t(h)].seconds_since(step_begin[size_t(h)]);
  t0 = Clock::now();
  if (!f.committed) commit(f, false);
  // The results where sample_outputs laid them out in out_buf, at the same offsets here.
  const ops::SampleOutput out = sample_outputs(f.rows_padded, f.top_k, f.want_processed);
  const int32_t* back = static_cast<const int32_t*>(returned_host[h].data());
  auto at = [&](const TensorView& v) { return v.empty() ? nullptr : back + word_offset(out, v); };
  const int32_t* tokens = at(out.tokens);
  const float* logprobs = reinterpret_cast<const float*>(at(out.logprobs));
  const float* processed = reinterpret_cast<const float*>(at(out.processed_logprobs));
  const int32_t* top_ids = at(out.top_ids);
  const float* top_lps = reinterpret_cast<const float*>(at(out.top_logprobs));
  for (int64_t i = 0; i < f.rows; ++i) {
    if (f.row_state[size_t(i)] == RowState::dropped) continue;
    const auto [req_index, sample] = owner.at(f.row_seq[size_t(i)]);
    on_token(states.at(req_index), sample, f.row_seq[size_t(i)], f.row_state[size_t(i)], tokens[i],
             logprobs[i], f.want_processed ? processed[i] : 0.0f,
             f.top_k > 0 ? top_ids + i * f.top_k : nullptr,
             f.top_k > 0 ? top_lps + i * f.top_k : nullptr, token_callback);
  }
  const SchedulerStats ss = sched->stats();
  stats.kv_blocks_peak_used = std::max<int64_t>(stats.kv_blocks_peak_used, ss.blocks_used);
  stats.kv_blocks_peak_shared = std::max<int64_t>(stats.kv_blocks_peak_shared, ss.blocks_shared);
  stats.preemptions = ss.preemptions;
  stats.prefix_hit_tokens = ss.prefix_hit_tokens;
  stats.seconds_host += seconds_since(t0);
}

void Engine::Impl::on_token(RequestState& rs, int32_t sample, int64_t seq, RowState state,
                            int32_t token, float lp, float plp, const int32_t* top_ids,
                            const float* top_lps, const TokenCallback& token_callback) {
  const SamplingParams& p = rs.req->params;
  SampleState& st = rs.samples[size_t(sample)];
  st.seq = seq;
  if (rs.aborted) {  // nobody reads the token: the sequence ends as a stopped one does
    if (state == RowState::sync) sched->finish(seq);
    if (state == RowState::pending) {
      sched->resolve_token(seq, token);
      stopped.insert(seq);
    }
    return;
  }
  CompletionOutput& o = st.out;
  o.ids.push_back(token);
  o.logprobs.push_back(lp);
  if (p.processed_logprobs) o.processed_logprobs.push_back(plp);
  if (p.logprobs > 0) {
    std::vector<std::pair<int32_t, float>> top;
    for (int i = 0; i < p.logprobs; ++i) top.emplace_back(top_ids[i], top_lps[i]);
    o.top_logprobs.push_back(std::move(top));
  }
  ++stats.output_tokens;
  if (token_callback) token_callback(size_t(rs.index), sample, token);
  const int64_t generated = int64_t(o.ids.size());
  bool stop = generated >= p.min_tokens &&
              std::find(rs.stop_ids.begin(), rs.stop_ids.end(), token) != rs.stop_ids.end();
  if (st.decoder) {
    o.text += st.decoder->push(token);
    if (stop) o.text += st.decoder->finish();
    // A stop string ends the completion; its text is cut before the stop string (vLLM).
    if (!stop && generated >= p.min_tokens && !p.stop.empty()) {
      size_t cut = std::string::npos;
      for (const std::string& s : p.stop) cut = std::min(cut, o.text.find(s));
      if (cut != std::string::npos) {
        o.text.resize(cut);
        stop = true;
      }
    }
  }
  if (state == RowState::pending) sched->resolve_token(seq, token);
  if (stop || generated >= p.max_tokens) {
    CHECK(state != RowState::pending || stop,
          "engine: sequence {} reached max_tokens with a pending token (a bug)", seq);
    o.finish = stop ? FinishReason::stop : FinishReason::length;
    if (opt.record_routing) {
      const Sequence& s = sched->sequence(seq);
      const ModelConfig& c = model.config();
      o.routing = std::move(routing[seq]);
      routing.erase(seq);
      o.routing.resize(size_t((s.prompt_len + generated) * c.num_layers * c.moe.top_k), -1);
    }
    if (!stop && st.decoder) o.text += st.decoder->finish();
    st.done = true;
    if (state == RowState::sync) sched->finish(seq);
    // Queued again already: ends at that step's commit, its row there dropped.
    if (state == RowState::pending) stopped.insert(seq);
    if (feed != nullptr) feed->on_token(rs.index, sample, o, true);
    return;
  }
  CHECK(state != RowState::ended, "engine: sequence {} ended early but did not stop (a bug)", seq);
  if (state == RowState::sync) sched->append_token(seq, token);
  if (feed != nullptr) feed->on_token(rs.index, sample, o, false);
}

void Engine::Impl::admit(RequestTable& states, int64_t index, const GenerationRequest& req) {
  const SamplingParams& p = req.params;
  RequestState& rs = states[index];
  rs.req = &req;
  rs.index = index;
  if (!p.ignore_eos) rs.stop_ids = eos;
  rs.stop_ids.insert(rs.stop_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
  rs.samples.resize(size_t(p.n));
  for (SampleState& st : rs.samples)
    if (tokenizer) st.decoder = std::make_unique<tok::IncrementalDecoder>(*tokenizer, true);
  // A request of more samples than a step holds runs in waves of at most max_num_seqs, as
  // vLLM's does: each wave is a sequence of its own (its prompt found in the prefix cache after
  // the first) whose samples keep their indices, so a sample's random stream is the same
  // whatever the waves.
  const int32_t wave = int32_t(std::min<int64_t>(opt.max_num_seqs, INT32_MAX));
  for (int32_t first = 0; first < p.n; first += wave) {
    const int32_t count = std::min(wave, p.n - first);
    const int64_t seq = sched->add_request(index, req.prompt_ids, count, p.max_tokens);
    owner[seq] = {index, first};
  }
}

void Engine::Impl::release(RequestTable& states, const InFlight* queued) {
  std::unordered_set<int64_t> read_later;  // the queued step's rows still name their sequences
  if (queued != nullptr) read_later.insert(queued->row_seq.begin(), queued->row_seq.end());
  std::unordered_set<int64_t> holding;  // requests with sequences left
  for (auto it = owner.begin(); it != owner.end();) {
    const auto [seq, who] = *it;
    const bool pending = queued != nullptr && queued->row_of_seq.count(seq) != 0;
    // A pending or stopped sequence ends when its token comes back or at the next commit.
    if (sched->sequence(seq).status != SeqStatus::finished && !pending && stopped.count(seq) == 0 &&
        states.at(who.first).aborted)
      sched->finish(seq);
    if (sched->sequence(seq).status == SeqStatus::finished && read_later.count(seq) == 0) {
      sched->forget(seq);
      it = owner.erase(it);
    } else {
      holding.insert(who.first);
      ++it;
    }
  }
  for (auto it = states.begin(); it != states.end();) {
    const bool over = it->second.aborted || it->second.done();
    it = over && holding.count(it->first) == 0 ? states.erase(it) : std::next(it);
  }
}

void Engine::Impl::poll_feed(RequestTable& states, const InFlight* queued) {
  release(states, queued);
  if (stopping) return;
  std::vector<RequestFeed::Arrival> arrived;
  std::vector<int64_t> aborted;
  const bool idle = queued == nullptr && !sched->has_work();
  stopping = !feed->poll(idle, int64_t(owner.size()), arrived, aborted);
  for (int64_t id : aborted)
    if (auto it = states.find(id); it != states.end()) it->second.aborted = true;
  for (auto& [id, req] : arrived) {
    try {
      CHECK(!stopping, "the server is shutting down");
      CHECK(states.count(id) == 0, "request id {} is in use (a bug)", id);
      validate(req);
    } catch (const Error& e) {
      feed->on_rejected(id, e.what());
      continue;
    }
    RequestState& rs = states[id];
    rs.owned = std::move(req);
    admit(states, id, rs.owned);
  }
  if (stopping)
    for (auto& [id, rs] : states) rs.aborted = true;
  release(states, queued);
}

void Engine::Impl::run(RequestTable& states, const std::function<void(int64_t)>& progress,
                       const TokenCallback& token_callback) {
  StepRows rows;
  std::optional<InFlight> cur;  // queued, results not read
  auto next_plan = [&] {
    StepPlan plan = sched->schedule();
    CHECK(!plan.empty(), "engine: the scheduler made no progress with work left (a bug)");
    return plan;
  };
  try {
    for (;;) {
      if (!cur) {
        // serve(): between steps with nothing queued; it ends once stopped and drained.
        if (feed != nullptr) poll_feed(states, nullptr);
        if (!sched->has_work()) {
          if (feed != nullptr && !(stopping && owner.empty())) continue;
          break;
        }
        StepPlan plan = next_plan();
        sample_rows(plan, states, rows);
        cur = launch(std::move(plan), rows, nullptr);
        continue;
      }
      if (!async) {
        collect(*cur, states, token_callback);
        cur.reset();
      } else {
        // Plan the next step before this one's tokens are known (each sampled sequence has a
        // pending token) and queue it behind this one, then read this one's results.
        commit(*cur, true);
        // serve(): the committed step's sampled sequences hold pending tokens; the others may
        // end now and new requests join the next plan.
        if (feed != nullptr) poll_feed(states, &*cur);
        if (!sched->has_work()) {
          collect(*cur, states, token_callback);
          cur.reset();
        } else {
          StepPlan plan = next_plan();
          ++stats.steps_planned_ahead;
          sample_rows(plan, states, rows);
          std::optional<InFlight> next;
          if (!rows.needs_tokens) next = launch(std::move(plan), rows, &*cur);
          collect(*cur, states, token_callback);
          if (!next) {  // the rows read token values: queued once those are resolved
            sample_rows(plan, states, rows);
            next = launch(std::move(plan), rows, nullptr);
          }
          cur = std::move(next);
        }
      }
      if (progress) progress(stats.output_tokens);
    }
  } catch (...) {
    // Queued steps still write into the engine's buffers: let them finish first.
    try {
      ops::synchronize(ctx);
    } catch (...) {
    }
    throw;
  }
  CHECK(stopped.empty(), "engine: {} stopped sequences were never ended (a bug)", stopped.size());
  for (auto& [seq, who] : owner) sched->forget(seq);
  owner.clear();
}

Engine::Engine(Context& ctx, const Model& model, const LoraAdapter* adapter,
               const tok::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
               const EngineOptions& options, StandbyRegion* region)
    : impl_(std::make_unique<Impl>(ctx, model, adapter, tokenizer, std::move(eos_ids), options,
                                   region)) {
  CHECK(!model.config().sequence_classification,
        "'{}' is a sequence classifier ({}): it scores text and cannot generate; use it as a "
        "reward (type: reward_model)",
        model.dir(), model.config().architecture);
  impl_->setup();
}

Engine::~Engine() = default;

void validate_request(const GenerationRequest& req, const ModelConfig& c) {
  const SamplingParams& p = req.params;
  p.validate();
  CHECK(!req.prompt_ids.empty(), "empty prompt");
  for (int32_t id : req.prompt_ids)
    CHECK(id >= 0 && id < c.vocab_size, "prompt id {} is outside the vocabulary [0, {})", id,
          c.vocab_size);
  check_context(
      c, int64_t(req.prompt_ids.size()) + p.max_tokens,
      fmt::format("a prompt of {} tokens plus max_tokens {}", req.prompt_ids.size(), p.max_tokens));
}

void Engine::validate(const GenerationRequest& req) const {
  impl_->validate(req);
}

void Engine::Impl::validate(const GenerationRequest& req) const {
  const Impl& im = *this;
  const SamplingParams& p = req.params;
  validate_request(req, im.model.config());
  // Each sample's state and output are host memory: an absurd n is named, not "out of
  // memory".
  check_host_bytes(size_t(p.n) * (sizeof(SampleState) + sizeof(CompletionOutput)),
                   fmt::format("n = {} samples", p.n));
  const int64_t total = int64_t(req.prompt_ids.size()) + p.max_tokens;
  CHECK(im.sched->fits_ever(total),
        "a prompt of {} tokens plus max_tokens {} can never fit the KV pool of {} blocks of {} "
        "tokens; give the engine more KV memory (--kv-memory) or lower max_tokens",
        req.prompt_ids.size(), p.max_tokens, im.stats.kv_blocks, im.pool->block_size());
  CHECK(p.stop.empty() || im.tokenizer != nullptr, "stop strings need the model's tokenizer");
}

std::vector<RequestOutput> Engine::generate(std::span<const GenerationRequest> requests,
                                            const std::function<void(int64_t)>& progress,
                                            const TokenCallback& on_token) {
  Impl& im = *impl_;
  for (size_t i = 0; i < requests.size(); ++i) {
    try {
      validate(requests[i]);
    } catch (const Error& e) {
      RAISE("request {}: {}", i, e.what());
    }
  }
  if (im.region != nullptr) im.hold_region();
  // Another user of the context (the trainer's pass) may have grown the scratch arena since
  // the last call: graphs recorded over the old one would write into freed memory.
  if (ops::scratch_base(im.ctx) != im.graphs_scratch) {
    im.graphs.clear();
    im.graphs_scratch = ops::scratch_base(im.ctx);
  }
  im.owner.clear();
  im.stopped.clear();
  im.routing.clear();
  RequestTable states;
  for (size_t i = 0; i < requests.size(); ++i) im.admit(states, int64_t(i), requests[i]);
  im.run(states, progress, on_token);
  std::vector<RequestOutput> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    for (SampleState& st : states.at(int64_t(i)).samples)
      out[i].completions.push_back(std::move(st.out));
  return out;
}

void Engine::serve(RequestFeed& feed) {
  Impl& im = *impl_;
  // A GRPO run's agent episodes are served from the standby region, as its rollouts generate.
  if (im.region != nullptr) im.hold_region();
  if (ops::scratch_base(im.ctx) != im.graphs_scratch) {
    im.graphs.clear();
    im.graphs_scratch = ops::scratch_base(im.ctx);
  }
  im.owner.clear();
  im.stopped.clear();
  im.routing.clear();
  im.feed = &feed;
  im.stopping = false;
  RequestTable states;
  try {
    im.run(states, {}, {});
  } catch (...) {
    im.feed = nullptr;
    throw;
  }
  im.feed = nullptr;
}

void Engine::set_adapter_version(uint64_t version) {
  impl_->adapter_version = version;
  impl_->sched->set_adapter_version(version);
}

const EngineStats& Engine::stats() const {
  return impl_->stats;
}
const EngineOptions& Engine::options() const {
  return impl_->opt;
}

}  // namespace fp8rl
