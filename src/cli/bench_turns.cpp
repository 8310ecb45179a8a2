#include "cli/bench_turns.h"

#include <chrono>
#include <string>
#include <vector>

#include "cli/bench_model.h"
#include "core/check.h"
#include "core/rng.h"
#include "core/wall_clock.h"
#include "engine/engine.h"
#include "model/kv_cache.h"

namespace fp8rl::cli {

namespace {

struct Rollout {
  double seconds = 0;
  int64_t model_tokens = 0, env_tokens = 0, prefill_tokens = 0, prefix_hit_tokens = 0;
  int64_t engine_calls = 0;
};

SamplingParams sampling(int64_t tokens, uint64_t seed) {
  SamplingParams s;
  s.temperature = 1.0;
  s.max_tokens = int(tokens);
  s.ignore_eos = true;          // every turn exactly its tokens
  s.processed_logprobs = true;  // as GRPO's rollouts
  s.seed = seed;
  return s;
}

// Adds `after`'s counts since `before` (the prefix cache's count restarts with a region
// take-back, which the bench's own pool never has).
void add_stats(Rollout& r, const EngineStats& before, const EngineStats& after) {
  r.prefill_tokens += after.prefill_tokens - before.prefill_tokens;
  r.prefix_hit_tokens += after.prefix_hit_tokens - before.prefix_hit_tokens;
  ++r.engine_calls;
}

Rollout multi_turn(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                   const TurnsBenchOptions& o, const std::vector<int32_t>& env, uint64_t seed) {
  Rollout r;
  const int64_t per_turn = o.completion_tokens / o.turns;
  std::vector<std::vector<int32_t>> seqs;
  for (const std::vector<int32_t>& p : prompts)
    for (int64_t g = 0; g < o.generations; ++g) seqs.push_back(p);
  const auto t0 = Clock::now();
  for (int64_t t = 0; t < o.turns; ++t) {
    std::vector<GenerationRequest> requests;
    for (size_t e = 0; e < seqs.size(); ++e)
      requests.push_back({seqs[e], sampling(per_turn, rng_key(seed, e * 1009 + uint64_t(t)))});
    const EngineStats before = engine.stats();
    const std::vector<RequestOutput> outs = engine.generate(requests);
    add_stats(r, before, engine.stats());
    for (size_t e = 0; e < seqs.size(); ++e) {
      const std::vector<int32_t>& ids = outs[e].completions.at(0).ids;
      seqs[e].insert(seqs[e].end(), ids.begin(), ids.end());
      r.model_tokens += int64_t(ids.size());
      if (t + 1 < o.turns) {
        seqs[e].insert(seqs[e].end(), env.begin(), env.end());
        r.env_tokens += int64_t(env.size());
      }
    }
  }
  r.seconds = seconds_since(t0);
  return r;
}

Rollout single_turn(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                    const TurnsBenchOptions& o, uint64_t seed) {
  Rollout r;
  const int64_t tokens = o.completion_tokens / o.turns * o.turns + (o.turns - 1) * o.env_tokens;
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back({prompts[i], sampling(tokens, rng_key(seed, i))});
    requests.back().params.n = int(o.generations);
  }
  const auto t0 = Clock::now();
  const EngineStats before = engine.stats();
  const std::vector<RequestOutput> outs = engine.generate(requests);
  add_stats(r, before, engine.stats());
  r.seconds = seconds_since(t0);
  for (const RequestOutput& out : outs)
    for (const CompletionOutput& c : out.completions) r.model_tokens += int64_t(c.ids.size());
  return r;
}

nlohmann::json to_json(const Rollout& r) {
  return {{"rollout_seconds", r.seconds},
          {"model_tokens", r.model_tokens},
          {"env_tokens", r.env_tokens},
          {"prefill_tokens", r.prefill_tokens},
          {"prefix_hit_tokens", r.prefix_hit_tokens},
          {"engine_calls", r.engine_calls}};
}

}  // namespace

nlohmann::json bench_turns(BenchModel& bench, const TurnsBenchOptions& o) {
  CHECK(o.turns >= 2, "bench grpo: --turns must be at least 2 (1 is the plain benchmark), got {}",
        o.turns);
  CHECK(o.env_tokens >= 1, "bench grpo: --env-tokens must be positive, got {}", o.env_tokens);
  CHECK(o.completion_tokens >= o.turns,
        "bench grpo: --completion-tokens {} cannot give each of {} turns a token",
        o.completion_tokens, o.turns);
  Model& model = bench.model();
  EngineOptions eo;
  eo.kv_memory_bytes = size_t(o.kv_memory_gib * double(size_t(1) << 30));
  eo.kv_dtype = parse_kv_dtype(o.kv_dtype);
  eo.max_num_seqs = std::max<int64_t>(256, o.prompts * o.generations);
  eo.seed = o.seed;
  Engine engine(bench.ctx(), model, &bench.fresh_adapter(), nullptr, {}, eo);
  const int64_t vocab = model.config().vocab_size;
  const std::vector<int32_t> env = random_token_ids(o.env_tokens, vocab, o.seed + 23);
  Rollout multi, single;
  const int64_t timed = o.steps > 1 ? o.steps - 1 : 1;
  for (int64_t s = 0; s < o.steps; ++s) {
    const std::vector<int32_t> ids =
        random_token_ids(o.prompts * o.prompt_tokens, vocab, o.seed + 11 + uint64_t(s));
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t p = 0; p < o.prompts; ++p)
      prompts.emplace_back(ids.begin() + p * o.prompt_tokens,
                           ids.begin() + (p + 1) * o.prompt_tokens);
    // A new adapter version per rollout, as after each optimizer step: no prefix is reused
    // across rollouts, only within one.
    engine.set_adapter_version(uint64_t(2 * s + 1));
    const Rollout m = multi_turn(engine, prompts, o, env, rng_key(o.seed, uint64_t(s)));
    engine.set_adapter_version(uint64_t(2 * s + 2));
    const Rollout one = single_turn(engine, prompts, o, rng_key(o.seed ^ 0x51, uint64_t(s)));
    if (o.steps > 1 && s == 0) continue;  // the warm-up
    for (auto [sum, r] : {std::pair{&multi, &m}, std::pair{&single, &one}}) {
      sum->seconds += r->seconds / double(timed);
      sum->model_tokens = r->model_tokens;
      sum->env_tokens = r->env_tokens;
      sum->prefill_tokens = r->prefill_tokens;
      sum->prefix_hit_tokens = r->prefix_hit_tokens;
      sum->engine_calls = r->engine_calls;
    }
  }
  nlohmann::json j;
  j["turns"] = o.turns;
  j["tokens_per_turn"] = o.completion_tokens / o.turns;
  j["env_tokens_per_turn"] = o.env_tokens;
  j["rollouts_timed"] = timed;
  const nlohmann::json m = to_json(multi), one = to_json(single);
  for (const auto& [k, v] : m.items()) j["multi_turn/" + k] = v;
  for (const auto& [k, v] : one.items())
    if (k != "env_tokens") j["single_turn/" + k] = v;
  j["multi_turn_over_single_turn"] = multi.seconds / std::max(single.seconds, 1e-12);
  return j;
}

}  // namespace fp8rl::cli
