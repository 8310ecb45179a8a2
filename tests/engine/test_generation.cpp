// The generation engine end to end on the CPU: greedy generation against HF transformers'
// generate (goldens), LoRA adapters against PEFT, and outputs that do not depend on
// scheduling (batching, chunked prefill, preemption, prefix sharing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "formats/npy.h"
#include "model/adapter.h"
#include "model/model_test_util.h"
#include "tolerances.h"

using namespace fp8rl;
using namespace fp8rl::test;

namespace {

nlohmann::json golden_generate(const std::string& arch) {
  std::ifstream f(golden_dir(arch) + "/generate.json");
  return nlohmann::json::parse(f);
}

struct Cpu {
  Arena arena;
  Context ctx{Device::cpu, &arena};
};

EngineOptions small_options() {
  EngineOptions o;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 64;
  return o;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// Max |logprob - golden| over a golden's prompts, and whether every token matched.
struct GoldenMatch {
  bool tokens_equal = true;
  double max_logprob_diff = 0;
};

GoldenMatch compare(const nlohmann::json& prompts, const std::vector<RequestOutput>& out) {
  GoldenMatch m;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const CompletionOutput& c = out[i].completions.at(0);
    const auto ids = prompts[i]["generated_ids"].get<std::vector<int32_t>>();
    const auto lps = prompts[i]["logprobs"].get<std::vector<double>>();
    if (c.ids != ids) m.tokens_equal = false;
    for (size_t t = 0; t < std::min(lps.size(), c.logprobs.size()); ++t)
      m.max_logprob_diff = std::max(m.max_logprob_diff, std::abs(c.logprobs[t] - lps[t]));
  }
  return m;
}

std::vector<GenerationRequest> golden_requests(const nlohmann::json& prompts, int max_tokens) {
  std::vector<GenerationRequest> reqs;
  for (const auto& p : prompts)
    reqs.push_back({p["prompt_ids"].get<std::vector<int32_t>>(), greedy(max_tokens)});
  return reqs;
}

class GreedyGolden : public ::testing::TestWithParam<std::string> {
 protected:
  // The MoE goldens come from tools/goldens/run_moe_goldens.sh and may not be committed yet.
  void SetUp() override {
    if (!std::filesystem::exists(golden_dir(GetParam()) + "/generate.json"))
      GTEST_SKIP() << "no generation golden in " << golden_dir(GetParam())
                   << ": make it with tools/goldens/run_moe_goldens.sh";
  }
};

// All of a golden's prompts (1, 5, 13 and 29 tokens) in one call: identical tokens and
// logprobs within kGenerateLogprob of HF's greedy fp32 eager generate.
TEST_P(GreedyGolden, MatchesHfGenerate) {
  const std::string arch = GetParam();
  const nlohmann::json g = golden_generate(arch);
  const Model m = load_model(golden_dir(arch), Fp8Scheme::off);
  Cpu cpu;
  Engine engine(cpu.ctx, m, nullptr, nullptr, {}, small_options());
  const auto out = engine.generate(golden_requests(g["prompts"], 12));
  const GoldenMatch r = compare(g["prompts"], out);
  EXPECT_TRUE(r.tokens_equal) << arch;
  EXPECT_LE(r.max_logprob_diff, kGenerateLogprob) << arch;
  std::printf("%s greedy vs HF generate: max |dlogprob| %.3g\n", arch.c_str(), r.max_logprob_diff);
  // Negative control: the FP8-row forward is another model at this precision.
  const Model m8 = load_model(golden_dir(arch), Fp8Scheme::row);
  Cpu cpu8;
  Engine e8(cpu8.ctx, m8, nullptr, nullptr, {}, small_options());
  const GoldenMatch r8 = compare(g["prompts"], e8.generate(golden_requests(g["prompts"], 12)));
  EXPECT_GT(r8.max_logprob_diff, 10 * kGenerateLogprob) << arch << ": the comparison cannot fail";
}

// The PEFT adapter of the golden, applied unmerged at generation time: logits equal PEFT's
// (and differ from the base's by far more), greedy tokens equal PEFT's generate.
TEST_P(GreedyGolden, AdapterMatchesPeft) {
  const std::string arch = GetParam();
  const nlohmann::json g = golden_generate(arch);
  Model m = load_model(golden_dir(arch), Fp8Scheme::off);
  const LoraAdapter adapter = LoraAdapter::load_peft(golden_dir(arch) + "/adapter", m);
  const Tensor ref = read_npy(golden_dir(arch) + "/adapter_logits.npy");
  const std::vector<int32_t> ids = golden_ids(arch);
  const double base_err = rel_max_diff(prefill_logits(m, ids), ref);
  const double err = rel_max_diff(prefill_logits(m, ids, false, &adapter), ref);
  EXPECT_LE(err, kHfFp32Logits) << arch;
  EXPECT_GT(base_err, 100 * kHfFp32Logits) << arch << ": the adapter changes nothing";
  std::printf("%s adapter logits vs PEFT %.3g (base %.3g)\n", arch.c_str(), err, base_err);
  Cpu cpu;
  Engine engine(cpu.ctx, m, &adapter, nullptr, {}, small_options());
  const GoldenMatch r = compare(g["adapter"]["prompts"],
                                engine.generate(golden_requests(g["adapter"]["prompts"], 12)));
  EXPECT_TRUE(r.tokens_equal) << arch;
  EXPECT_LE(r.max_logprob_diff, kGenerateLogprob) << arch;
}

// FP8 KV (e4m3 codes, a scale per token and kv head) against the unquantized KV of the same
// engine: greedy generation of the golden's prompts, the logprob of each token up to the first
// token where they part (a near-tie the quantization tips). The deviation is what FP8 KV costs
// (docs/PERFORMANCE.md "KV cache dtype"); it must be nonzero (the pool is quantized) and
// within kKvFp8Logprob (kKvFp8LogprobMoe for an MoE model).
TEST_P(GreedyGolden, Fp8KvCacheDeviation) {
  const std::string arch = GetParam();
  const nlohmann::json g = golden_generate(arch);
  const Model m = load_model(golden_dir(arch), Fp8Scheme::off);
  const auto run = [&](KvDType kv) {
    Cpu cpu;
    EngineOptions o = small_options();
    o.kv_dtype = kv;
    Engine engine(cpu.ctx, m, nullptr, nullptr, {}, o);
    return engine.generate(golden_requests(g["prompts"], 12));
  };
  const auto ref = run(KvDType::activation), fp8 = run(KvDType::f8e4m3);
  double dev = 0, sum = 0;
  int64_t compared = 0, total = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const CompletionOutput &a = ref[i].completions.at(0), &b = fp8[i].completions.at(0);
    total += int64_t(a.ids.size());
    for (size_t t = 0; t < a.ids.size() && t < b.ids.size(); ++t) {
      const double d = std::abs(double(a.logprobs[t]) - double(b.logprobs[t]));
      dev = std::max(dev, d);
      sum += d;
      ++compared;
      if (a.ids[t] != b.ids[t]) break;  // the logprob of the first differing pick still counts
    }
  }
  std::printf(
      "%s FP8 KV vs f32 KV greedy: max |dlogprob| %.4g, mean %.3g over %lld of %lld tokens\n",
      arch.c_str(), dev, sum / double(compared), (long long)compared, (long long)total);
  EXPECT_GT(dev, 0.0) << arch << ": the FP8 pool changes nothing";
  EXPECT_LT(dev, m.config().has_moe() ? kKvFp8LogprobMoe : kKvFp8Logprob) << arch;
}

INSTANTIATE_TEST_SUITE_P(Archs, GreedyGolden,
                         ::testing::Values("llama", "qwen2", "qwen3", "mistral", "gemma3"));
// Qwen3-MoE: its adapter targets the attention projections only (no LoRA on experts yet).
INSTANTIATE_TEST_SUITE_P(Moe, GreedyGolden, ::testing::Values("qwen3_moe"));

// A mixed workload with sampling: n samples per prompt, shared prefixes, all the filters.
std::vector<GenerationRequest> mixed_requests() {
  const std::vector<int32_t> base = golden_ids("qwen3");  // 32 ids
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r;
    // Requests 0..2 share the first 20 tokens (a full block and more), then differ.
    const size_t len = size_t(3 + 5 * i);
    r.prompt_ids.assign(base.begin(), base.begin() + long(std::min<size_t>(len, 20)));
    for (size_t k = r.prompt_ids.size(); k < len; ++k) r.prompt_ids.push_back(int32_t(7 + i + k));
    if (i < 3) {
      r.prompt_ids.assign(base.begin(), base.begin() + 20);
      r.prompt_ids.push_back(int32_t(30 + i));
    }
    r.params.n = 1 + i % 3;
    r.params.max_tokens = 9 + i;
    r.params.ignore_eos = true;
    r.params.temperature = 0.7 + 0.1 * i;
    r.params.top_k = i == 1 ? 20 : 0;
    r.params.top_p = i == 2 ? 0.9 : 1.0;
    r.params.min_p = i == 3 ? 0.05 : 0.0;
    r.params.repetition_penalty = i == 4 ? 1.3 : 1.0;
    r.params.logprobs = i == 5 ? 3 : 0;
    r.params.processed_logprobs = true;
    // Its own seed: the request's streams then do not depend on its index in a call, so it
    // can run alone (requests without a seed take their stream from the engine's seed and
    // their index).
    r.params.seed = 100 + uint64_t(i);
    reqs.push_back(r);
  }
  return reqs;
}

void expect_identical(const std::vector<RequestOutput>& a, const std::vector<RequestOutput>& b,
                      const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].completions.size(), b[i].completions.size()) << what;
    for (size_t s = 0; s < a[i].completions.size(); ++s) {
      const CompletionOutput& x = a[i].completions[s];
      const CompletionOutput& y = b[i].completions[s];
      EXPECT_EQ(x.ids, y.ids) << what << " request " << i << " sample " << s;
      EXPECT_EQ(x.logprobs, y.logprobs) << what << " request " << i << " sample " << s;
      EXPECT_EQ(x.processed_logprobs, y.processed_logprobs) << what;
      EXPECT_EQ(x.top_logprobs, y.top_logprobs) << what;
    }
  }
}

class Scheduling : public ::testing::TestWithParam<Fp8Scheme> {};

// Bit-identical tokens and logprobs whatever the scheduling: everything at once, one request
// at a time, a tiny token budget (chunked prefill), a pool so small that sequences are
// preempted and recomputed, and no prefix cache.
TEST_P(Scheduling, OutputsDoNotDependOnIt) {
  const Model m = load_model(golden_dir("qwen3"), GetParam());
  const std::vector<GenerationRequest> reqs = mixed_requests();
  Cpu c0;
  Engine all(c0.ctx, m, nullptr, nullptr, {}, small_options());
  const auto ref = all.generate(reqs);
  EXPECT_GT(all.stats().prefix_hit_tokens, 0) << "the shared prefixes were not shared";
  EXPECT_GT(all.stats().kv_blocks_peak_shared, 0) << "the n samples shared no block";

  std::vector<RequestOutput> alone;
  for (const GenerationRequest& r : reqs) {
    Cpu c;
    Engine e(c.ctx, m, nullptr, nullptr, {}, small_options());
    alone.push_back(e.generate({&r, 1})[0]);
  }
  expect_identical(alone, ref, "alone");

  EngineOptions chunked = small_options();
  chunked.max_num_batched_tokens = 7;
  Cpu c1;
  Engine ec(c1.ctx, m, nullptr, nullptr, {}, chunked);
  expect_identical(ec.generate(reqs), ref, "chunked prefill");

  EngineOptions tight = small_options();
  tight.kv_memory_bytes = 6 * KvPool::block_bytes(m.config(), c1.ctx);
  Cpu c2;
  Engine et(c2.ctx, m, nullptr, nullptr, {}, tight);
  expect_identical(et.generate(reqs), ref, "preempted");
  EXPECT_GT(et.stats().preemptions, 0) << "the tiny pool preempted nothing";

  EngineOptions no_cache = small_options();
  no_cache.prefix_caching = false;
  Cpu c3;
  Engine en(c3.ctx, m, nullptr, nullptr, {}, no_cache);
  expect_identical(en.generate(reqs), ref, "no prefix cache");
  EXPECT_EQ(en.stats().prefix_hit_tokens, 0);

  // Negative control: other seeds draw other tokens.
  std::vector<GenerationRequest> reseeded = reqs;
  for (GenerationRequest& r : reseeded) r.params.seed = *r.params.seed + 1000;
  Cpu c4;
  Engine eo(c4.ctx, m, nullptr, nullptr, {}, small_options());
  const auto diff = eo.generate(reseeded);
  bool any_differs = false;
  for (size_t i = 0; i < reqs.size(); ++i)
    any_differs = any_differs || diff[i].completions[0].ids != ref[i].completions[0].ids;
  EXPECT_TRUE(any_differs) << "the seed changes nothing";
}

// Asynchronous scheduling (EngineOptions::async_scheduling, on for CUDA) plans step k+1
// before step k's tokens are read, copies its input ids from k's samples on the device and
// drops the rows of sequences that stopped at k: the outputs are the synchronous engine's,
// bit for bit, also with chunked prefill, preemption, and stop ids ending samples at different
// steps. Not vacuous: steps were planned ahead and rows of stopped sequences were dropped.
TEST_P(Scheduling, AsyncEqualsSync) {
  const Model m = load_model(golden_dir("qwen3"), GetParam());
  auto run = [&](std::span<const GenerationRequest> reqs, EngineOptions o, bool async,
                 EngineStats* stats = nullptr) {
    o.async_scheduling = async;
    Cpu c;
    Engine e(c.ctx, m, nullptr, nullptr, {}, o);
    auto out = e.generate(reqs);
    if (stats != nullptr) *stats = e.stats();
    return out;
  };
  std::vector<GenerationRequest> reqs = mixed_requests();
  const auto ref = run(reqs, small_options(), false);
  EngineStats st;
  const auto async_out = run(reqs, small_options(), true, &st);
  expect_identical(async_out, ref, "async");
  EXPECT_GT(st.steps_planned_ahead, 0);
  // The results come back from one block of the sampler's outputs: a token among its row's top
  // logprobs (request 5 asks for 3) has exactly that logprob, and none exceeds the top one.
  int found = 0;
  for (const CompletionOutput& c : async_out[5].completions)
    for (size_t t = 0; t < c.ids.size(); ++t) {
      ASSERT_EQ(c.top_logprobs[t].size(), 3u);
      EXPECT_LE(c.logprobs[t], c.top_logprobs[t][0].second);
      for (const auto& [id, lp] : c.top_logprobs[t])
        if (id == c.ids[t]) {
          EXPECT_EQ(lp, c.logprobs[t]);
          ++found;
        }
    }
  EXPECT_GT(found, 0) << "no sampled token among its top logprobs: the check compared nothing";
  EngineOptions chunked = small_options();
  chunked.max_num_batched_tokens = 7;
  expect_identical(run(reqs, chunked, true), ref, "async, chunked prefill");
  EngineOptions tight = small_options();
  tight.kv_memory_bytes = 6 * KvPool::block_bytes(m.config(), Cpu().ctx);
  expect_identical(run(reqs, tight, true, &st), ref, "async, preempted");
  EXPECT_GT(st.preemptions, 0) << "the tiny pool preempted nothing";

  // Each request stops at one of the tokens its first sample drew (at a different step for
  // each), its other samples wherever they draw it, or at max_tokens.
  for (size_t i = 0; i < reqs.size(); ++i)
    reqs[i].params.stop_token_ids = {ref[i].completions[0].ids[2 + i % 4]};
  const auto stop_sync = run(reqs, small_options(), false);
  expect_identical(run(reqs, small_options(), true, &st), stop_sync, "async, stop ids");
  EXPECT_GT(st.rows_dropped, 0) << "no sequence stopped while its next step was queued";
  expect_identical(run(reqs, tight, true), stop_sync, "async, stop ids, preempted");
  int stopped = 0;
  for (const RequestOutput& r : stop_sync)
    for (const CompletionOutput& c : r.completions) stopped += c.finish == FinishReason::stop;
  EXPECT_GE(stopped, int(reqs.size()));
}

INSTANTIATE_TEST_SUITE_P(Schemes, Scheduling,
                         ::testing::Values(Fp8Scheme::off, Fp8Scheme::row, Fp8Scheme::block),
                         [](const auto& info) { return std::string(scheme_name(info.param)); });

// The per-token callback streams every sampled token of every sample, in order, while the
// run goes on: per (request, sample) the callback's tokens are the completion's ids, and the
// requests' tokens interleave (each came at its step, not all at the end).
TEST(Engine, TokenCallbackStreamsEveryToken) {
  const Model m = load_model(golden_dir("qwen3"), Fp8Scheme::row);
  const std::vector<GenerationRequest> reqs = mixed_requests();
  Cpu cpu;
  Engine e(cpu.ctx, m, nullptr, nullptr, {}, small_options());
  std::map<std::pair<size_t, int>, std::vector<int32_t>> streamed;
  std::vector<size_t> order;  // the request of each callback
  const auto out = e.generate(reqs, {}, [&](size_t request, int sample, int32_t token) {
    streamed[{request, sample}].push_back(token);
    order.push_back(request);
  });
  size_t total = 0;
  for (size_t i = 0; i < reqs.size(); ++i)
    for (size_t s = 0; s < out[i].completions.size(); ++s) {
      const std::pair<size_t, int> key(i, int(s));
      EXPECT_EQ(streamed[key], out[i].completions[s].ids) << i << " " << s;
      total += out[i].completions[s].ids.size();
    }
  EXPECT_EQ(streamed.size(), 2u + 3u + 1u + 2u + 3u + 1u);  // n = 1 + i % 3
  EXPECT_EQ(order.size(), total);
  // Request 0's last token comes after request 5's first: tokens arrive step by step.
  const size_t last0 = size_t(std::find(order.rbegin(), order.rend(), 0u) - order.rbegin());
  const size_t first5 = size_t(std::find(order.begin(), order.end(), 5u) - order.begin());
  EXPECT_LT(first5, order.size() - 1 - last0);
}

// KV made under one adapter version is never reused under another.
TEST(Engine, PrefixCacheKeyedByAdapterVersion) {
  const Model m = load_model(golden_dir("qwen3"), Fp8Scheme::off);
  Cpu cpu;
  Engine e(cpu.ctx, m, nullptr, nullptr, {}, small_options());
  GenerationRequest r{golden_ids("qwen3"), greedy(2)};
  e.generate({&r, 1});
  const int64_t hits0 = e.stats().prefix_hit_tokens;
  e.generate({&r, 1});
  const int64_t hits1 = e.stats().prefix_hit_tokens;
  EXPECT_GT(hits1, hits0) << "the same prompt again must hit the prefix cache";
  e.set_adapter_version(7);
  e.generate({&r, 1});
  EXPECT_EQ(e.stats().prefix_hit_tokens, hits1) << "KV of adapter version 0 reused under 7";
}

// More prompts x samples than max_num_seqs: admission counts a prompt of n samples as the n
// sequences its fork makes, so no step has more rows to sample than the plan holds (3 prompts x
// 4 samples under max_num_seqs 8 would otherwise give a step 12 rows).
TEST(Engine, SamplesOfManyPromptsStayWithinMaxNumSeqs) {
  const Model m = load_model(golden_dir("llama"), Fp8Scheme::off);
  Cpu cpu;
  EngineOptions o = small_options();
  o.max_num_seqs = 8;
  Engine e(cpu.ctx, m, nullptr, nullptr, {}, o);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r{{int32_t(3 + i), 7, 9}, greedy(5)};
    r.params.n = 4;
    r.params.temperature = 1.0;
    r.params.seed = uint64_t(i);
    reqs.push_back(r);
  }
  const auto out = e.generate(reqs);
  for (const RequestOutput& r : out) {
    ASSERT_EQ(r.completions.size(), 4u);
    for (const CompletionOutput& c : r.completions) EXPECT_EQ(c.ids.size(), 5u);
  }
}

// More samples of one prompt than max_num_seqs run in waves (as vLLM's do), and each sample is
// the one a single wave gives, bit for bit: its random stream keeps its sample index. Control:
// another seed gives other samples.
TEST(Engine, SamplesBeyondMaxNumSeqsRunInWaves) {
  const Model m = load_model(golden_dir("llama"), Fp8Scheme::off);
  GenerationRequest wide{{3, 7, 9}, greedy(6)};
  wide.params.n = 9;
  wide.params.temperature = 1.0;
  wide.params.seed = 5;
  wide.params.processed_logprobs = true;
  auto run = [&](int64_t max_num_seqs, const GenerationRequest& r) {
    Cpu cpu;
    EngineOptions o = small_options();
    o.max_num_seqs = max_num_seqs;
    Engine e(cpu.ctx, m, nullptr, nullptr, {}, o);
    return e.generate({&r, 1});
  };
  const auto waves = run(4, wide), one = run(16, wide);
  ASSERT_EQ(waves[0].completions.size(), 9u);
  for (size_t k = 0; k < 9; ++k) {
    EXPECT_EQ(waves[0].completions[k].ids, one[0].completions[k].ids) << k;
    EXPECT_EQ(waves[0].completions[k].processed_logprobs, one[0].completions[k].processed_logprobs)
        << k;
  }
  GenerationRequest other = wide;
  other.params.seed = 6;
  const auto reseeded = run(4, other);
  bool differs = false;
  for (size_t k = 0; k < 9; ++k)
    differs = differs || reseeded[0].completions[k].ids != one[0].completions[k].ids;
  EXPECT_TRUE(differs) << "the seed changes nothing";
}

// The samples of a prompt decode over their forked prompt blocks: the engine finds them as
// shared-prefix groups on the block manager's real tables (on every decode step once their
// prompt has a full block below the position), and not with the option off. The CPU forward
// ignores the description, so the outputs are the same either way (the description's shapes
// are checked by paged_attention on both).
TEST(Engine, FindsTheSamplesSharedPromptBlocks) {
  const Model m = load_model(golden_dir("llama"), Fp8Scheme::off);
  Cpu cpu;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 2; ++i) {
    GenerationRequest r;
    for (int j = 0; j < 37; ++j) r.prompt_ids.push_back(3 + (11 * i + 5 * j) % 200);
    r.params = greedy(6);
    r.params.n = 3;
    r.params.temperature = 1.0;
    r.params.seed = uint64_t(i);
    reqs.push_back(r);
  }
  EngineOptions o = small_options();
  o.max_num_batched_tokens = 128;  // both prefills in the first step
  o.shared_prefix_min_tokens = 0;  // the path itself, at any prefix length
  Engine on(cpu.ctx, m, nullptr, nullptr, {}, o);
  const auto out_on = on.generate(reqs);
  // The default minimum prefix (EngineOptions::shared_prefix_min_tokens, 256) is longer than
  // these prompts: no group forms.
  o.shared_prefix_min_tokens = EngineOptions{}.shared_prefix_min_tokens;
  Engine short_prompts(cpu.ctx, m, nullptr, nullptr, {}, o);
  const auto out_short = short_prompts.generate(reqs);
  o.shared_prefix_attention = false;
  Engine off(cpu.ctx, m, nullptr, nullptr, {}, o);
  const auto out_off = off.generate(reqs);
  // 37-token prompts: two full blocks below every decode position; 5 decode steps of 6 rows.
  EXPECT_EQ(on.stats().shared_prefix_steps, 5);
  EXPECT_EQ(on.stats().shared_prefix_seq_steps, 5 * 6);
  EXPECT_EQ(short_prompts.stats().shared_prefix_steps, 0);
  EXPECT_EQ(off.stats().shared_prefix_steps, 0);
  for (size_t i = 0; i < reqs.size(); ++i)
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(out_on[i].completions[k].ids, out_off[i].completions[k].ids);
      EXPECT_EQ(out_short[i].completions[k].ids, out_off[i].completions[k].ids);
    }
}

TEST(Engine, RejectsWhatCanNeverRun) {
  const Model m = load_model(golden_dir("llama"), Fp8Scheme::off);
  Cpu cpu;
  EngineOptions o = small_options();
  o.kv_memory_bytes = 2 * KvPool::block_bytes(m.config(), cpu.ctx);
  Engine e(cpu.ctx, m, nullptr, nullptr, {}, o);
  GenerationRequest big{std::vector<int32_t>(40, 5), greedy(4)};
  try {
    e.generate({&big, 1});
    FAIL() << "a request larger than the pool must fail";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("can never fit the KV pool"), std::string::npos)
        << err.what();
  }
  GenerationRequest bad{{1, 2, 300}, greedy(4)};
  EXPECT_THROW(e.generate({&bad, 1}), Error);
  GenerationRequest neg{{1, 2}, greedy(4)};
  neg.params.top_p = 0;
  EXPECT_THROW(e.generate({&neg, 1}), Error);
  GenerationRequest longctx{{1, 2}, greedy(1000)};
  EXPECT_THROW(e.generate({&longctx, 1}), Error);  // past max_position_embeddings
}

// Stop rules: eos ids end a completion (the stop token kept, finish "stop"), min_tokens
// bans them until enough tokens exist, max_tokens ends with "length".
TEST(Engine, StopRules) {
  const Model m = load_model(golden_dir("qwen3"), Fp8Scheme::off);
  const nlohmann::json g = golden_generate("qwen3");
  const auto prompt = g["prompts"][2]["prompt_ids"].get<std::vector<int32_t>>();
  const auto golden = g["prompts"][2]["generated_ids"].get<std::vector<int32_t>>();
  // The first greedy token from the 3rd on that did not occur before it, as the eos id.
  size_t k = 2;
  while (std::find(golden.begin(), golden.begin() + long(k), golden[k]) != golden.begin() + long(k))
    ++k;
  ASSERT_LT(k, golden.size());
  Cpu cpu;
  Engine e(cpu.ctx, m, nullptr, nullptr, {golden[k]}, small_options());
  GenerationRequest r{prompt, greedy(12)};
  r.params.ignore_eos = false;
  const auto out = e.generate({&r, 1});
  EXPECT_EQ(out[0].completions[0].ids,
            std::vector<int32_t>(golden.begin(), golden.begin() + long(k) + 1));
  EXPECT_EQ(out[0].completions[0].finish, FinishReason::stop);
  r.params.ignore_eos = true;
  const auto full = e.generate({&r, 1});
  EXPECT_EQ(full[0].completions[0].ids, golden);
  EXPECT_EQ(full[0].completions[0].finish, FinishReason::length);
  r.params.ignore_eos = false;
  r.params.min_tokens = int(k) + 2;
  const auto banned = e.generate({&r, 1});
  ASSERT_GE(banned[0].completions[0].ids.size(), k + 2);
  for (size_t t = 0; t < k + 2; ++t) EXPECT_NE(banned[0].completions[0].ids[t], golden[k]);
}

}  // namespace

namespace {

// A feed that hands the engine half of the mixed requests at its first poll, the other half at
// its third, and a long request that it aborts at its sixth; it stops the engine once every
// other request has finished and no sequence is held, and records what the engine reports.
struct ScriptedFeed : RequestFeed {
  std::vector<GenerationRequest> requests;
  GenerationRequest long_request;
  static constexpr int64_t kLongId = 100;
  int polls = 0;
  int samples_left = 0;
  std::map<std::pair<int64_t, int>, CompletionOutput> outputs;
  int tokens_of_long = 0, tokens_of_long_after_abort = 0;
  bool aborted_long = false;
  std::vector<int64_t> live_at_poll;

  bool poll(bool, int64_t live, std::vector<Arrival>& arrived,
            std::vector<int64_t>& aborted) override {
    ++polls;
    live_at_poll.push_back(live);
    const size_t half = requests.size() / 2;
    if (polls == 1) {
      for (size_t i = 0; i < half; ++i) arrived.emplace_back(int64_t(i), requests[i]);
      arrived.emplace_back(kLongId, long_request);
    }
    if (polls == 3)
      for (size_t i = half; i < requests.size(); ++i) arrived.emplace_back(int64_t(i), requests[i]);
    if (polls == 6) {
      aborted.push_back(kLongId);
      aborted_long = true;
    }
    // Stops once everything ended and the engine holds no sequence (or, if a sequence is
    // never released, after a bound, failing below).
    if (polls > 100000) return false;
    return polls < 6 || samples_left > 0 || live > 0;
  }
  void on_token(int64_t id, int sample, const CompletionOutput& out, bool done) override {
    if (id == kLongId) {
      ++tokens_of_long;
      tokens_of_long_after_abort += aborted_long;
      return;
    }
    outputs[{id, sample}] = out;
    samples_left -= done;
  }
  void on_rejected(int64_t id, const std::string& message) override {
    ADD_FAILURE() << "request " << id << " rejected: " << message;
  }
};

}  // namespace

// Engine::serve (continuous generation for a server): requests that join while others run get
// the same tokens and logprobs as generate() gives them (their streams keyed by their seeds),
// an aborted request stops getting tokens and its sequences are released, and the engine holds
// no sequence once everything ended; synchronous and asynchronous scheduling alike.
TEST(Engine, ServeEqualsGenerateAndReleasesAborted) {
  const Model m = load_model(golden_dir("qwen3"), Fp8Scheme::row);
  const std::vector<GenerationRequest> reqs = mixed_requests();
  Cpu c0;
  Engine ref_engine(c0.ctx, m, nullptr, nullptr, {}, small_options());
  const auto ref = ref_engine.generate(reqs);
  for (bool async : {false, true}) {
    EngineOptions o = small_options();
    o.async_scheduling = async;
    Cpu c;
    Engine e(c.ctx, m, nullptr, nullptr, {}, o);
    ScriptedFeed feed;
    feed.requests = reqs;
    for (const GenerationRequest& r : reqs) feed.samples_left += r.params.n;
    feed.long_request = {golden_ids("qwen3"), greedy(150)};
    e.serve(feed);
    for (size_t i = 0; i < reqs.size(); ++i)
      for (int s = 0; s < reqs[i].params.n; ++s) {
        const CompletionOutput& got = feed.outputs[{int64_t(i), s}];
        EXPECT_EQ(got.ids, ref[i].completions[size_t(s)].ids) << "async " << async << " " << i;
        EXPECT_EQ(got.logprobs, ref[i].completions[size_t(s)].logprobs) << i;
      }
    EXPECT_EQ(feed.samples_left, 0);
    EXPECT_TRUE(feed.aborted_long);
    EXPECT_GT(feed.tokens_of_long, 0) << "the long request never ran before its abort";
    EXPECT_LT(feed.tokens_of_long, 150) << "the abort came after the long request ended";
    EXPECT_EQ(feed.tokens_of_long_after_abort, 0);
    EXPECT_GT(*std::max_element(feed.live_at_poll.begin(), feed.live_at_poll.end()), 1);
    EXPECT_LE(feed.polls, 100000) << "sequences never released";
  }
}
