#include "rl/ppo_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/check.h"
#include "core/rng.h"
#include "core/wall_clock.h"
#include "engine/engine.h"
#include "ops/memory.h"
#include "ops/standby_region.h"
#include "rl/ppo_loss.h"
#include "rl/reference_model.h"
#include "rl/reward_model.h"
#include "rl/rollout_batch.h"
#include "rl/value_model.h"
#include "train/run_dir.h"
#include "train/step_metrics.h"
#include "train/train_step.h"
#include "train/training_arguments.h"

namespace fp8rl {

namespace {

// One update's rollout: B responses, per response i its tokens and value positions (the
// ragged layout of rl/ppo_loss.h).
struct Rollout {
  std::vector<size_t> prompt;             // [B] index into the dataset
  std::vector<std::vector<int32_t>> ids;  // [B][n_i] (EOS included)
  std::vector<int64_t> token_offsets{0};  // [B + 1]
  std::vector<int64_t> value_offsets;     // [B + 1]
  std::vector<double> logp, ref_logp;     // [N]
  std::vector<double> values;             // [V]
  std::vector<double> scores;             // [B] after missing_eos_penalty
  PpoAdvantages adv;
  nlohmann::json metrics = nlohmann::json::object();
};

// Responses `which` of a rollout packed for the policy's pass (each sequence its prompt then
// its response but the last token; targets the response's tokens) and for the value model's
// (its prompt then the response's first L - 1 tokens; rows the L value positions).
struct PpoPacked {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0};
  std::vector<int64_t> token_pos;  // [N] packed row of each response token
  std::vector<int32_t> value_ids;
  std::vector<int64_t> value_cu{0};
  std::vector<int64_t> value_rows;  // [V] packed row of each value position
  std::vector<int32_t> value_targets;
  PackedSequences policy() const { return {ids, targets, cu}; }
  PackedSequences value() const { return {value_ids, value_targets, value_cu}; }
};

PpoPacked pack(const std::vector<std::vector<int32_t>>& prompts,
               const std::vector<std::vector<int32_t>>& responses, int64_t response_length) {
  PpoPacked p;
  for (size_t i = 0; i < responses.size(); ++i) {
    const std::vector<int32_t>& prompt = prompts[i];
    const std::vector<int32_t>& r = responses[i];
    const int64_t start = int64_t(p.ids.size());
    p.ids.insert(p.ids.end(), prompt.begin(), prompt.end());
    p.ids.insert(p.ids.end(), r.begin(), r.end() - 1);
    p.targets.resize(p.ids.size(), -100);
    for (size_t j = 0; j < r.size(); ++j) {
      const int64_t pos = start + int64_t(prompt.size()) - 1 + int64_t(j);
      p.targets[size_t(pos)] = r[j];
      p.token_pos.push_back(pos);
    }
    p.cu.push_back(int64_t(p.ids.size()));
    // Value t is the state before token t: the hidden state at the token before it.
    const int64_t len = std::min<int64_t>(int64_t(r.size()) + 1, response_length);
    const int64_t vstart = int64_t(p.value_ids.size());
    p.value_ids.insert(p.value_ids.end(), prompt.begin(), prompt.end());
    p.value_ids.insert(p.value_ids.end(), r.begin(), r.begin() + (len - 1));
    for (int64_t t = 0; t < len; ++t)
      p.value_rows.push_back(vstart + int64_t(prompt.size()) - 1 + t);
    p.value_cu.push_back(int64_t(p.value_ids.size()));
  }
  p.value_targets.assign(p.value_ids.size(), -100);
  return p;
}

// Entries [offsets[i], offsets[i + 1]) of `v` for each i of `which`, concatenated.
std::vector<double> gather(const std::vector<double>& v, const std::vector<int64_t>& offsets,
                           const std::vector<size_t>& which) {
  std::vector<double> out;
  for (size_t i : which) out.insert(out.end(), v.begin() + offsets[i], v.begin() + offsets[i + 1]);
  return out;
}

double mean(const std::vector<double>& v) {
  return v.empty() ? std::nan("") : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

// torch's Tensor.var(): the unbiased variance (NaN for one value).
double unbiased_var(const std::vector<double>& v) {
  if (v.size() < 2) return std::nan("");
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / double(v.size() - 1);
}

int64_t padded(int64_t n) {
  return (n + 63) / 64 * 64;
}

}  // namespace

struct PpoTrainer::Impl {
  Context& ctx;
  const Model& model;
  LoraAdapter& policy;
  LoraAdapter& value;
  const tok::Tokenizer* tokenizer;
  std::vector<int32_t> eos_ids;
  std::vector<PromptExample> data;
  PpoConfig cfg;
  SamplingParams sampling;
  RewardSet rewards;
  std::string base_model_name;
  // The engine's KV pool and the passes (policy, reference, value) take turns in one region,
  // sized for the larger phase: one memory plan, as GRPO's.
  StandbyRegion region;

  int64_t total_updates = 1, steps_per_update = 1;
  // The optimizer's parameters and gradients: the policy's masters, then (from value_offset,
  // a multiple of 64) the value adapter's.
  int64_t policy_params = 0, value_offset = 0, value_params = 0, num_params = 0;
  std::unique_ptr<TrainStep> train_step;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<LoraAdapter> reference;  // the frozen starting adapter, or null: the base
  std::unique_ptr<LogprobPass> pass;
  std::unique_ptr<ValueModel> value_model;
  RewardModelsPlan reward_models;  // the reward models' scoring phase and bytes
  PassPlan largest;                // the larger pass (plan())
  int64_t epoch = 0, next_prompt = 0;
  std::vector<size_t> order;
  int64_t order_epoch = -1;

  Impl(Context& c, const Model& m, LoraAdapter& p, LoraAdapter& v, const tok::Tokenizer* t,
       std::vector<int32_t> eos, std::vector<PromptExample> d, const PpoConfig& g, RewardSet r,
       std::string base)
      : ctx(c),
        model(m),
        policy(p),
        value(v),
        tokenizer(t),
        eos_ids(std::move(eos)),
        data(std::move(d)),
        cfg(g),
        rewards(std::move(r)),
        base_model_name(std::move(base)),
        region(c) {
    cfg.validate();
    sampling = cfg.sampling_params();
    CHECK(!data.empty(), "ppo: the dataset has no prompts");
    CHECK(rewards.size() > 0, "ppo: no reward functions (set `rewards` or --reward-process)");
    CHECK(value.has_score_head(), "ppo: the value adapter has no score head");
    if (!cfg.reward_weights.empty()) rewards.set_weights(cfg.reward_weights);
    check_prompt_room(data, "ppo: the training data", cfg.response_length, model.config());
    total_updates = cfg.total_updates(data.size());
    steps_per_update = cfg.num_ppo_epochs * cfg.num_mini_batches;
    policy_params = policy.master_params().numel();
    value_offset = padded(policy_params);
    value_params = value.master_params().numel();
    num_params = value_offset + value_params;
    train_step =
        std::make_unique<TrainStep>(make_optimizer(cfg, num_params, ctx),
                                    train_step_config(cfg, total_updates * steps_per_update));
    EngineOptions eo;
    eo.kv_memory_bytes = size_t(cfg.kv_memory * double(1ull << 30));
    eo.kv_dtype = parse_kv_dtype(cfg.kv_dtype);
    eo.max_num_seqs = cfg.max_num_seqs;
    eo.max_num_batched_tokens = cfg.max_num_batched_tokens;
    eo.seed = uint64_t(cfg.seed);
    pass = std::make_unique<LogprobPass>(ctx, model, &policy, &region);
    reference = starting_adapter(cfg, cfg.reference_model, model, ctx);
    pass->set_reference(reference.get());
    value_model = std::make_unique<ValueModel>(
        ctx, model, value, &region, cfg.gradient_checkpointing, cfg.activation_offloading);
    // The scratch arena before the engine records its graphs over it, the region after the
    // engine laid its pool out in it (as GRPO does).
    largest = plan();
    // Reward models score an update's responses in the region too: one more phase.
    reward_models = plan_reward_models(rewards, region, cfg.batch_size(),
                                       int64_t(longest_prompt()) + cfg.response_length);
    ops::scratch_reserve(ctx, std::max(largest.scratch_bytes, reward_models.scoring.scratch_bytes));
    engine = std::make_unique<Engine>(ctx, model, &policy, tokenizer, eos_ids, eo, &region);
    region.reserve(std::max(largest.region_bytes(), reward_models.scoring.kv_bytes));
  }

  size_t longest_prompt() const {
    size_t longest = 0;
    for (const PromptExample& e : data) longest = std::max(longest, e.ids.size());
    return longest;
  }

  PassPlan plan() {
    // The rollout's chunks of local_rollout_forward_batch_size responses run the same passes
    // as the micro-batches: the larger of the two.
    const int64_t n =
        std::min(std::max(cfg.per_device_train_batch_size, cfg.local_rollout_forward_batch_size),
                 cfg.batch_size());
    std::vector<std::vector<int32_t>> prompts(size_t(n), std::vector<int32_t>(longest_prompt(), 0));
    std::vector<std::vector<int32_t>> responses(
        size_t(n), std::vector<int32_t>(size_t(cfg.response_length), 0));
    const PpoPacked p = pack(prompts, responses, cfg.response_length);
    PassOptions o = pass_options();
    o.entropy = true;
    const PassPlan a = pass->plan(p.policy(), o);
    const PassPlan b = value_model->plan(p.value(), p.value_rows);
    return a.region_bytes() + a.scratch_bytes >= b.region_bytes() + b.scratch_bytes ? a : b;
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
    while (int64_t(out.size()) < cfg.batch_size()) {
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

  std::vector<std::vector<int32_t>> prompt_ids(const Rollout& r, const std::vector<size_t>& which) {
    std::vector<std::vector<int32_t>> out;
    for (size_t i : which) out.push_back(data[r.prompt[i]].ids);
    return out;
  }
  std::vector<std::vector<int32_t>> response_ids(const Rollout& r,
                                                 const std::vector<size_t>& which) {
    std::vector<std::vector<int32_t>> out;
    for (size_t i : which) out.push_back(r.ids[i]);
    return out;
  }

  PassOptions pass_options() const {
    PassOptions o;
    o.temperature = float(cfg.temperature);
    o.checkpointing = cfg.gradient_checkpointing;
    o.offload = cfg.activation_offloading;
    return o;
  }

  bool has_eos(const std::vector<int32_t>& ids) const {
    return std::any_of(ids.begin(), ids.end(), [&](int32_t t) {
      return std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end();
    });
  }

  // Steps 1-6 of TRL's update: responses, scores, logprobs, values, rewards, advantages.
  Rollout rollout(int64_t update) {
    Rollout r;
    const auto t0 = Clock::now();
    r.prompt = next_prompts();
    std::vector<GenerationRequest> requests;
    for (size_t i = 0; i < r.prompt.size(); ++i) {
      GenerationRequest q;
      q.prompt_ids = data[r.prompt[i]].ids;
      q.params = sampling;
      q.params.seed = rng_key(uint64_t(cfg.seed), uint64_t(update) * 1000003u + i);
      requests.push_back(std::move(q));
    }
    engine->set_adapter_version(policy.version());
    reset_peak_memory(ctx);
    const std::vector<RequestOutput> outs = engine->generate(requests);
    const double rollout_seconds = seconds_since(t0);
    const size_t rollout_peak = peak_memory_bytes(ctx);
    reset_peak_memory(ctx);
    const auto tr = Clock::now();
    std::vector<uint8_t> truncated;
    RewardBatch batch = reward_batch(data, r.prompt, outs, tokenizer, truncated, "ppo");
    batch.trainer_state = {{"global_step", update - 1}, {"max_steps", total_updates}};
    const CombinedRewards scored = rewards.score(batch);
    const double reward_seconds = seconds_since(tr);
    const size_t reward_peak = peak_memory_bytes(ctx);
    std::vector<int64_t> lengths;
    int64_t response_tokens = 0;
    int64_t num_eos = 0;
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::vector<int32_t>& ids = outs[i].completions.at(0).ids;
      CHECK(!ids.empty(), "ppo: the engine returned an empty response");
      r.ids.push_back(ids);
      lengths.push_back(int64_t(ids.size()));
      response_tokens += int64_t(ids.size());
      r.token_offsets.push_back(r.token_offsets.back() + int64_t(ids.size()));
      for (int32_t t : ids)
        num_eos += std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end();
      double s = scored.total[i];
      CHECK(std::isfinite(s),
            "ppo: response {} of update {} has no finite reward ({}): PPO needs a score for "
            "every response",
            i, update, s);
      if (cfg.missing_eos_penalty && !has_eos(ids)) s -= *cfg.missing_eos_penalty;
      r.scores.push_back(s);
    }
    r.value_offsets = ppo_value_offsets(lengths, cfg.response_length);
    // The policy's, the reference's and the value model's numbers in chunks of
    // local_rollout_forward_batch_size responses; each phase's time and peak memory summed and
    // maxed over the chunks (both passes copy their results back: the clock sees the device).
    const size_t chunk = size_t(cfg.local_rollout_forward_batch_size);
    double logprob_seconds = 0, value_seconds = 0;
    size_t logprob_peak = 0, value_peak = 0;
    for (size_t first = 0; first < r.ids.size(); first += chunk) {
      std::vector<size_t> which(std::min(chunk, r.ids.size() - first));
      std::iota(which.begin(), which.end(), first);
      const PpoPacked p = pack(prompt_ids(r, which), response_ids(r, which), cfg.response_length);
      reset_peak_memory(ctx);
      const auto tl = Clock::now();
      for (bool ref : {false, true}) {
        PassOptions o = pass_options();
        o.reference = ref;
        pass->forward(p.policy(), o);
        for (int64_t pos : p.token_pos)
          (ref ? r.ref_logp : r.logp).push_back(pass->logprobs()[size_t(pos)]);
      }
      logprob_seconds += seconds_since(tl);
      logprob_peak = std::max(logprob_peak, peak_memory_bytes(ctx));
      reset_peak_memory(ctx);
      const auto tv = Clock::now();
      const std::vector<double> v = value_model->values(p.value(), p.value_rows);
      r.values.insert(r.values.end(), v.begin(), v.end());
      value_seconds += seconds_since(tv);
      value_peak = std::max(value_peak, peak_memory_bytes(ctx));
    }
    PpoRollout in;
    in.token_offsets = r.token_offsets;
    in.value_offsets = r.value_offsets;
    in.logp = r.logp;
    in.ref_logp = r.ref_logp;
    in.values = r.values;
    in.scores = r.scores;
    r.adv = ppo_advantages(in, cfg.advantage_config());
    // TRL's objective/ metrics; objective/entropy is the mean over responses of -sum logp.
    double neg_logp = 0;
    for (double l : r.logp) neg_logp -= l;
    nlohmann::json& m = r.metrics;
    m["objective/kl"] = r.adv.mean_kl;
    m["objective/entropy"] = neg_logp / double(r.ids.size());
    m["objective/non_score_reward"] = r.adv.mean_non_score_reward;
    m["objective/rlhf_reward"] = r.adv.rlhf_reward();
    m["objective/scores"] = r.adv.mean_score;
    m["val/num_eos_tokens"] = num_eos;
    for (const auto& [k, v] : scored.metrics()) m[k] = v;
    completion_metrics(r.ids, truncated, m);
    m["timing/rollout_seconds"] = rollout_seconds;
    m["timing/reward_seconds"] = reward_seconds;
    m["timing/rollout_logprob_seconds"] = logprob_seconds;
    m["timing/rollout_value_seconds"] = value_seconds;
    m["rollout_tokens_per_second"] = double(response_tokens) / std::max(rollout_seconds, 1e-9);
    m["peak_memory_bytes/rollout"] = rollout_peak;
    m["peak_memory_bytes/reward"] = reward_peak;
    m["peak_memory_bytes/rollout_logprob"] = logprob_peak;
    m["peak_memory_bytes/rollout_value"] = value_peak;
    m["memory/standby_region_bytes"] = region.size();
    if (const ops::DeviceRegionInfo dr = ops::device_region_info(ctx); dr.on)
      m["memory/device_region_bytes"] = dr.committed;
    return r;
  }

  // Views of the optimizer's [num_params] buffer: the policy's part and the value adapter's.
  TensorView policy_part(const TensorView& flat) const {
    return TensorView(flat.ptr<float>(), DType::f32, {policy_params}, flat.device);
  }
  TensorView value_part(const TensorView& flat) const {
    return TensorView(flat.ptr<float>() + value_offset, DType::f32, {value_params}, flat.device);
  }

  // The two adapters' masters from the optimizer's parameters, after a step.
  void store_masters(const TensorView& params) {
    Tensor host = Tensor::empty({num_params}, DType::f32);
    ops::copy(ctx, params, host.view());
    ops::synchronize(ctx);
    policy.set_masters(policy_part(host.view()));
    value.set_masters(value_part(host.view()));
  }
  void load_masters(const TensorView& params) {
    ops::fill_zero(ctx, params);
    ops::copy(ctx, policy.master_params(), policy_part(params));
    ops::copy(ctx, value.master_params(), value_part(params));
    ops::synchronize(ctx);
  }

  nlohmann::json run_state() const { return {{"epoch", epoch}, {"next_prompt", next_prompt}}; }

  void save(int64_t update) {
    save_checkpoint(cfg.output_dir, update, policy, *train_step, run_state(), base_model_name,
                    [&](const std::string& dir) {
                      value.save_peft((std::filesystem::path(dir) / kValueAdapterDir).string(),
                                      base_model_name);
                    });
  }

  void resume_from(const std::string& checkpoint) {
    const nlohmann::json s = load_checkpoint(checkpoint, ctx, model, policy, *train_step);
    epoch = checkpoint_position(s, "epoch", checkpoint);
    next_prompt = checkpoint_position(s, "next_prompt", checkpoint);
    const std::string vdir = (std::filesystem::path(checkpoint) / kValueAdapterDir).string();
    CHECK(std::filesystem::is_directory(vdir),
          "checkpoint '{}' has no value adapter ({}/): it was not written by fp8rl ppo", checkpoint,
          kValueAdapterDir);
    const LoraAdapter loaded = LoraAdapter::load_peft(vdir, model);
    CHECK(loaded.master_params().numel() == value.master_params().numel(),
          "checkpoint '{}': its value adapter ({} values) does not match this run's ({})",
          checkpoint, loaded.master_params().numel(), value.master_params().numel());
    value.set_masters(loaded.master_params());
    CHECK(train_step->global_step() % steps_per_update == 0,
          "checkpoint '{}': its optimizer took {} steps, not a whole number of updates of {} "
          "(num_ppo_epochs x num_mini_batches): it was written with other settings",
          checkpoint, train_step->global_step(), steps_per_update);
  }

  void run(const std::function<void(const PpoStepInfo&)>& on_step, const StopRequest& stop) {
    prepare_run_dir(cfg.output_dir);
    const std::string resume = resume_checkpoint(cfg.resume_from_checkpoint, cfg.output_dir);
    if (!resume.empty()) resume_from(resume);
    int64_t update = train_step->global_step() / steps_per_update;
    StepMetrics metrics(cfg, update);
    const DeviceBuffer param_storage(ctx, size_t(num_params) * sizeof(float));
    const DeviceBuffer grad_storage(ctx, size_t(num_params) * sizeof(float));
    const TensorView params = param_storage.view({num_params}, DType::f32);  // [P] f32
    const TensorView grads = grad_storage.view({num_params}, DType::f32);    // [P] f32
    load_masters(params);
    std::string saved = resume;
    while (update < total_updates && !stop.requested()) {
      const auto t0 = Clock::now();
      ++update;
      const Rollout r = rollout(update);
      reset_peak_memory(ctx);
      const auto tt = Clock::now();
      std::vector<double> approxkl, pg_clipfrac, pg_loss, vf_loss, vf_clipfrac, entropy, ratio;
      double lr = 0, grad_norm = 0, loss_sum = 0;
      // The training's split: the policy's passes, the value model's, the optimizer's steps
      // (each phase ends with a synchronize, so its clock holds its device work).
      double policy_seconds = 0, value_seconds = 0, optimizer_seconds = 0;
      int64_t train_tokens = 0;
      const size_t b = r.ids.size();
      const size_t mini = size_t(cfg.mini_batch_size());
      const size_t micro = size_t(cfg.per_device_train_batch_size);
      for (int64_t e = 0; e < cfg.num_ppo_epochs; ++e) {
        // TRL's np.random.permutation of the batch, from the stream of (seed, update, epoch).
        std::vector<size_t> perm(b);
        std::iota(perm.begin(), perm.end(), size_t(0));
        const uint64_t stream =
            rng_key(uint64_t(cfg.seed) ^ 0x9905u, uint64_t(update) * 4096u + uint64_t(e));
        for (size_t i = b; i > 1; --i)
          std::swap(perm[i - 1], perm[size_t(uniform01(stream, i) * float(i)) % i]);
        for (size_t first = 0; first < b; first += mini) {
          ops::fill_zero(ctx, grads);
          const size_t mini_end = std::min(b, first + mini);
          const double micros = double((mini_end - first + micro - 1) / micro);
          double loss = 0;
          for (size_t m0 = first; m0 < mini_end; m0 += micro) {
            const std::vector<size_t> which(
                perm.begin() + ptrdiff_t(m0),
                perm.begin() + ptrdiff_t(std::min(mini_end, m0 + micro)));
            const PpoPacked p =
                pack(prompt_ids(r, which), response_ids(r, which), cfg.response_length);
            const auto tp = Clock::now();
            PassOptions o = pass_options();
            o.entropy = true;
            pass->forward(p.policy(), o);
            std::vector<double> logp;
            double ent = 0;
            for (int64_t pos : p.token_pos) {
              logp.push_back(pass->logprobs()[size_t(pos)]);
              ent += pass->entropies()[size_t(pos)];
            }
            const PpoPolicyLoss pl =
                ppo_policy_loss(logp, gather(r.logp, r.token_offsets, which),
                                gather(r.adv.advantages, r.token_offsets, which), cfg.cliprange);
            std::vector<float> dlogprob(p.ids.size(), 0.0f);
            for (size_t k = 0; k < p.token_pos.size(); ++k)
              dlogprob[size_t(p.token_pos[k])] = float(pl.dloss_dlogp[k] / micros);
            pass->backward(dlogprob, policy_part(grads));
            ops::synchronize(ctx);
            policy_seconds += seconds_since(tp);
            train_tokens += int64_t(p.token_pos.size());
            const auto tv = Clock::now();
            const std::vector<double> v = value_model->values(p.value(), p.value_rows);
            const PpoValueLoss vl =
                ppo_value_loss(v, gather(r.values, r.value_offsets, which),
                               gather(r.adv.returns, r.value_offsets, which), cfg.cliprange_value);
            std::vector<double> dvalue(vl.dloss_dvalue.size());
            for (size_t k = 0; k < dvalue.size(); ++k)
              dvalue[k] = cfg.vf_coef * vl.dloss_dvalue[k] / micros;
            value_model->backward(dvalue, value_part(grads));
            ops::synchronize(ctx);
            value_seconds += seconds_since(tv);
            loss += (pl.loss + cfg.vf_coef * vl.loss) / micros;
            approxkl.push_back(pl.approxkl);
            pg_clipfrac.push_back(pl.clipfrac);
            pg_loss.push_back(pl.loss);
            vf_loss.push_back(vl.loss);
            vf_clipfrac.push_back(vl.clipfrac);
            entropy.push_back(ent / double(p.token_pos.size()));
            ratio.push_back(pl.ratio_mean);
          }
          const auto ts = Clock::now();
          const StepResult s = train_step->step(ctx, params, grads, loss);
          if (!s.skipped) store_masters(params);
          optimizer_seconds += seconds_since(ts);
          lr = s.lr;
          grad_norm = s.grad_norm;
          loss_sum += loss;
        }
      }
      const double train_seconds = seconds_since(tt);
      nlohmann::json line = r.metrics;
      line["step"] = update;
      line["episode"] = update * cfg.batch_size();
      line["epoch"] = double(update * cfg.batch_size()) / double(data.size());
      line["policy/approxkl_avg"] = finite_or_null(mean(approxkl));
      line["policy/clipfrac_avg"] = finite_or_null(mean(pg_clipfrac));
      line["loss/policy_avg"] = finite_or_null(mean(pg_loss));
      line["loss/value_avg"] = finite_or_null(mean(vf_loss));
      line["val/clipfrac_avg"] = finite_or_null(mean(vf_clipfrac));
      line["policy/entropy_avg"] = finite_or_null(mean(entropy));
      line["val/ratio"] = finite_or_null(mean(ratio));
      line["val/ratio_var"] = finite_or_null(unbiased_var(ratio));
      line["lr"] = lr;
      line["loss"] = finite_or_null(loss_sum / double(steps_per_update));
      line["grad_norm"] = finite_or_null(grad_norm);
      line["skipped_steps"] = train_step->skipped_steps();
      line["timing/train_seconds"] = train_seconds;
      line["timing/policy_train_seconds"] = policy_seconds;
      line["timing/value_train_seconds"] = value_seconds;
      line["timing/optimizer_seconds"] = optimizer_seconds;
      line["train_tokens_per_second"] = double(train_tokens) / std::max(train_seconds, 1e-9);
      const size_t train_peak = peak_memory_bytes(ctx);
      line["peak_memory_bytes/train"] = train_peak;
      // The step's peak: the largest phase's.
      size_t step_peak = train_peak;
      for (const char* k : {"peak_memory_bytes/rollout", "peak_memory_bytes/reward",
                            "peak_memory_bytes/rollout_logprob", "peak_memory_bytes/rollout_value"})
        step_peak = std::max(step_peak, r.metrics[k].get<size_t>());
      line["peak_memory_bytes/step"] = step_peak;
      const double seconds = seconds_since(t0);
      line["timing/step_seconds"] = seconds;
      metrics.write(line);
      if (on_step)
        on_step({update, total_updates, r.adv.mean_score, r.adv.mean_kl, mean(pg_loss),
                 mean(vf_loss), seconds});
      if ((cfg.save_steps > 0 && update % cfg.save_steps == 0) || update == total_updates) {
        save(update);
        saved = checkpoint_path(cfg.output_dir, update);
      }
    }
    if (update < total_updates)
      end_stopped_run(stop, update, total_updates, cfg.output_dir, saved, [&] { save(update); });
    policy.save_peft(cfg.output_dir, base_model_name);
    value.save_peft((std::filesystem::path(cfg.output_dir) / kValueAdapterDir).string(),
                    base_model_name);
  }
};

PpoTrainer::PpoTrainer(Context& ctx, const Model& model, LoraAdapter& policy, LoraAdapter& value,
                       const tok::Tokenizer* tokenizer, std::vector<int32_t> eos_ids,
                       std::vector<PromptExample> prompts, const PpoConfig& config,
                       RewardSet rewards, std::string base_model_name)
    : impl_(std::make_unique<Impl>(ctx, model, policy, value, tokenizer, std::move(eos_ids),
                                   std::move(prompts), config, std::move(rewards),
                                   std::move(base_model_name))) {}
PpoTrainer::~PpoTrainer() = default;

int64_t PpoTrainer::total_steps() const {
  return impl_->total_updates;
}
RolloutMemoryPlan PpoTrainer::memory_plan() const {
  const Impl& im = *impl_;
  return rollout_memory_plan(im.largest, *im.engine, im.region, im.reward_models, *im.train_step,
                             im.reference.get());
}
void PpoTrainer::run(const std::function<void(const PpoStepInfo&)>& on_step,
                     const StopRequest& stop) {
  impl_->run(on_step, stop);
}

}  // namespace fp8rl
