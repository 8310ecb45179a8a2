#include "rl/grpo_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <optional>

#include "core/check.h"
#include "core/rng.h"
#include "core/wall_clock.h"
#include "engine/engine.h"
#include "formats/json_read.h"
#include "ops/backward.h"
#include "ops/exactness.h"
#include "ops/memory.h"
#include "ops/memory_budget.h"
#include "rl/advantages.h"
#include "rl/agent_environment.h"
#include "rl/conversation_tokens.h"
#include "rl/environment_process.h"
#include "rl/episode_rollout.h"
#include "rl/grpo_loss.h"
#include "rl/online_dpo.h"
#include "rl/prompt_data.h"
#include "rl/rollout_batch.h"
#include "rl/rollout_correction.h"
#include "tokenizer/tokenizer.h"
#include "train/logprob_pass.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"
#include "train/train_step.h"
#include "train/training_arguments.h"

namespace fp8rl {

namespace {

// The dataset row an environment or agent program receives for an episode: every column, with
// the prompt as its text or its messages.
nlohmann::json episode_row(const PromptExample& ex) {
  nlohmann::json row = ex.columns;
  if (ex.messages.is_null())
    row["prompt"] = ex.text;
  else
    row["messages"] = ex.messages;
  return row;
}

// One generation round: C = prompts x num_generations completions and everything the
// micro-steps over it need, per completion c and its tokens j.
struct Round {
  std::vector<size_t> prompt;  // [C] index into the dataset
  // [C][P_c] each episode's opening when an environment gave it (else its entry is empty: the
  // dataset prompt's); empty without an environment.
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<std::vector<int32_t>> ids;         // [C][n_c] sampled tokens (EOS included)
  std::vector<std::vector<double>> engine_logp;  // [C][n_c]
  std::vector<std::vector<double>> old_logp;     // [C][n_c] trainer's, at rollout (or empty)
  std::vector<std::vector<double>> ref_logp;     // [C][n_c] reference policy (beta != 0)
  std::vector<std::vector<double>> is_weight;    // [C][n_c] rollout correction (or empty)
  std::vector<std::vector<uint8_t>> mask;        // [C][n_c] trained tokens
  // [C][n_c] 1: the model's token, 0: an environment's (multi-turn); empty: all the model's.
  std::vector<std::vector<uint8_t>> sampled;
  // [C] where a completion's tokens start another packed sequence (an agent episode's history
  // rewritten, rl/agent_trajectory.h): (position in ids, that sequence's first token, which
  // has no target); empty: one sequence each.
  std::vector<std::vector<std::pair<int64_t, int32_t>>> sequence_starts;
  // routing_replay: [C][(P_c + n_c - 1) x L x k] the engine's experts of each packed
  // position (prompt, completion but its last token); empty otherwise.
  std::vector<std::vector<int32_t>> routing;
  std::vector<double> advantages;  // [C]
  // Online DPO: [C] each completion's reward, missing_eos_penalty applied (NaN: not scored),
  // and the round's β (TRL's beta at the epoch the round starts in); empty and 0 otherwise.
  std::vector<double> rewards;
  double dpo_beta = 0;
  int64_t num_items = 0;                              // active tokens of the round
  nlohmann::json metrics = nlohmann::json::object();  // the round's TRL metrics
  // What the reward functions logged with log_metric: name -> the round's mean.
  nlohmann::json logged_metrics = nlohmann::json::object();
  int64_t micro_used = 0;  // micro-steps taken from it

  nlohmann::json to_json() const {
    return {{"prompt", prompt},
            {"prompt_ids", prompt_ids},
            {"ids", ids},
            {"engine_logp", engine_logp},
            {"old_logp", old_logp},
            {"ref_logp", ref_logp},
            {"is_weight", is_weight},
            {"mask", mask},
            {"sampled", sampled},
            {"sequence_starts", sequence_starts},
            {"routing", routing},
            {"advantages", advantages},
            {"rewards", rewards},
            {"dpo_beta", dpo_beta},
            {"num_items", num_items},
            {"metrics", metrics},
            {"logged_metrics", logged_metrics},
            {"micro_used", micro_used}};
  }
  // What a restored round must agree with: this run's data, model and settings.
  struct Shape {
    size_t completions = 0;  // prompts per round x num_generations
    size_t prompts = 0;      // the dataset's
    int64_t vocab_size = 0;
    int64_t max_completion_length = 0;
    int64_t micro_per_round = 0;  // micro-steps a round serves
    bool needs_ref_logp = false;  // beta != 0, or online DPO
    bool online_dpo = false;      // it must hold rewards and a β
    // routing_replay: L x k ids per position, each in [-1, num_experts); 0: no routing.
    int64_t routing_row = 0, num_experts = 0;
    std::vector<size_t> prompt_lengths;  // [prompts] the dataset's
    size_t longest_prompt = 0;           // an episode's opening at most (the pass's plan)
  };
  // A checkpoint's round, every field checked against `s` (an index read blindly would point
  // outside the dataset or the round's completions, or past a completion's tokens).
  static Round from_json(const nlohmann::json& j, const Shape& s);
};

namespace round_json {

using Json = nlohmann::json;

const Json& field(const Json& j, const char* key) {
  const auto it = j.find(key);
  CHECK(it != j.end(), "it has no '{}'", key);
  return *it;
}

// An integer in [low, high]; what() names it in the error (called only then: a round has a
// name per token).
template <class Name>
int64_t integer(const Json& v, const Name& what, int64_t low, int64_t high) {
  const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(high)
                                           : v.is_number_integer() && v.get<int64_t>() <= high;
  CHECK(fits && v.get<int64_t>() >= low, "{} is {}, expected an integer in [{}, {}]", what(),
        json_excerpt(v), low, high);
  return v.get<int64_t>();
}

// Field `key`: a list of one entry per completion (or an empty list where `may_be_empty`: a
// per-token field this round did not compute).
const Json& per_completion(const Json& j, const char* key, size_t completions, bool may_be_empty) {
  const Json& v = field(j, key);
  CHECK(v.is_array() && (v.size() == completions || (may_be_empty && v.empty())),
        "'{}' must be a list of {} entries (one per completion){}, got {}", key, completions,
        may_be_empty ? " or empty" : "",
        v.is_array() ? fmt::format("{} entries", v.size()) : json_excerpt(v));
  return v;
}

// Entry c of a per-token field: `tokens` numbers.
std::vector<double> token_numbers(const Json& v, const char* key, size_t c, size_t tokens) {
  CHECK(v.is_array() && v.size() == tokens,
        "'{}'[{}] must be a list of {} numbers (one per token of completion {}), got {}", key, c,
        tokens, c, v.is_array() ? fmt::format("{} entries", v.size()) : json_excerpt(v));
  std::vector<double> out;
  out.reserve(tokens);
  for (size_t k = 0; k < tokens; ++k) {
    CHECK(v[k].is_number(), "'{}'[{}][{}] is {}, expected a number", key, c, k, json_excerpt(v[k]));
    out.push_back(v[k].get<double>());
  }
  return out;
}

}  // namespace round_json

Round Round::from_json(const nlohmann::json& j, const Shape& s) {
  using namespace round_json;
  CHECK(j.is_object(), "it is {}, not an object", json_excerpt(j));
  const size_t n = s.completions;
  const Json& prompt = field(j, "prompt");
  CHECK(prompt.is_array() && prompt.size() == n,
        "it holds {} completions, and this run's generation batch is {} (prompts per round x "
        "num_generations): resume with the batch settings it was saved with",
        prompt.is_array() ? fmt::format("{}", prompt.size()) : json_excerpt(prompt), n);
  const Json& ids = per_completion(j, "ids", n, false);
  const Json& engine_logp = per_completion(j, "engine_logp", n, false);
  const Json& old_logp = per_completion(j, "old_logp", n, true);
  const Json& ref_logp = per_completion(j, "ref_logp", n, true);
  const Json& is_weight = per_completion(j, "is_weight", n, true);
  const Json& mask = per_completion(j, "mask", n, false);
  static const Json kEmpty = Json::array();
  const Json& prompt_ids =
      j.contains("prompt_ids") ? per_completion(j, "prompt_ids", n, true) : kEmpty;
  const Json& sampled = j.contains("sampled") ? per_completion(j, "sampled", n, true) : kEmpty;
  const Json& starts =
      j.contains("sequence_starts") ? per_completion(j, "sequence_starts", n, true) : kEmpty;
  static const Json kNone = Json::array();
  const Json& routing = s.routing_row > 0 ? per_completion(j, "routing", n, false) : kNone;
  const Json& advantages = per_completion(j, "advantages", n, false);
  CHECK(!s.needs_ref_logp || !ref_logp.empty(),
        "it has no reference logprobs ('ref_logp'), and this run's beta needs them: resume with "
        "the beta it was saved with");
  const Json& rewards = s.online_dpo ? per_completion(j, "rewards", n, false) : kEmpty;
  Round r;
  int64_t active = 0;
  for (size_t c = 0; c < n; ++c) {
    r.prompt.push_back(size_t(integer(
        prompt[c], [&] { return fmt::format("'prompt'[{}]", c); }, 0, int64_t(s.prompts) - 1)));
    if (!prompt_ids.empty()) {
      const Json& p = prompt_ids[c];
      CHECK(p.is_array() && p.size() <= s.longest_prompt,
            "'prompt_ids'[{}] must be a list of at most {} token ids (the longest prompt), got {}",
            c, s.longest_prompt,
            p.is_array() ? fmt::format("{} entries", p.size()) : json_excerpt(p));
      std::vector<int32_t>& out = r.prompt_ids.emplace_back();
      for (size_t k = 0; k < p.size(); ++k)
        out.push_back(int32_t(integer(
            p[k], [&] { return fmt::format("'prompt_ids'[{}][{}]", c, k); }, 0, s.vocab_size - 1)));
    }
    const Json& tokens = ids[c];
    CHECK(tokens.is_array() && !tokens.empty() && int64_t(tokens.size()) <= s.max_completion_length,
          "'ids'[{}] must be a list of 1 to {} token ids (max_completion_length), got {}", c,
          s.max_completion_length,
          tokens.is_array() ? fmt::format("{} entries", tokens.size()) : json_excerpt(tokens));
    const size_t len = tokens.size();
    std::vector<int32_t>& out = r.ids.emplace_back();
    for (size_t k = 0; k < len; ++k)
      out.push_back(int32_t(integer(
          tokens[k], [&] { return fmt::format("'ids'[{}][{}]", c, k); }, 0, s.vocab_size - 1)));
    r.engine_logp.push_back(token_numbers(engine_logp[c], "engine_logp", c, len));
    if (s.routing_row > 0) {
      const Json& ids_c = routing[c];
      const size_t want = (s.prompt_lengths[r.prompt[c]] + len - 1) * size_t(s.routing_row);
      CHECK(ids_c.is_array() && ids_c.size() == want,
            "'routing'[{}] must be a list of {} expert ids (every packed position's layers x "
            "top-k), got {}",
            c, want,
            ids_c.is_array() ? fmt::format("{} entries", ids_c.size()) : json_excerpt(ids_c));
      std::vector<int32_t>& e = r.routing.emplace_back();
      for (size_t k = 0; k < want; ++k)
        e.push_back(int32_t(integer(
            ids_c[k], [&] { return fmt::format("'routing'[{}][{}]", c, k); }, -1,
            s.num_experts - 1)));
    }
    if (!old_logp.empty()) r.old_logp.push_back(token_numbers(old_logp[c], "old_logp", c, len));
    if (!ref_logp.empty()) r.ref_logp.push_back(token_numbers(ref_logp[c], "ref_logp", c, len));
    if (!is_weight.empty()) r.is_weight.push_back(token_numbers(is_weight[c], "is_weight", c, len));
    const Json& m = mask[c];
    CHECK(m.is_array() && m.size() == len,
          "'mask'[{}] must be a list of {} 0/1 values (one per token of completion {}), got {}", c,
          len, c, m.is_array() ? fmt::format("{} entries", m.size()) : json_excerpt(m));
    std::vector<uint8_t>& bits = r.mask.emplace_back();
    for (size_t k = 0; k < len; ++k) {
      bits.push_back(uint8_t(integer(
          m[k], [&] { return fmt::format("'mask'[{}][{}]", c, k); }, 0, 1)));
      active += bits.back();
    }
    if (!sampled.empty()) {
      const Json& m2 = sampled[c];
      CHECK(m2.is_array() && m2.size() == len,
            "'sampled'[{}] must be a list of {} 0/1 values (one per token of completion {}), got "
            "{}",
            c, len, c, m2.is_array() ? fmt::format("{} entries", m2.size()) : json_excerpt(m2));
      std::vector<uint8_t>& bits2 = r.sampled.emplace_back();
      for (size_t k = 0; k < len; ++k)
        bits2.push_back(uint8_t(integer(
            m2[k], [&] { return fmt::format("'sampled'[{}][{}]", c, k); }, 0, 1)));
    }
    if (!starts.empty()) {
      const Json& st = starts[c];
      CHECK(st.is_array() && int64_t(len + st.size()) <= s.max_completion_length,
            "'sequence_starts'[{}] must be a list of at most {} [position, id] pairs (the "
            "completion's {} tokens and the sequences' first tokens within "
            "max_completion_length), got {}",
            c, s.max_completion_length - int64_t(len), len,
            st.is_array() ? fmt::format("{} entries", st.size()) : json_excerpt(st));
      std::vector<std::pair<int64_t, int32_t>>& out_st = r.sequence_starts.emplace_back();
      int64_t after = 0;
      for (size_t k = 0; k < st.size(); ++k) {
        CHECK(st[k].is_array() && st[k].size() == 2,
              "'sequence_starts'[{}][{}] must be a [position, id] pair, got {}", c, k,
              json_excerpt(st[k]));
        const int64_t pos = integer(
            st[k][0], [&] { return fmt::format("'sequence_starts'[{}][{}][0]", c, k); }, after + 1,
            int64_t(len) - 1);
        const auto id = int32_t(integer(
            st[k][1], [&] { return fmt::format("'sequence_starts'[{}][{}][1]", c, k); }, 0,
            s.vocab_size - 1));
        out_st.emplace_back(pos, id);
        after = pos;
      }
    }
    CHECK(advantages[c].is_number(), "'advantages'[{}] is {}, expected a number", c,
          json_excerpt(advantages[c]));
    r.advantages.push_back(advantages[c].get<double>());
    if (s.online_dpo) {
      // JSON has no NaN: an unscored reward was written as null.
      CHECK(rewards[c].is_number() || rewards[c].is_null(),
            "'rewards'[{}] is {}, expected a number or null", c, json_excerpt(rewards[c]));
      r.rewards.push_back(rewards[c].is_null() ? std::nan("") : rewards[c].get<double>());
    }
  }
  if (s.online_dpo) {
    const Json& beta = field(j, "dpo_beta");
    CHECK(beta.is_number() && std::isfinite(beta.get<double>()) && beta.get<double>() > 0,
          "'dpo_beta' is {}, expected a number > 0", json_excerpt(beta));
    r.dpo_beta = beta.get<double>();
  }
  r.num_items = integer(
      field(j, "num_items"), [] { return "'num_items'"; }, 0, INT64_MAX);
  CHECK(r.num_items == active,
        "'num_items' is {}, and its masks hold {} trained tokens (they must agree)", r.num_items,
        active);
  r.metrics = field(j, "metrics");
  CHECK(r.metrics.is_object(), "'metrics' is {}, expected an object", json_excerpt(r.metrics));
  r.logged_metrics = j.value("logged_metrics", nlohmann::json::object());
  CHECK(r.logged_metrics.is_object(), "'logged_metrics' is {}, expected an object",
        json_excerpt(r.logged_metrics));
  r.micro_used = integer(
      field(j, "micro_used"), [] { return "'micro_used'"; }, 0, s.micro_per_round);
  return r;
}

// Completions [first, first + count) of a round packed for the trainer: each sequence is its
// prompt then its completion but the last token; targets are the completion's tokens. A
// completion with sequence starts packs one sequence more at each: that start's first token,
// then the completion's tokens up to the next start.
struct GrpoPacked {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0};
  std::vector<int64_t> token_pos;   // [N] packed position of each completion token, in order
  std::vector<int64_t> offsets{0};  // [count + 1] completion token offsets (rl/ragged.h)
  std::vector<int32_t> routing;     // [T, L, k] the engine's experts (routing_replay)
  PackedSequences view() const { return {ids, targets, cu, routing}; }
};

GrpoPacked pack(const Round& r, const std::vector<PromptExample>& data, size_t first,
                size_t count) {
  GrpoPacked p;
  for (size_t c = first; c < first + count; ++c) {
    const std::vector<int32_t>& prompt =
        r.prompt_ids.empty() || r.prompt_ids[c].empty() ? data[r.prompt[c]].ids : r.prompt_ids[c];
    const std::vector<int32_t>& comp = r.ids[c];
    static const std::vector<std::pair<int64_t, int32_t>> kOne;
    const auto& starts = r.sequence_starts.empty() ? kOne : r.sequence_starts[c];
    std::vector<int32_t> context = prompt;
    size_t from = 0;
    for (size_t k = 0; k <= starts.size(); ++k) {
      const size_t to = k < starts.size() ? size_t(starts[k].first) : comp.size();
      const int64_t start = int64_t(p.ids.size());
      p.ids.insert(p.ids.end(), context.begin(), context.end());
      p.ids.insert(p.ids.end(), comp.begin() + ptrdiff_t(from), comp.begin() + ptrdiff_t(to) - 1);
      p.targets.resize(p.ids.size(), ops::kIgnoreIndex);
      for (size_t j = from; j < to; ++j) {
        const int64_t pos = start + int64_t(context.size()) - 1 + int64_t(j - from);
        p.targets[size_t(pos)] = comp[j];
        p.token_pos.push_back(pos);
      }
      p.cu.push_back(int64_t(p.ids.size()));
      if (k < starts.size()) context = {starts[k].second};
      from = to;
    }
    p.offsets.push_back(int64_t(p.token_pos.size()));
    if (!r.routing.empty())
      p.routing.insert(p.routing.end(), r.routing[c].begin(), r.routing[c].end());
  }
  return p;
}

std::vector<double> flatten(const std::vector<std::vector<double>>& v, size_t first, size_t count) {
  std::vector<double> out;
  for (size_t c = first; c < first + count && c < v.size(); ++c)
    out.insert(out.end(), v[c].begin(), v[c].end());
  return out;
}

// A running mean of metrics over the micro-steps of one optimizer step.
struct MetricMeans {
  std::map<std::string, std::pair<double, int64_t>> sums;
  void add(const std::string& key, double v) {
    if (!std::isfinite(v)) return;
    auto& s = sums[key];
    s.first += v;
    ++s.second;
  }
  void into(nlohmann::json& j) const {
    for (const auto& [k, s] : sums) j[k] = s.first / double(s.second);
  }
};

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

// The fields samples.jsonl writes itself; log_extra columns may not take them.
bool is_sample_field(const std::string& key) {
  return key == "step" || key == "prompt" || key == "completion" || key == "reward" ||
         key == "advantage" || key == "completion_messages";
}

}  // namespace

std::vector<size_t> generation_batch_order(uint64_t seed, int64_t round, size_t n) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  // A stream of its own (the 0x5e1f tag), apart from the data order's and the sampling's.
  const uint64_t stream = rng_key(seed ^ 0x5e1fu, uint64_t(round));
  for (size_t i = n; i > 1; --i) {
    const size_t j = size_t(uniform01(stream, i) * float(i)) % i;
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

struct GrpoTrainer::Impl {
  Context& ctx;
  const Model& model;
  LoraAdapter& adapter;
  const tok::Tokenizer* tokenizer;  // null: completions are not decoded (text "")
  std::vector<int32_t> eos_ids;
  std::vector<PromptExample> data;
  std::vector<PromptExample> eval_data;  // the evaluations' prompts
  GrpoConfig cfg;
  SamplingParams sampling;  // the rounds' sampling (cfg.sampling_params()), but the seed
  RewardSet rewards;
  std::string base_model_name;

  int64_t steps_per_generation = 1, prompts_per_round = 1, micro_batch = 1;
  int64_t steps_per_epoch = 1, total_steps = 0;
  std::unique_ptr<TrainStep> train_step;
  // Standby memory: the engine's KV pool while it generates, the pass's saved activations and
  // KV while the trainer runs (declared first: it outlives both).
  StandbyRegion region;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<LoraAdapter> reference;  // the frozen starting adapter, or null: the base
  std::unique_ptr<LogprobPass> pass;
  LogprobPass::ReplayChanges replay_changes;  // the round's old-logprob passes (routing_replay)
  PassPlan largest;                // the pass over the longest micro-batch, by its dry run
  RewardModelsPlan reward_models;  // the reward models' scoring phase and bytes

  // Data position: epoch and index into its order; rounds generated so far.
  int64_t epoch = 0, next_prompt = 0, rounds = 0;
  std::vector<size_t> order;
  int64_t order_epoch = -1;
  std::optional<Round> round;
  int64_t non_finite_total = 0;
  // on_policy_exact: the device's batch-invariant mode while the trainer lives.
  std::optional<ops::BatchInvariantScope> invariance;
  // Multi-turn episodes: the environment (started when the run starts) and the chat template
  // that turns its messages into tokens (null: the model has none).
  std::unique_ptr<EnvironmentProcess> environment;
  std::unique_ptr<ConversationTokens> conversation;
  std::unique_ptr<AgentEnvironment> agents;  // environment_server's program and endpoint
  bool told_rerender = false;  // the note on a template that rewrites history, printed once

  Impl(Context& c, const Model& m, LoraAdapter& a, const tok::Tokenizer* t,
       std::vector<int32_t> eos, std::vector<PromptExample> d, const GrpoConfig& g, RewardSet r,
       std::string base)
      : ctx(c),
        model(m),
        adapter(a),
        tokenizer(t),
        eos_ids(std::move(eos)),
        data(std::move(d)),
        cfg(g),
        rewards(std::move(r)),
        base_model_name(std::move(base)),
        region(c) {
    cfg.validate();
    sampling = cfg.sampling_params();
    // A token's logprob is computed the same way in the engine's steps and the trainer's pass
    // when the kernels are batch-invariant: always on the CPU (ops/cpu/log_softmax.h), in a
    // mode of the device on CUDA (ops/exactness.h: pinned GEMM algorithms, the prefill
    // attention kernel for decode steps, the training forward's layers in the engine).
    if (cfg.on_policy_exact) {
      CHECK(parse_kv_dtype(cfg.kv_dtype) != KvDType::f8e4m3,
            "on_policy_exact needs kv_dtype bf16: the trainer's pass keeps keys and values "
            "unquantized, so FP8 KV cannot give the engine the same logprobs");
      invariance.emplace(ctx);
    }
    CHECK(!cfg.routing_replay || (model.config().has_moe() && ctx.device == Device::cpu),
          "routing_replay: the model has no MoE layers or runs on CUDA (replay runs on the CPU "
          "for now)");
    CHECK(!data.empty(), "grpo: the dataset has no prompts");
    CHECK(rewards.size() > 0 || !cfg.environment.empty() || !cfg.environment_server.empty(),
          "grpo: no reward functions (set `rewards`, --reward-process or an environment)");
    if (!cfg.reward_weights.empty()) rewards.set_weights(cfg.reward_weights);
    steps_per_generation = cfg.resolved_steps_per_generation();
    prompts_per_round = cfg.prompts_per_generation();
    micro_batch = cfg.per_device_train_batch_size;
    const int64_t micro_per_round = steps_per_generation * cfg.num_iterations;
    const int64_t rounds_per_epoch =
        (int64_t(data.size()) + prompts_per_round - 1) / prompts_per_round;
    steps_per_epoch =
        std::max<int64_t>(1, rounds_per_epoch * micro_per_round / cfg.gradient_accumulation_steps);
    check_sizes();
    total_steps = cfg.max_steps > 0
                      ? cfg.max_steps
                      : int64_t(std::ceil(cfg.num_train_epochs * double(steps_per_epoch)));
    train_step =
        std::make_unique<TrainStep>(make_optimizer(cfg, adapter.master_params().numel(), ctx),
                                    train_step_config(cfg, total_steps));
    EngineOptions eo;
    eo.kv_memory_bytes = size_t(cfg.kv_memory * double(1ull << 30));
    if (cfg.gpu_memory_utilization) eo.kv_memory_fraction = *cfg.gpu_memory_utilization;
    eo.kv_dtype = parse_kv_dtype(cfg.kv_dtype);
    eo.max_num_seqs = cfg.max_num_seqs;
    eo.max_num_batched_tokens = cfg.max_num_batched_tokens;
    eo.seed = uint64_t(cfg.seed);
    eo.record_routing = cfg.routing_replay;
    eo.prefix_caching = cfg.enable_prefix_caching;
    pass = std::make_unique<LogprobPass>(ctx, model, &adapter, &region);
    if (cfg.needs_reference()) {
      reference = starting_adapter(cfg, cfg.reference_model, model, ctx);
      pass->set_reference(reference.get());
    }
    // The region is sized once for the larger phase: the engine's KV pool, or the pass over
    // the longest micro-batch (micro_batch of the longest prompt plus a full completion),
    // which takes it over (growing it, before anything lies there) if that is larger. The
    // scratch arena first, before the engine records CUDA graphs over it (it would move if a
    // pass grew it later; the engine would then drop them), and the region last, so that it
    // is the device region's highest block and grows in place instead of leaving a hole.
    largest = largest_pass_plan();
    // Reward models score a round (or an evaluation batch) in the region too: one more phase.
    const int64_t scored = std::max(prompts_per_round * cfg.num_generations,
                                    cfg.evaluates() ? cfg.per_device_eval_batch_size : int64_t(0));
    reward_models = plan_reward_models(rewards, region, scored,
                                       int64_t(longest_prompt()) + cfg.max_completion_length);
    const size_t region_bytes = std::max(largest.region_bytes(), reward_models.scoring.kv_bytes);
    if (ctx.device == Device::cpu)
      check_host_bytes(
          largest.region_bytes() + largest.scratch_bytes + largest.host_bytes,
          fmt::format("grpo: the training pass over the longest micro-batch "
                      "(per_device_train_batch_size {} sequences of up to {} "
                      "tokens: the longest prompt + max_completion_length)",
                      micro_batch, longest_prompt() + size_t(cfg.max_completion_length)));
    ops::scratch_reserve(ctx, std::max(largest.scratch_bytes, reward_models.scoring.scratch_bytes));
    engine = std::make_unique<Engine>(ctx, model, &adapter, tokenizer, eos_ids, eo, &region);
    if (const size_t budget = ops::device_memory_budget(ctx);
        budget > 0 && region_bytes > region.size()) {
      const std::optional<size_t> left = ops::device_memory_left(ctx);
      const size_t room = left ? *left + region.size() : SIZE_MAX;
      CHECK(largest.region_bytes() <= room,
            "grpo: gpu_memory {}: the training pass over the longest micro-batch needs {} "
            "(saved activations {} + KV {}), {} are left; lower per_device_train_batch_size or "
            "max_completion_length{}, or give a larger gpu_memory",
            gib_text(budget), gib_text(largest.region_bytes()), gib_text(largest.saved_bytes),
            gib_text(largest.kv_bytes), gib_text(room),
            cfg.gradient_checkpointing ? "" : ", turn on gradient_checkpointing");
      CHECK(reward_models.scoring.kv_bytes <= room,
            "grpo: gpu_memory {}: the reward models' scoring of a round ({} sequences) needs {} "
            "of KV, {} are left; lower a reward model's max_batch_tokens, or give a larger "
            "gpu_memory",
            gib_text(budget), scored, gib_text(reward_models.scoring.kv_bytes), gib_text(room));
    }
    region.reserve(region_bytes);
  }

  // The longest prompt a round may pack: the dataset's, or an environment's opening (up to
  // max_prompt_length).
  size_t longest_prompt() const {
    size_t longest = 0;
    for (const PromptExample& e : data) longest = std::max(longest, e.ids.size());
    if (cfg.multi_turn() && cfg.max_prompt_length)
      longest = std::max(longest, size_t(*cfg.max_prompt_length));
    return longest;
  }

  // What the settings size, checked before anything is allocated for it, so that an absurd
  // batch or completion length is an error naming it rather than "out of memory".
  void check_sizes() const {
    check_prompt_room(data, "grpo: the training data", cfg.max_completion_length, model.config());
    const auto prompt = int64_t(longest_prompt());
    if (ctx.device != Device::cpu) return;  // the device's allocator names its own bytes
    // A round keeps every completion's tokens, logprobs and mask; at least one token each.
    const size_t per_completion = sizeof(std::vector<int32_t>) + 3 * sizeof(std::vector<double>) +
                                  sizeof(std::vector<uint8_t>) + 2 * sizeof(double) + 13;
    const double completions = double(prompts_per_round) * double(cfg.num_generations);
    check_host_bytes(size_t(std::min(completions * double(per_completion), 1e19)),
                     fmt::format("grpo: a generation round of {:.0f} completions "
                                 "(generation_batch_size: per_device_train_batch_size x "
                                 "steps_per_generation)",
                                 completions));
    // The dry run of the longest micro-batch holds its token ids and targets.
    const double tokens =
        std::min(double(micro_batch), completions) * double(prompt + cfg.max_completion_length);
    check_host_bytes(
        size_t(std::min(tokens * 8.0, 1e19)),
        fmt::format("grpo: a micro-batch of {:.0f} tokens (per_device_train_batch_size "
                    "{} x (the longest prompt {} + max_completion_length {}))",
                    tokens, micro_batch, prompt, cfg.max_completion_length));
  }

  PassPlan largest_pass_plan() {
    const size_t longest_prompt = this->longest_prompt();
    const int64_t len = int64_t(longest_prompt) + cfg.max_completion_length;
    const int64_t seqs = std::min<int64_t>(micro_batch, prompts_per_round * cfg.num_generations);
    std::vector<int32_t> ids(size_t(seqs * len), 0), targets(size_t(seqs * len), -100);
    std::vector<int64_t> cu(size_t(seqs + 1));
    for (int64_t i = 0; i <= seqs; ++i) cu[size_t(i)] = i * len;
    PassOptions o = pass_options();
    o.entropy = true;
    return pass->plan({ids, targets, cu}, o);
  }

  const std::vector<size_t>& epoch_order(int64_t e) {
    if (e != order_epoch) {
      order = prompt_epoch_order(uint64_t(cfg.seed), e, data.size());
      order_epoch = e;
    }
    return order;
  }

  std::vector<size_t> next_prompts() {
    std::vector<size_t> out;
    while (int64_t(out.size()) < prompts_per_round) {
      const auto& o = epoch_order(epoch);
      if (next_prompt >= int64_t(o.size())) {
        ++epoch;
        next_prompt = 0;
        continue;
      }
      out.push_back(o[size_t(next_prompt++)]);
    }
    return out;
  }

  PassOptions pass_options() const {
    PassOptions o;
    // generation_kwargs may override it. TRL's online DPO takes the log-softmax of the logits
    // as they are, whatever the sampling temperature.
    o.temperature = cfg.online_dpo ? 1.0f : float(sampling.temperature);
    o.checkpointing = cfg.gradient_checkpointing;
    o.offload = cfg.activation_offloading;
    return o;
  }

  // The trainer's logprobs of completions [first, first + count) with the adapter as it is now,
  // or of the reference policy (the base model alone).
  std::vector<std::vector<double>> trainer_logprobs(const Round& r, size_t first, size_t count,
                                                    bool reference) {
    const GrpoPacked p = pack(r, data, first, count);
    PassOptions o = pass_options();
    o.reference = reference;
    pass->forward(p.view(), o);
    if (!reference) {
      replay_changes.changed += pass->replay_changes().changed;
      replay_changes.replayed += pass->replay_changes().replayed;
    }
    std::vector<std::vector<double>> out;
    for (size_t c = 0; c < count; ++c) {
      std::vector<double> v;
      for (int64_t k = p.offsets[c]; k < p.offsets[c + 1]; ++k)
        v.push_back(pass->logprobs()[size_t(p.token_pos[size_t(k)])]);
      out.push_back(std::move(v));
    }
    return out;
  }

  std::vector<std::vector<double>> all_logprobs(const Round& r, bool reference) {
    std::vector<std::vector<double>> out;
    for (size_t first = 0; first < r.ids.size(); first += size_t(micro_batch)) {
      const size_t n = std::min(size_t(micro_batch), r.ids.size() - first);
      auto part = trainer_logprobs(r, first, n, reference);
      for (auto& v : part) out.push_back(std::move(v));
    }
    return out;
  }

  // TRL passes reward functions the trainer's state (transformers' TrainerState) as it is
  // before optimizer step `step`: the steps taken, and the epoch as a fraction of the data
  // drawn so far.
  nlohmann::json trainer_state(int64_t step) const {
    // transformers' count of epochs: the configured one, or max_steps' worth of epochs.
    const int64_t epochs = cfg.max_steps > 0 ? (total_steps + steps_per_epoch - 1) / steps_per_epoch
                                             : int64_t(std::ceil(cfg.num_train_epochs));
    return {{"global_step", step - 1},
            {"max_steps", total_steps},
            {"epoch", double(epoch) + double(next_prompt) / double(data.size())},
            {"num_train_epochs", epochs},
            {"logging_steps", cfg.logging_steps},
            {"save_steps", cfg.save_steps},
            {"train_batch_size", cfg.per_device_train_batch_size}};
  }

  Round generate(MetricsLog& samples, int64_t step) {
    Round r;
    const auto t0 = Clock::now();
    nlohmann::json state = trainer_state(step);  // before this round draws its prompts
    const std::vector<size_t> prompts = next_prompts();
    if (environment) return generate_episodes(samples, step, prompts, std::move(state));
    if (agents) return generate_agent_episodes(samples, step, prompts, std::move(state));
    std::vector<GenerationRequest> requests;
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest q;
      q.prompt_ids = data[prompts[i]].ids;
      q.params = sampling;
      q.params.seed = rng_key(uint64_t(cfg.seed), uint64_t(rounds) * 1000003u + i);
      requests.push_back(std::move(q));
    }
    engine->set_adapter_version(adapter.version());
    reset_peak_memory(ctx);
    const std::vector<RequestOutput> outs = engine->generate(requests);
    const double rollout_seconds = seconds_since(t0);
    const size_t rollout_peak = peak_memory_bytes(ctx);
    reset_peak_memory(ctx);  // the training phase starts with the logprob recomputation
    ++rounds;

    std::vector<uint8_t> truncated;
    RewardBatch batch = reward_batch(data, prompts, outs, tokenizer, truncated, "grpo");
    batch.trainer_state = std::move(state);
    int64_t completion_tokens = 0;
    for (size_t i = 0; i < prompts.size(); ++i)
      for (const CompletionOutput& c : outs[i].completions) {
        r.prompt.push_back(prompts[i]);
        r.ids.push_back(c.ids);
        r.engine_logp.emplace_back(c.processed_logprobs.begin(), c.processed_logprobs.end());
        // The last token's row: never run by the engine, nor packed for the trainer.
        if (cfg.routing_replay)
          r.routing.emplace_back(c.routing.begin(), c.routing.end() - model.config().num_layers *
                                                                          model.config().moe.top_k);
        completion_tokens += int64_t(c.ids.size());
      }
    RolloutExtras extras;
    extras.rollout_seconds = rollout_seconds;
    extras.rollout_peak = rollout_peak;
    extras.completion_tokens = completion_tokens;
    return finish_round(std::move(r), samples, step, batch, truncated, extras);
  }

  // What a round's rollout adds to the common scoring and metrics of finish_round.
  struct RolloutExtras {
    double rollout_seconds = 0;
    size_t rollout_peak = 0;
    int64_t completion_tokens = 0;
    // Multi-turn: each episode's summed step rewards (the "environment" reward) and metrics.
    std::optional<RewardValues> environment_rewards;
    nlohmann::json metrics = nlohmann::json::object();
  };

  // The rewards of the configured functions and, with an environment, its own as one more
  // function named "environment" (weight 1) in TRL's nansum.
  CombinedRewards score_round(const RewardBatch& batch, const RolloutExtras& extras) {
    if (!extras.environment_rewards) return rewards.score(batch);
    CombinedRewards configured;
    if (rewards.size() > 0) configured = rewards.score(batch);
    std::vector<std::string> names{"environment"};
    std::vector<double> weights{1.0};
    std::vector<RewardValues> values{*extras.environment_rewards};
    for (size_t f = 0; f < configured.names.size(); ++f) {
      names.push_back(configured.names[f]);
      weights.push_back(configured.weights[f]);
      values.push_back(configured.per_function[f]);
    }
    CombinedRewards all = combine_rewards(std::move(names), std::move(weights), std::move(values));
    all.logged_metrics = std::move(configured.logged_metrics);
    all.logged_extra = std::move(configured.logged_extra);
    return all;
  }

  // A round's episodes with the environment: every prompt's num_generations episodes run to
  // their end (rl/episode_rollout.h); each one sequence for the trainer, its prompt the opening
  // and its completion every later token, the environment's masked out of the loss.
  Round generate_episodes(MetricsLog& samples, int64_t step, const std::vector<size_t>& prompts,
                          nlohmann::json state) {
    Round r;
    const auto t0 = Clock::now();
    std::vector<EpisodeInput> inputs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const PromptExample& ex = data[prompts[i]];
      const nlohmann::json row = episode_row(ex);
      const uint64_t group = rng_key(uint64_t(cfg.seed), uint64_t(rounds) * 1000003u + i);
      for (int64_t g = 0; g < cfg.num_generations; ++g) {
        EpisodeInput e;
        e.id = fmt::format("{}-{}", rounds, inputs.size());
        e.row = row;
        e.prompt_ids = ex.ids;
        e.prompt_messages = ex.messages;
        e.seed = rng_key(group, uint64_t(g));
        inputs.push_back(std::move(e));
      }
    }
    EpisodeOptions o;
    o.sampling = sampling;
    o.max_turns = cfg.episode_turns();
    o.max_completion_length = cfg.max_completion_length;
    // The training pass is planned for this long a prompt (max_prompt_length when set).
    o.max_prompt_length = int64_t(longest_prompt());
    o.max_context = model.config().max_context;
    engine->set_adapter_version(adapter.version());
    reset_peak_memory(ctx);
    EpisodeStats es;
    const std::vector<EpisodeResult> episodes =
        run_episodes(*engine, *environment, conversation.get(), *tokenizer, inputs, o, es);
    RolloutExtras extras;
    extras.rollout_seconds = seconds_since(t0);
    extras.rollout_peak = peak_memory_bytes(ctx);
    reset_peak_memory(ctx);
    ++rounds;

    RewardBatch batch;
    batch.columns = nlohmann::json::object();
    batch.trainer_state = std::move(state);
    batch.completion_messages = nlohmann::json::array();
    bool chat = true;
    for (const EpisodeResult& e : episodes) chat = chat && !e.opening.is_null();
    if (chat) batch.prompt_messages = nlohmann::json::array();
    std::vector<uint8_t> truncated;
    RewardValues env_rewards;
    std::vector<double> turns;
    int64_t truncated_count = 0, mismatches = 0;
    for (size_t c = 0; c < episodes.size(); ++c) {
      const EpisodeResult& e = episodes[c];
      const PromptExample& ex = data[prompts[c / size_t(cfg.num_generations)]];
      const bool from_data = e.prompt_ids == ex.ids && e.opening == ex.messages;
      r.prompt.push_back(prompts[c / size_t(cfg.num_generations)]);
      r.prompt_ids.push_back(from_data ? std::vector<int32_t>() : e.prompt_ids);
      CHECK(!e.ids.empty(),
            "{}: episode \"{}\" ended before the model's first turn: its "
            "opening leaves no room for a completion (max_completion_length, the context)",
            environment->who(), inputs[c].id);
      r.ids.push_back(e.ids);
      r.engine_logp.emplace_back(e.logp.begin(), e.logp.end());
      r.sampled.push_back(e.sampled);
      truncated.push_back(e.truncated);
      truncated_count += e.truncated;
      mismatches += e.rerender_mismatches;
      env_rewards.push_back(e.reward);
      turns.push_back(double(e.turns));
      extras.completion_tokens += std::accumulate(e.sampled.begin(), e.sampled.end(), int64_t(0));
      batch.prompts.push_back(from_data ? ex.text : tokenizer->decode(e.prompt_ids));
      if (chat) batch.prompt_messages.push_back(e.opening);
      batch.completions.push_back(e.last_completion);
      batch.completion_ids.push_back(e.last_ids);
      batch.completion_messages.push_back(e.messages.is_null() ? nlohmann::json::array()
                                                               : e.messages);
      for (const auto& [key, value] : ex.columns.items()) batch.columns[key].push_back(value);
    }
    for (auto& [key, col] : batch.columns.items())
      CHECK(col.size() == batch.completions.size(),
            "grpo: dataset column '{}' is missing in some rows", key);
    extras.environment_rewards = std::move(env_rewards);
    nlohmann::json& m = extras.metrics;
    m["env/turns/mean"] = mean_of(turns);
    m["env/turns/max"] = *std::max_element(turns.begin(), turns.end());
    m["env/truncated_episodes"] = truncated_count;
    m["env/rerender_mismatches"] = mismatches;
    if (mismatches > 0 && !told_rerender) {
      fmt::print(stderr,
                 "grpo: note: the chat template renders an episode's earlier turns otherwise than "
                 "the tokens the model saw (env/rerender_mismatches; e.g. it drops their "
                 "reasoning); the episodes keep their tokens as sampled, as TRL's do\n");
      told_rerender = true;
    }
    m["env/prefill_tokens"] = es.prefill_tokens;
    m["env/prefix_hit_tokens"] = es.prefix_hit_tokens;
    m["timing/environment_seconds"] = es.environment_seconds;
    // The environment's own metrics (the tools helper's tools/call_frequency, ...): the mean
    // over the round's step answers.
    for (const auto& [name, sum] : es.environment_metrics) m[name] = sum.first / double(sum.second);
    return finish_round(std::move(r), samples, step, batch, truncated, extras);
  }

  // A round's episodes with an agent program (rl/agent_environment.h): every prompt's
  // num_generations episodes, each one sample for the trainer: its first sequence's prompt, then
  // every later token, a rewritten history starting another packed sequence.
  Round generate_agent_episodes(MetricsLog& samples, int64_t step,
                                const std::vector<size_t>& prompts, nlohmann::json state) {
    Round r;
    const auto t0 = Clock::now();
    std::vector<AgentEpisodeInput> inputs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const nlohmann::json row = episode_row(data[prompts[i]]);
      const uint64_t group = rng_key(uint64_t(cfg.seed), uint64_t(rounds) * 1000003u + i);
      for (int64_t g = 0; g < cfg.num_generations; ++g)
        inputs.push_back(
            {fmt::format("{}-{}", rounds, inputs.size()), row, rng_key(group, uint64_t(g))});
    }
    engine->set_adapter_version(adapter.version());
    reset_peak_memory(ctx);
    AgentStats as;
    const std::vector<AgentEpisodeResult> episodes = agents->run(*engine, inputs, as);
    RolloutExtras extras;
    extras.rollout_seconds = seconds_since(t0);
    extras.rollout_peak = peak_memory_bytes(ctx);
    reset_peak_memory(ctx);
    ++rounds;

    RewardBatch batch;
    batch.columns = nlohmann::json::object();
    batch.trainer_state = std::move(state);
    batch.prompt_messages = nlohmann::json::array();
    batch.completion_messages = nlohmann::json::array();
    std::vector<uint8_t> truncated;
    RewardValues env_rewards;
    std::vector<double> turns;
    int64_t truncated_count = 0, extra_sequences = 0;
    for (size_t c = 0; c < episodes.size(); ++c) {
      const AgentEpisodeResult& e = episodes[c];
      const PromptExample& ex = data[prompts[c / size_t(cfg.num_generations)]];
      const std::vector<AgentSequence>& seqs = e.trajectory.sequences();
      const auto p0 = ptrdiff_t(e.trajectory.prompt_length());
      r.prompt.push_back(prompts[c / size_t(cfg.num_generations)]);
      r.prompt_ids.emplace_back(seqs[0].ids.begin(), seqs[0].ids.begin() + p0);
      std::vector<int32_t>& ids = r.ids.emplace_back(seqs[0].ids.begin() + p0, seqs[0].ids.end());
      std::vector<double>& logp =
          r.engine_logp.emplace_back(seqs[0].logp.begin() + p0, seqs[0].logp.end());
      std::vector<uint8_t>& sampled =
          r.sampled.emplace_back(seqs[0].sampled.begin() + p0, seqs[0].sampled.end());
      std::vector<std::pair<int64_t, int32_t>>& starts = r.sequence_starts.emplace_back();
      for (size_t k = 1; k < seqs.size(); ++k) {
        starts.emplace_back(int64_t(ids.size()), seqs[k].ids[0]);
        ids.insert(ids.end(), seqs[k].ids.begin() + 1, seqs[k].ids.end());
        logp.insert(logp.end(), seqs[k].logp.begin() + 1, seqs[k].logp.end());
        sampled.insert(sampled.end(), seqs[k].sampled.begin() + 1, seqs[k].sampled.end());
      }
      extra_sequences += int64_t(seqs.size()) - 1;
      truncated.push_back(e.truncated);
      truncated_count += e.truncated;
      env_rewards.push_back(e.reward);
      turns.push_back(double(e.trajectory.completions()));
      extras.completion_tokens += std::accumulate(sampled.begin(), sampled.end(), int64_t(0));
      batch.prompts.push_back(tokenizer->decode(r.prompt_ids.back()));
      batch.prompt_messages.push_back(e.opening);
      batch.completions.push_back(e.last_completion);
      batch.completion_ids.push_back(e.last_ids);
      batch.completion_messages.push_back(e.messages);
      for (const auto& [key, value] : ex.columns.items()) batch.columns[key].push_back(value);
    }
    for (auto& [key, col] : batch.columns.items())
      CHECK(col.size() == batch.completions.size(),
            "grpo: dataset column '{}' is missing in some rows", key);
    extras.environment_rewards = std::move(env_rewards);
    nlohmann::json& m = extras.metrics;
    m["env/turns/mean"] = mean_of(turns);
    m["env/turns/max"] = *std::max_element(turns.begin(), turns.end());
    m["env/truncated_episodes"] = truncated_count;
    m["env/agent/requests"] = as.requests;
    m["env/agent/refused_requests"] = as.refused;
    m["env/agent/extra_sequences"] = extra_sequences;
    m["env/prefill_tokens"] = as.prefill_tokens;
    m["env/prefix_hit_tokens"] = as.prefix_hit_tokens;
    return finish_round(std::move(r), samples, step, batch, truncated, extras);
  }

  // Scores a generated round, masks it, computes the logprobs and advantages it needs and logs
  // its metrics and samples.
  Round finish_round(Round r, MetricsLog& samples, int64_t step, const RewardBatch& batch,
                     const std::vector<uint8_t>& truncated, const RolloutExtras& extras) {
    const double rollout_seconds = extras.rollout_seconds;
    const size_t rollout_peak = extras.rollout_peak;
    const int64_t completion_tokens = extras.completion_tokens;
    const size_t n = r.ids.size();
    const auto tr = Clock::now();
    const CombinedRewards scored = score_round(batch, extras);
    const double reward_seconds = seconds_since(tr);
    std::vector<double> totals(n);
    for (size_t c = 0; c < n; ++c) totals[c] = scored.total[c];
    non_finite_total += scored.num_non_finite;
    // Masks: every sampled token, except truncated completions when asked and completions
    // whose reward was not finite (never trained on).
    for (size_t c = 0; c < n; ++c) {
      const bool drop = (cfg.mask_truncated_completions && truncated[c]) ||
                        scored.rows[c] == RewardRow::non_finite;
      std::vector<uint8_t>& mask = r.mask.emplace_back(r.ids[c].size(), drop ? 0 : 1);
      // An environment's tokens are context, never trained (TRL's tool_mask).
      if (!r.sampled.empty())
        for (size_t k = 0; k < mask.size(); ++k) mask[k] &= r.sampled[c][k];
      r.num_items += std::accumulate(mask.begin(), mask.end(), int64_t(0));
    }
    const auto tl = Clock::now();
    const bool need_old = cfg.on_policy_exact || cfg.vllm_importance_sampling_correction ||
                          cfg.num_iterations > 1 ||
                          steps_per_generation > cfg.gradient_accumulation_steps;
    replay_changes = {};
    if (need_old) r.old_logp = all_logprobs(r, false);
    if (cfg.needs_reference()) r.ref_logp = all_logprobs(r, true);
    if (cfg.online_dpo) {
      std::vector<uint8_t> eos(n);
      for (size_t c = 0; c < n; ++c) eos[c] = contains_eos(r.ids[c]);
      r.rewards = apply_missing_eos_penalty(totals, eos, cfg.online_dpo->missing_eos_penalty);
      r.dpo_beta = cfg.online_dpo->beta_at(batch.trainer_state.value("epoch", 0.0));
    }
    if (!cfg.reward_clip_range.empty())  // TRL's RLOOTrainer: before the KL penalty
      for (double& t : totals)
        if (!std::isnan(t)) t = std::clamp(t, cfg.reward_clip_range[0], cfg.reward_clip_range[1]);
    if (cfg.kl_in_reward()) {
      // TRL's RLOOTrainer: the sequence's summed KL to the reference, at the rollout's
      // adapter, comes off its reward before the baseline (and the loss has no KL term).
      const std::vector<std::vector<double>> old = need_old ? r.old_logp : all_logprobs(r, false);
      double kl_sum = 0.0;
      int64_t kl_tokens = 0;
      for (size_t c = 0; c < n; ++c) {
        double kl = 0.0;
        for (size_t k = 0; k < r.ids[c].size(); ++k)
          if (r.mask[c][k]) kl += old[c][k] - r.ref_logp[c][k], ++kl_tokens;
        totals[c] -= cfg.beta * kl;
        kl_sum += kl;
      }
      // TRL's RLOO "kl": the per-token mean over the round's active tokens (the loss has none).
      r.metrics["kl"] = kl_sum / double(std::max<int64_t>(kl_tokens, 1));
    }
    std::vector<int64_t> num_tokens(n);
    for (size_t c = 0; c < n; ++c) num_tokens[c] = int64_t(r.ids[c].size());
    const Advantages adv =
        compute_advantages(totals, cfg.num_generations, cfg.advantage_options(), num_tokens);
    r.advantages = adv.advantages;
    nlohmann::json& m = r.metrics;
    // Routing replay: how many of the engine's per-layer choices the trainer's recomputation
    // (at the rollout's adapter) would have made differently.
    if (cfg.routing_replay && replay_changes.replayed > 0)
      m["routing/replay_fraction_changed"] =
          double(replay_changes.changed) / double(replay_changes.replayed);
    if (cfg.on_policy_exact) {
      // Nothing to correct: the trainer's logprobs are the engine's, which is checked.
      double worst = 0;
      for (size_t c = 0; c < n; ++c)
        for (size_t k = 0; k < r.ids[c].size(); ++k)
          if (r.sampled.empty() || r.sampled[c][k])
            worst = std::max(worst, std::fabs(r.old_logp[c][k] - r.engine_logp[c][k]));
      CHECK(worst == 0.0,
            "on_policy_exact: the trainer's logprob of a sampled token differs from the engine's "
            "by {} in round {}",
            worst, rounds);
      m["sampling/sampling_logp_difference/mean"] = 0.0;
      m["sampling/sampling_logp_difference/max"] = 0.0;
      m["sampling/token_prob_error/mean"] = 1.0;  // exp(0)
    } else if (cfg.vllm_importance_sampling_correction) {
      std::vector<int64_t> offsets{0};
      std::vector<uint8_t> mask;
      for (size_t c = 0; c < n; ++c) {
        offsets.push_back(offsets.back() + int64_t(r.ids[c].size()));
        mask.insert(mask.end(), r.mask[c].begin(), r.mask[c].end());
      }
      RolloutCorrectionConfig rc;
      rc.mode = cfg.vllm_importance_sampling_mode;
      rc.clip_max = cfg.vllm_importance_sampling_cap;
      const std::vector<double> old = flatten(r.old_logp, 0, n), eng = flatten(r.engine_logp, 0, n);
      const RolloutCorrection corr = compute_rollout_correction(offsets, old, eng, mask, rc);
      for (size_t c = 0; c < n; ++c)
        r.is_weight.emplace_back(corr.weight.begin() + offsets[c],
                                 corr.weight.begin() + offsets[c + 1]);
      m["sampling/sampling_logp_difference/mean"] = corr.stats.logp_difference_mean;
      m["sampling/sampling_logp_difference/max"] = corr.stats.logp_difference_max;
      m["sampling/token_prob_error/mean"] = corr.stats.token_prob_error_mean;
      m["sampling/importance_sampling_ratio/min"] = corr.stats.ratio_min;
      m["sampling/importance_sampling_ratio/mean"] = corr.stats.ratio_mean;
      m["sampling/importance_sampling_ratio/max"] = corr.stats.ratio_max;
    }
    const double logprob_seconds = seconds_since(tl);
    // TRL's generation metrics.
    // TRL's RLOOTrainer logs the rewards as scored, before the clip and the KL penalty (its
    // frac_reward_zero_std reads the shaped ones).
    const bool shaped = cfg.kl_in_reward() || !cfg.reward_clip_range.empty();
    const AdvantageStats scored_stats =
        shaped ? compute_advantages(std::vector<double>(scored.total.begin(), scored.total.end()),
                                    cfg.num_generations, cfg.advantage_options(), num_tokens)
                     .stats
               : adv.stats;
    m["reward"] = scored_stats.reward;
    m["reward_std"] = scored_stats.reward_std;
    m["frac_reward_zero_std"] = adv.stats.frac_reward_zero_std;
    for (const auto& [k, v] : scored.metrics()) m[k] = v;
    for (const auto& [k, v] : scored.logged_metrics) r.logged_metrics[k] = finite_or_null(v);
    completion_metrics(r.ids, truncated, m, r.sampled);
    for (const auto& [k, v] : extras.metrics.items()) m[k] = v;
    if (!cfg.online_dpo) {  // online DPO's loss reads the rewards, not advantages
      const auto [amin, amax] = std::minmax_element(r.advantages.begin(), r.advantages.end());
      m["advantages/mean"] = mean_of(r.advantages);
      m["advantages/min"] = *amin;
      m["advantages/max"] = *amax;
    }
    m["rewards/non_finite_total"] = non_finite_total;
    m["timing/rollout_seconds"] = rollout_seconds;
    m["timing/reward_seconds"] = reward_seconds;
    m["timing/rollout_logprob_seconds"] = logprob_seconds;
    m["rollout_tokens_per_second"] = double(completion_tokens) / std::max(rollout_seconds, 1e-9);
    m["peak_memory_bytes/rollout"] = rollout_peak;
    m["memory/standby_region_bytes"] = region.size();
    if (const ops::DeviceRegionInfo dr = ops::device_region_info(ctx); dr.on)
      m["memory/device_region_bytes"] = dr.committed;
    // samples.jsonl: the round's completions, or its first whole groups (num_completions_to_print),
    // with the columns the reward functions logged (TRL's completions table).
    const int64_t keep = cfg.samples_per_round(int64_t(n));
    for (auto it = scored.logged_extra.begin(); it != scored.logged_extra.end(); ++it)
      CHECK(!is_sample_field(it.key()),
            "grpo: a reward function logged the extra column '{}', a field samples.jsonl uses "
            "itself; log it under another name",
            it.key());
    for (int64_t c = 0; c < keep; ++c) {
      nlohmann::json s = {{"step", step},
                          {"prompt", batch.prompts[size_t(c)]},
                          {"completion", batch.completions[size_t(c)]},
                          {"reward", finite_or_null(totals[size_t(c)])},
                          {"advantage", r.advantages[size_t(c)]}};
      if (!batch.completion_messages.is_null())
        s["completion_messages"] = batch.completion_messages[size_t(c)];
      for (auto it = scored.logged_extra.begin(); it != scored.logged_extra.end(); ++it)
        s[it.key()] = (*it)[size_t(c)];
      samples.write(s);
      if (cfg.log_completions)
        fmt::print(stderr, "  [{}] reward {} | {} -> {}\n", step, s["reward"].dump(),
                   batch.prompts[size_t(c)], batch.completions[size_t(c)]);
    }
    // Online DPO keeps each prompt's pair side by side for its micro-batch.
    if (!cfg.online_dpo) shuffle(r, rounds - 1);
    return r;
  }

  // Reorders the round's completions by generation_batch_order (every per-completion field).
  void shuffle(Round& r, int64_t round) const {
    const std::vector<size_t> order =
        generation_batch_order(uint64_t(cfg.seed), round, r.ids.size());
    auto permute = [&](auto& v) {
      if (v.empty()) return;  // old_logp, ref_logp, is_weight when not computed
      std::remove_reference_t<decltype(v)> out;
      out.reserve(v.size());
      for (size_t i : order) out.push_back(std::move(v[i]));
      v = std::move(out);
    };
    permute(r.prompt);
    permute(r.prompt_ids);
    permute(r.ids);
    permute(r.engine_logp);
    permute(r.old_logp);
    permute(r.ref_logp);
    permute(r.is_weight);
    permute(r.mask);
    permute(r.sampled);
    permute(r.sequence_starts);
    permute(r.routing);
    permute(r.advantages);
  }

  // One evaluation after optimizer step `step` (0: before the first): every eval prompt's
  // num_generations_eval completions, in batches of per_device_eval_batch_size completions,
  // scored by the run's reward functions; TRL's generation metrics, each the mean of its
  // batches' values (TRL's log of its eval mode), as eval_<name>, and eval_runtime (seconds).
  // Its sampling streams are its own, keyed by the step; the round, the data position and the
  // round count that key training's streams are left as they are.
  nlohmann::json evaluate(int64_t step) {
    const auto t0 = Clock::now();
    const SamplingParams params = cfg.eval_sampling_params();
    const int64_t g = cfg.resolved_num_generations_eval();
    const size_t per_batch = size_t(cfg.per_device_eval_batch_size / g);
    MetricMeans means;
    engine->set_adapter_version(adapter.version());
    for (size_t first = 0; first < eval_data.size(); first += per_batch) {
      std::vector<size_t> prompts(std::min(per_batch, eval_data.size() - first));
      std::iota(prompts.begin(), prompts.end(), first);
      std::vector<GenerationRequest> requests;
      for (size_t i : prompts) {
        GenerationRequest q;
        q.prompt_ids = eval_data[i].ids;
        q.params = params;
        q.params.seed = rng_key(uint64_t(cfg.seed) ^ 0xe7a1u, uint64_t(step) * 1000003u + i);
        requests.push_back(std::move(q));
      }
      const std::vector<RequestOutput> outs = engine->generate(requests);
      std::vector<uint8_t> truncated;
      RewardBatch batch = reward_batch(eval_data, prompts, outs, tokenizer, truncated, "grpo");
      batch.trainer_state = trainer_state(step + 1);
      const CombinedRewards scored = rewards.score(batch);
      const std::vector<double> totals(scored.total.begin(), scored.total.end());
      const Advantages adv = compute_advantages(totals, g, cfg.scale_rewards);
      nlohmann::json m = {{"reward", adv.stats.reward},
                          {"reward_std", adv.stats.reward_std},
                          {"frac_reward_zero_std", adv.stats.frac_reward_zero_std}};
      for (const auto& [k, v] : scored.metrics()) m[k] = v;
      for (const auto& [k, v] : scored.logged_metrics) m[k] = v;
      completion_metrics(batch.completion_ids, truncated, m);
      for (const auto& [k, v] : m.items()) means.add(k, v.get<double>());
    }
    nlohmann::json batch_means = nlohmann::json::object(), out = nlohmann::json::object();
    means.into(batch_means);
    for (const auto& [k, v] : batch_means.items()) out["eval_" + k] = v;
    out["eval_runtime"] = seconds_since(t0);
    return out;
  }

  bool contains_eos(const std::vector<int32_t>& ids) const {
    return std::any_of(ids.begin(), ids.end(), [&](int32_t t) {
      return std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end();
    });
  }

  // A micro-step's loss and its metrics under TRL's names.
  struct MicroStep {
    double loss = 0;
    std::vector<std::pair<std::string, double>> metrics;
  };

  // One micro-step on completions [first, first + count) of the round: grads += d loss.
  MicroStep micro_step(const Round& r, size_t first, size_t count, const TensorView& grads) {
    if (cfg.online_dpo) return online_dpo_step(r, first, count, grads);
    double entropy = 0;
    const GrpoLossResult res = grpo_step(r, first, count, grads, entropy);
    MicroStep out;
    out.loss = res.loss;
    out.metrics = {{"entropy", entropy},
                   {"policy_loss", res.stats.policy_loss},
                   {"clip_ratio/low_mean", res.stats.clip_ratio_low_mean},
                   {"clip_ratio/high_mean", res.stats.clip_ratio_high_mean},
                   {"clip_ratio/region_mean", res.stats.clip_ratio_region_mean},
                   {"cispo_clip_ratio", res.stats.cispo_clip_ratio}};
    if (res.stats.kl) out.metrics.emplace_back("kl", *res.stats.kl);
    return out;
  }

  // Online DPO on the pairs of completions [first, first + count) (whole pairs: the round is
  // not shuffled and a micro-batch holds per_device_train_batch_size pairs).
  MicroStep online_dpo_step(const Round& r, size_t first, size_t count, const TensorView& grads) {
    CHECK(first % 2 == 0 && count % 2 == 0, "online dpo: a micro-batch splits a pair");
    const GrpoPacked p = pack(r, data, first, count);
    PassOptions o = pass_options();
    o.lora_dropout = float(cfg.training_lora_dropout());
    o.dropout_seed = rng_key(uint64_t(cfg.seed) ^ 0xd209u, uint64_t(rounds) * 4096 + first);
    pass->forward(p.view(), o);
    std::vector<double> logp;
    for (int64_t pos : p.token_pos) logp.push_back(pass->logprobs()[size_t(pos)]);
    const std::vector<double> ref = flatten(r.ref_logp, first, count);
    const std::vector<double> rewards(r.rewards.begin() + ptrdiff_t(first),
                                      r.rewards.begin() + ptrdiff_t(first + count));
    std::vector<uint8_t> eos;
    for (size_t c = first; c < first + count; ++c) eos.push_back(contains_eos(r.ids[c]));
    const OnlineDpoLossResult res =
        online_dpo_loss({p.offsets, logp, ref, rewards, eos}, cfg.online_dpo->loss_type, r.dpo_beta,
                        cfg.gradient_accumulation_steps);
    std::vector<float> dlogprob(p.ids.size(), 0.0f);
    for (size_t k = 0; k < p.token_pos.size(); ++k)
      dlogprob[size_t(p.token_pos[k])] = float(res.dloss_dlogp[k]);
    pass->backward(dlogprob, grads);
    return {res.loss, res.stats.named()};
  }

  // A GRPO-family micro-step (rl/grpo_loss.h).
  GrpoLossResult grpo_step(const Round& r, size_t first, size_t count, const TensorView& grads,
                           double& entropy) {
    const GrpoPacked p = pack(r, data, first, count);
    PassOptions o = pass_options();
    o.entropy = true;
    o.lora_dropout = float(cfg.training_lora_dropout());
    o.dropout_seed = rng_key(uint64_t(cfg.seed) ^ 0xd209u, uint64_t(rounds) * 4096 + first);
    pass->forward(p.view(), o);
    std::vector<double> logp, ent;
    std::vector<uint8_t> mask;
    for (size_t k = 0; k < p.token_pos.size(); ++k) {
      logp.push_back(pass->logprobs()[size_t(p.token_pos[k])]);
      ent.push_back(pass->entropies()[size_t(p.token_pos[k])]);
    }
    for (size_t c = first; c < first + count; ++c)
      mask.insert(mask.end(), r.mask[c].begin(), r.mask[c].end());
    const std::vector<double> old = flatten(r.old_logp, first, count);
    const std::vector<double> ref = flatten(r.ref_logp, first, count);
    const std::vector<double> isw = flatten(r.is_weight, first, count);
    const std::vector<double> adv(r.advantages.begin() + ptrdiff_t(first),
                                  r.advantages.begin() + ptrdiff_t(first + count));
    // TRL's get_high_entropy_mask over the micro-batch's active tokens (one process).
    const std::vector<uint8_t> entropy_mask =
        cfg.top_entropy_quantile < 1.0 ? top_entropy_mask(ent, mask, cfg.top_entropy_quantile)
                                       : std::vector<uint8_t>();
    GrpoBatch b;
    b.offsets = p.offsets;
    b.logp = logp;
    b.old_logp = old;
    b.ref_logp = ref;
    b.is_weight = isw;
    b.advantages = adv;
    b.mask = mask;
    b.entropy_mask = entropy_mask;
    GrpoLossConfig lc;
    lc.loss_type = cfg.loss_type;
    lc.importance_sampling_level = cfg.importance_sampling_level;
    lc.epsilon = cfg.epsilon;
    lc.epsilon_high = cfg.epsilon_high;
    lc.delta = cfg.delta;
    lc.sapo_temperature_neg = cfg.sapo_temperature_neg;
    lc.sapo_temperature_pos = cfg.sapo_temperature_pos;
    lc.beta = cfg.kl_in_reward() ? 0.0 : cfg.beta;
    lc.max_completion_length = cfg.max_completion_length;
    lc.gradient_accumulation_steps = cfg.gradient_accumulation_steps;
    lc.num_items_in_batch = r.num_items;
    GrpoLossResult res = grpo_loss(b, lc);
    double es = 0;
    int64_t en = 0;
    for (size_t k = 0; k < ent.size(); ++k)
      if (mask[k]) es += ent[k], ++en;
    entropy = en > 0 ? es / double(en) : 0.0;
    std::vector<float> dlogprob(p.ids.size(), 0.0f);
    for (size_t k = 0; k < p.token_pos.size(); ++k)
      dlogprob[size_t(p.token_pos[k])] = float(res.dloss_dlogp[k]);
    pass->backward(dlogprob, grads);
    return res;
  }

  nlohmann::json run_state() const {
    nlohmann::json s = {{"epoch", epoch},
                        {"next_prompt", next_prompt},
                        {"rounds", rounds},
                        {"non_finite_total", non_finite_total}};
    if (round) s["round"] = round->to_json();
    return s;
  }

  void load_state(const nlohmann::json& s, const std::string& checkpoint) {
    epoch = checkpoint_position(s, "epoch", checkpoint);
    next_prompt = checkpoint_position(s, "next_prompt", checkpoint);
    rounds = checkpoint_position(s, "rounds", checkpoint);
    non_finite_total = checkpoint_position(s, "non_finite_total", checkpoint);
    if (!s.contains("round")) return;
    Round::Shape shape;
    shape.completions = size_t(prompts_per_round * cfg.num_generations);
    shape.prompts = data.size();
    shape.vocab_size = model.config().vocab_size;
    shape.max_completion_length = cfg.max_completion_length;
    shape.micro_per_round = steps_per_generation * cfg.num_iterations;
    shape.needs_ref_logp = cfg.needs_reference();
    shape.online_dpo = cfg.online_dpo.has_value();
    shape.longest_prompt = longest_prompt();
    if (cfg.routing_replay) {
      shape.routing_row = model.config().num_layers * model.config().moe.top_k;
      shape.num_experts = model.config().moe.num_experts;
      for (const PromptExample& e : data) shape.prompt_lengths.push_back(e.ids.size());
    }
    try {
      round = Round::from_json(s.at("round"), shape);
    } catch (const std::exception& e) {
      RAISE("checkpoint '{}': its run state's round is malformed: {}", checkpoint, e.what());
    }
  }

  void run(const std::function<void(const GrpoStepInfo&)>& on_step, const StopRequest& stop) {
    prepare_run_dir(cfg.output_dir);
    if (!cfg.environment_server.empty() && !agents) {
      CHECK(tokenizer != nullptr && conversation != nullptr,
            "grpo: environment_server needs the model's tokenizer and chat template (the "
            "requests' messages are rendered with it)");
      AgentOptions ao;
      ao.command = cfg.environment_server;
      ao.timeout_s = cfg.environment_timeout_s;
      ao.sampling = sampling;
      ao.max_prompt_length = int64_t(longest_prompt());
      ao.max_completion_length = cfg.max_completion_length;
      ao.max_context = model.config().max_context;
      ao.http_threads = int(std::min<int64_t>(prompts_per_round * cfg.num_generations + 4, 1024));
      agents = std::make_unique<AgentEnvironment>(ao, *conversation, *tokenizer, eos_ids);
    } else if (cfg.multi_turn() && !environment) {
      CHECK(tokenizer != nullptr, "grpo: an environment needs the model's tokenizer");
      EnvironmentOptions eo;
      eo.command = cfg.environment_command();
      eo.timeout_s = cfg.environment_timeout_s;
      environment = std::make_unique<EnvironmentProcess>(eo);
    }
    const std::string resume = resume_checkpoint(cfg.resume_from_checkpoint, cfg.output_dir);
    if (!resume.empty())
      load_state(load_checkpoint(resume, ctx, model, adapter, *train_step), resume);
    StepMetrics metrics(cfg, train_step->global_step());
    MetricsLog samples(cfg.output_dir, train_step->global_step(), "samples.jsonl");
    // The gradients on the run's device, beside the masters: the optimizer steps them there.
    const int64_t num_params = adapter.master_params().numel();
    const DeviceBuffer grad_storage(ctx, size_t(num_params) * sizeof(float));
    const TensorView grads = grad_storage.view({num_params}, DType::f32);  // [P] f32
    const int64_t micro_per_round = steps_per_generation * cfg.num_iterations;
    const auto epoch_now = [&] {
      return double(epoch) + double(next_prompt) / double(data.size());
    };
    if (cfg.eval_on_start && train_step->global_step() == 0) {
      nlohmann::json line = evaluate(0);
      line["step"] = 0;
      metrics.write(line);
    }

    std::string saved = resume;  // the checkpoint of the last completed step, if any

    while (train_step->global_step() < total_steps && !stop.requested()) {
      const auto t0 = Clock::now();
      const int64_t step = train_step->global_step() + 1;
      const double epoch_before = epoch_now();
      reset_peak_memory(ctx);
      ops::fill_zero(ctx, grads);
      MetricMeans means;
      nlohmann::json line = nlohmann::json::object();
      nlohmann::json logged = nlohmann::json::object();  // by the reward functions
      double loss = 0, train_seconds = 0;
      int64_t train_tokens = 0;
      for (int64_t micro = 0; micro < cfg.gradient_accumulation_steps; ++micro) {
        if (!round || round->micro_used >= micro_per_round) {
          round = generate(samples, step);
          for (const auto& [k, v] : round->metrics.items()) line[k] = v;
          for (const auto& [k, v] : round->logged_metrics.items()) logged[k] = v;
        }
        const auto tt = Clock::now();
        const size_t slice = size_t(round->micro_used % steps_per_generation);
        const size_t first = slice * size_t(micro_batch);
        const size_t count = std::min(size_t(micro_batch), round->ids.size() - first);
        const MicroStep res = micro_step(*round, first, count, grads);
        ++round->micro_used;
        loss += res.loss;
        for (size_t c = first; c < first + count; ++c)
          train_tokens += int64_t(round->ids[c].size());
        for (const auto& [k, v] : res.metrics) means.add(k, v);
        train_seconds += seconds_since(tt);
      }
      const auto ts = Clock::now();
      // The optimizer's pass writes the masters and the engine's compute copies (CUDA) at
      // once: the next rollout runs on the new adapter with no copy.
      const StepResult r =
          train_step->step(ctx, adapter.master_params(), grads, loss, adapter.compute_params());
      if (!r.skipped) adapter.mark_updated();
      train_seconds += seconds_since(ts);
      means.into(line);
      const double seconds = seconds_since(t0);
      line["step"] = step;
      line["loss"] = finite_or_null(loss);
      line["grad_norm"] = finite_or_null(r.grad_norm);
      line["learning_rate"] = r.lr;
      line["skipped_steps"] = train_step->skipped_steps();
      line["epoch"] = epoch_now();
      line["timing/train_seconds"] = train_seconds;
      line["timing/step_seconds"] = seconds;
      line["train_tokens_per_second"] = double(train_tokens) / std::max(train_seconds, 1e-9);
      line["peak_memory_bytes/train"] = peak_memory_bytes(ctx);
      // TRL would average a logged "reward" into its own; a clash is more likely a mistake.
      for (const auto& [k, v] : logged.items()) {
        CHECK(!line.contains(k),
              "grpo: a reward function logged the metric '{}', a name fp8rl's own metrics use; "
              "log it under another name",
              k);
        line[k] = v;
      }
      const bool evaluated = cfg.should_evaluate(
          step, total_steps, std::floor(epoch_now()) > std::floor(epoch_before));
      if (evaluated) line.update(evaluate(step));
      metrics.write(line);
      if (on_step) {
        GrpoStepInfo info;
        info.step = step;
        info.total_steps = total_steps;
        info.reward = line.value("reward", std::nan(""));
        info.reward_std = line.value("reward_std", std::nan(""));
        // Online DPO logs TRL's objective/kl (the summed log-ratio to the reference).
        const char* kl_key = cfg.online_dpo ? "objective/kl" : "kl";
        info.has_kl = line.contains(kl_key);
        info.kl = line.value(kl_key, 0.0);
        info.loss = loss;
        info.seconds = seconds;
        info.tokens_per_second = double(train_tokens) / std::max(seconds, 1e-9);
        info.evaluated = evaluated;
        info.eval_reward = line.contains("eval_reward") && line["eval_reward"].is_number()
                               ? line["eval_reward"].get<double>()
                               : std::nan("");
        info.eval_seconds = line.value("eval_runtime", 0.0);
        on_step(info);
      }
      if ((cfg.save_steps > 0 && step % cfg.save_steps == 0) || step == total_steps) {
        save_checkpoint(cfg.output_dir, step, adapter, *train_step, run_state(), base_model_name);
        saved = checkpoint_path(cfg.output_dir, step);
      }
    }
    if (train_step->global_step() < total_steps)
      end_stopped_run(stop, train_step->global_step(), total_steps, cfg.output_dir, saved, [&] {
        save_checkpoint(cfg.output_dir, train_step->global_step(), adapter, *train_step,
                        run_state(), base_model_name);
      });
    adapter.save_peft(cfg.output_dir, base_model_name);
  }
};

GrpoTrainer::GrpoTrainer(Context& ctx, const Model& model, LoraAdapter& adapter,
                         const tok::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
                         std::vector<PromptExample> prompts, const GrpoConfig& config,
                         RewardSet rewards, std::string base_model_name)
    : impl_(std::make_unique<Impl>(ctx, model, adapter, tokenizer, std::move(eos_ids),
                                   std::move(prompts), config, std::move(rewards),
                                   std::move(base_model_name))) {}

GrpoTrainer::~GrpoTrainer() = default;

int64_t GrpoTrainer::total_steps() const {
  return impl_->total_steps;
}

RolloutMemoryPlan GrpoTrainer::memory_plan() const {
  const Impl& im = *impl_;
  return rollout_memory_plan(im.largest, *im.engine, im.region, im.reward_models, *im.train_step,
                             im.reference.get());
}

void GrpoTrainer::set_chat_template(const ChatTemplateConfig* chat) {
  Impl& im = *impl_;
  if (chat == nullptr || im.tokenizer == nullptr) {
    im.conversation.reset();
    return;
  }
  im.conversation = std::make_unique<ConversationTokens>(*chat, *im.tokenizer, im.eos_ids,
                                                         im.cfg.chat_template_kwargs);
}

void GrpoTrainer::set_eval_data(std::vector<PromptExample> eval_prompts) {
  CHECK(!eval_prompts.empty(), "grpo: the eval dataset has no prompts");
  impl_->eval_data = std::move(eval_prompts);
}

void GrpoTrainer::run(const std::function<void(const GrpoStepInfo&)>& on_step,
                      const StopRequest& stop) {
  CHECK(!impl_->cfg.evaluates() || !impl_->eval_data.empty(),
        "grpo: eval_strategy = {}{} but no eval prompts were given",
        eval_strategy_name(impl_->cfg.eval_strategy),
        impl_->cfg.eval_on_start ? " with eval_on_start" : "");
  impl_->run(on_step, stop);
}

}  // namespace fp8rl
