// The generation engine: the rollout half of RL (the role vLLM plays for Unsloth), over the
// project's one forward (model/forward.h) and the same in-memory model and adapter tensors the
// trainer uses.
//
// Per step: the scheduler (engine/scheduler.h) picks which sequences run how many tokens
// (continuous batching, chunked prefill under a token budget, preemption by recompute), the
// block manager (engine/block_manager.h) gives them KV blocks (prefix cache keyed by the
// adapter version, copy on write for the n samples of a prompt), one forward runs the step,
// and the sampler op (ops/sampling.h) draws the next token of every sequence that needs one
// on the device; only sampled ids and requested logprobs come back to the host.
//
// Outputs do not depend on scheduling: a sequence's random stream is keyed by (seed, request,
// sample index, position), and on the CPU the forward is batch-invariant, so tokens and
// logprobs are bit-identical whether it ran alone, in a batch, preempted or sharing a prefix.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "model/adapter.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "ops/context.h"
#include "ops/standby_region.h"

namespace fp8rl {

namespace tok {
class Tokenizer;
}

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
};

enum class FinishReason { stop, length };
const char* finish_reason_name(FinishReason r);

struct CompletionOutput {
  std::vector<int32_t> ids;               // generated ids (a stop token id included, as vLLM)
  std::string text;                       // decoded (stop string cut off); empty without tokenizer
  std::vector<float> logprobs;            // raw logprob of each id (vLLM's default)
  std::vector<float> processed_logprobs;  // under the temperature-scaled full vocabulary
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // params.logprobs each
  FinishReason finish = FinishReason::length;
  // EngineOptions::record_routing: the experts each MoE layer used at every position of the
  // prompt and the completion, [P + N, L, k] i32 (dense layers' rows unused); -1 at the
  // positions the engine did not run (prefix-cache hits, the last token).
  std::vector<int32_t> routing;
};

struct RequestOutput {
  std::vector<CompletionOutput> completions;  // params.n, by sample index
};

struct EngineOptions {
  // KV pool bytes; 0: a fraction (kv_memory_fraction, as vLLM's gpu_memory_utilization) of
  // the device memory left after the weights and the step plan (CUDA: the driver's free
  // memory, at most what the device's memory budget leaves, less a margin then,
  // ops/memory_budget.h), 1 GiB on the CPU; either way at most what max_num_seqs sequences of
  // the model's full context can hold.
  size_t kv_memory_bytes = 0;
  // In (0, 1]; unset: 0.9 of the free memory, or all of what a memory budget leaves (the
  // budget is what the run may hold).
  std::optional<double> kv_memory_fraction;
  // The KV cache's dtype: the activation dtype, or e4m3 with a scale per token and kv head
  // (model/kv_cache.h), half the bytes per token on CUDA at some logprob deviation
  // (docs/PERFORMANCE.md "KV cache dtype").
  KvDType kv_dtype = KvDType::activation;
  int64_t max_num_seqs = 256;             // sequences per step
  int64_t max_num_batched_tokens = 2048;  // tokens per step (chunked prefill budget)
  bool prefix_caching = true;
  uint64_t seed = 0;  // the streams of requests that set no seed of their own
  // CUDA: decode steps run as CUDA graphs captured per (batch bucket, block-table width).
  bool cuda_graphs = true;
  // CUDA decode steps: the samples of a prompt read their shared prompt blocks' K/V once per
  // step instead of once each (ops::PagedBatch's shared prefixes; layers with a sliding
  // window run per sequence). Off: every sequence reads its whole cache itself.
  bool shared_prefix_attention = true;
  // Only prefixes of at least this many tokens are read once per group: below it the
  // per-sequence kernel, whose repeated reads of the prompt hit the L2 cache, is as fast or
  // faster (H200, Qwen3-8B heads, 256 sequences, decode attention a layer: at 128-token
  // prompts the group path 3-11% slower with 32 to 512 keys of their own; at 256-token
  // prompts 9% faster with 256 own, and bench generate 7.5% faster; docs/PERFORMANCE.md,
  // "Developer controls").
  int64_t shared_prefix_min_tokens = 256;
  // Asynchronous scheduling (vLLM's name): step k+1 is planned and queued on the device while
  // step k runs, its input ids copied on the device from step k's samples, so the device does
  // not wait for the host between steps. A sequence that stops at step k still computes one
  // row in step k+1, which is dropped; a step whose rows need the previous tokens' values
  // (repetition penalty) is queued after they are read. Outputs are those of the synchronous
  // engine. Unset: on for CUDA, off for the CPU (whose ops finish before they return, so
  // there is nothing to overlap; tests turn it on there to check the outputs are the same).
  std::optional<bool> async_scheduling;
  // MoE models: record each completion's routing (CompletionOutput::routing) for the trainer
  // to replay (GRPO's routing_replay). Synchronous scheduling only.
  bool record_routing = false;
};

struct EngineStats {
  int64_t steps = 0, prefill_tokens = 0, decode_tokens = 0, output_tokens = 0;
  int64_t preemptions = 0, prefix_hit_tokens = 0;
  int64_t kv_blocks = 0, kv_blocks_peak_used = 0, kv_blocks_peak_shared = 0;
  double seconds_forward = 0, seconds_sampling = 0, seconds_host = 0;
  size_t scratch_bytes = 0, kv_bytes = 0;
  int64_t graph_steps = 0, graphs_captured = 0;
  int64_t region_takebacks = 0;  // times the KV pool was laid out in the standby region
  // Decode steps with at least one shared-prefix group, and the grouped sequences summed over
  // them (EngineOptions::shared_prefix_attention).
  int64_t shared_prefix_steps = 0, shared_prefix_seq_steps = 0;
  // Device time of the steps (CUDA events from a step's first transfer to its results' copy
  // back; on the CPU the forward's time): the wall time minus this is the device's idle time.
  double seconds_device = 0;
  // Steps planned and queued before the previous step's samples were read (async
  // scheduling), and the rows they computed for sequences that had stopped meanwhile.
  int64_t steps_planned_ahead = 0, rows_dropped = 0;
};

// Requests that come and go while the engine runs (a server): Engine::serve polls the feed
// between steps. Every call is on the thread that runs serve().
class RequestFeed {
 public:
  virtual ~RequestFeed() = default;
  using Arrival = std::pair<int64_t, GenerationRequest>;
  // Before each step: moves the requests that arrived into `arrived` (each id unique over the
  // engine's life) and the ids of requests to abort into `aborted` (finished or unknown ids are
  // ignored). idle: no sequence is running, so the call may wait for work. live_sequences: the
  // sequences the engine holds (running, waiting, or ended and not yet released). false: stop;
  // every live request is aborted and serve() returns once their sequences are released.
  virtual bool poll(bool idle, int64_t live_sequences, std::vector<Arrival>& arrived,
                    std::vector<int64_t>& aborted) = 0;
  // After each sampled token of a live request: its sample's output so far (text decoded, a
  // stop string cut off); done: that was the sample's last token (out.finish is set).
  virtual void on_token(int64_t id, int sample, const CompletionOutput& out, bool done) = 0;
  // A request that validate() refuses is never admitted; this says why.
  virtual void on_rejected(int64_t id, const std::string& message) = 0;
};

class Engine {
 public:
  // The model and the adapter the forward runs with (null: the base model alone; it must fit
  // the model, LoraAdapter::check_fits, and outlive the engine) must be on ctx's device;
  // tokenizer may be null (no text, no stop strings); eos_ids: generation_config's stop ids.
  // region: a standby region (ops/standby_region.h) the KV pool lies in, shared with the
  // trainer, which holds it between generate() calls; each generate() takes it back (an empty
  // prefix cache, the pool zeroed). Null: the pool has memory of its own and the prefix cache
  // persists.
  Engine(Context& ctx, const Model& model, const LoraAdapter* adapter,
         const tok::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
         const EngineOptions& options, StandbyRegion* region = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Called on the host for every sampled token as soon as its step's ids are back, in step
  // order (within a step, in the step's row order): the request's index in the call, the
  // sample index, the token id (a stop id included, as in CompletionOutput::ids). Streaming
  // front ends (fp8rl chat) decode it themselves; the callback must not call the engine.
  using TokenCallback = std::function<void(size_t request, int sample, int32_t token)>;

  // Generates every request to completion; outputs in request order. progress(tokens) is
  // called after each step with the output tokens so far; on_token after each sampled token.
  std::vector<RequestOutput> generate(std::span<const GenerationRequest> requests,
                                      const std::function<void(int64_t)>& progress = {},
                                      const TokenCallback& on_token = {});

  // Continuous generation: runs the requests the feed hands in, alongside each other and
  // alongside those that arrive later, until feed.poll returns false and every live request's
  // sequences are released. An aborted request's sequences end at the next step and their KV
  // blocks are freed. Random streams: a request without a seed is keyed by its id. With a
  // standby region it takes the region back first, as generate() does.
  void serve(RequestFeed& feed);

  // Raises fp8rl::Error naming what is wrong if `request` can never run here: invalid
  // sampling values, an empty prompt or ids outside the vocabulary, prompt + max_tokens past
  // the model's context or larger than the whole KV pool, stop strings without a tokenizer.
  // generate() checks every request so before it starts; front ends call it to name the
  // input line.
  void validate(const GenerationRequest& request) const;

  // KV computed under another adapter version is never reused from the prefix cache: the
  // trainer bumps the version after every optimizer step (LoraAdapter::version()).
  void set_adapter_version(uint64_t version);

  const EngineStats& stats() const;
  const EngineOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The checks of Engine::validate that need the model's config.json only (sampling values, the
// prompt's ids against the vocabulary, prompt + max_tokens against the context: check_context,
// max_context), so that a front end can check its requests before the weights load.
void validate_request(const GenerationRequest& request, const ModelConfig& config);

}  // namespace fp8rl
