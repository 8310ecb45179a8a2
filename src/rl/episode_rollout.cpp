#include "rl/episode_rollout.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/rng.h"
#include "core/wall_clock.h"
#include "engine/engine.h"
#include "rl/conversation_tokens.h"
#include "rl/environment_process.h"
#include "rl/tool_turn.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

namespace {

// The tokens the episode may still add to its completion: the completion budget, and the
// model's context after the opening.
int64_t room(const EpisodeResult& e, const EpisodeOptions& o) {
  const int64_t completion = o.max_completion_length - int64_t(e.ids.size());
  const int64_t context = o.max_context - int64_t(e.prompt_ids.size() + e.ids.size());
  return std::min(completion, context);
}

}  // namespace

std::vector<EpisodeResult> run_episodes(Engine& engine, EnvironmentProcess& env,
                                        const ConversationTokens* chat,
                                        const tok::Tokenizer& tokenizer,
                                        const std::vector<EpisodeInput>& inputs,
                                        const EpisodeOptions& options, EpisodeStats& stats) {
  const TurnGenerator generate = [&](const std::vector<GenerationRequest>& requests,
                                     EpisodeStats& s) {
    const EngineStats before = engine.stats();
    std::vector<RequestOutput> outs = engine.generate(requests);
    const EngineStats& after = engine.stats();
    ++s.engine_calls;
    s.prefill_tokens += after.prefill_tokens - before.prefill_tokens;
    // The count restarts with the scheduler when the engine takes its KV pool back.
    s.prefix_hit_tokens +=
        after.prefix_hit_tokens -
        (after.region_takebacks == before.region_takebacks ? before.prefix_hit_tokens : 0);
    return outs;
  };
  return run_episodes(generate, env, chat, tokenizer, inputs, options, stats);
}

std::vector<EpisodeResult> run_episodes(const TurnGenerator& generate, EnvironmentProcess& env,
                                        const ConversationTokens* chat,
                                        const tok::Tokenizer& tokenizer,
                                        const std::vector<EpisodeInput>& inputs,
                                        const EpisodeOptions& options, EpisodeStats& stats) {
  std::vector<EpisodeResult> out(inputs.size());
  std::vector<EpisodeStart> starts;
  for (const EpisodeInput& in : inputs) starts.push_back({in.id, in.row});
  auto t0 = Clock::now();
  const EnvironmentReset reset = env.reset(starts);
  const std::vector<nlohmann::json>& openings = reset.openings;
  const nlohmann::json& tools = reset.tools;
  CHECK(tools.is_null() || chat != nullptr,
        "{}: the reset gives tools, and the model has no chat template to render them", env.who());
  stats.environment_seconds += seconds_since(t0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    EpisodeResult& e = out[i];
    if (openings[i].is_null() && tools.is_null()) {
      e.prompt_ids = inputs[i].prompt_ids;
      e.opening = inputs[i].prompt_messages;
    } else if (openings[i].is_null()) {
      // The row's own conversation, rendered with the tools.
      CHECK(!inputs[i].prompt_messages.is_null(),
            "{}: the reset gives tools, and episode \"{}\" opens with a text prompt: give the "
            "dataset chat rows (messages) or open each episode with messages from the reset",
            env.who(), inputs[i].id);
      e.prompt_ids = chat->opening(inputs[i].prompt_messages, tools);
      e.opening = inputs[i].prompt_messages;
    } else {
      CHECK(chat != nullptr,
            "{}: episode \"{}\" opens with messages, and the model has no chat template", env.who(),
            inputs[i].id);
      e.prompt_ids = chat->opening(openings[i], tools);
      e.opening = openings[i];
    }
    CHECK(
        options.max_prompt_length <= 0 || int64_t(e.prompt_ids.size()) <= options.max_prompt_length,
        "{}: episode \"{}\" opens with a conversation of {} tokens{}, more than the {} "
        "the run planned for (max_prompt_length, else the dataset's longest prompt)",
        env.who(), inputs[i].id, e.prompt_ids.size(), tools.is_null() ? "" : " with its tools",
        options.max_prompt_length);
    CHECK(!e.prompt_ids.empty(), "{}: episode \"{}\" opens with no tokens", env.who(),
          inputs[i].id);
    if (!e.opening.is_null()) e.messages = nlohmann::json::array();
    if (room(e, options) < 1) e.truncated = true;
  }
  std::vector<size_t> live;
  for (size_t i = 0; i < out.size(); ++i)
    if (!out[i].truncated) live.push_back(i);
  while (!live.empty()) {
    std::vector<GenerationRequest> requests;
    for (size_t i : live) {
      EpisodeResult& e = out[i];
      GenerationRequest q;
      q.prompt_ids = e.prompt_ids;
      q.prompt_ids.insert(q.prompt_ids.end(), e.ids.begin(), e.ids.end());
      q.params = options.sampling;
      q.params.n = 1;
      q.params.max_tokens = int(room(e, options));
      // A turn's stream of its own: the sampler's noise is keyed by the position in the
      // completion, which restarts every turn.
      q.params.seed = rng_key(inputs[i].seed, uint64_t(e.turns));
      requests.push_back(std::move(q));
    }
    const std::vector<RequestOutput> outs = generate(requests, stats);
    CHECK(outs.size() == requests.size(), "episodes: {} outputs for {} turn requests (a bug)",
          outs.size(), requests.size());
    std::vector<EpisodeTurn> turns;
    std::vector<uint8_t> cut(live.size());
    for (size_t k = 0; k < live.size(); ++k) {
      EpisodeResult& e = out[live[k]];
      const CompletionOutput& c = outs[k].completions.at(0);
      e.ids.insert(e.ids.end(), c.ids.begin(), c.ids.end());
      e.logp.insert(e.logp.end(), c.processed_logprobs.begin(), c.processed_logprobs.end());
      e.sampled.insert(e.sampled.end(), c.ids.size(), 1);
      e.last_ids = c.ids;
      e.last_completion = tokenizer.decode(c.ids, /*skip_special=*/true);
      ++e.turns;
      cut[k] = c.finish == FinishReason::length;
      if (!e.messages.is_null() && !tools.is_null()) {
        // The calls' markers may be special tokens: parsed from the text that keeps them.
        std::vector<int32_t> turn = c.ids;
        if (!turn.empty() && chat->ends_turn(turn.back())) turn.pop_back();
        e.messages.push_back(assistant_message(e.last_completion,
                                               tokenizer.decode(turn, /*skip_special=*/false),
                                               chat->tool_call_format()));
      } else if (!e.messages.is_null()) {
        e.messages.push_back({{"role", "assistant"}, {"content", e.last_completion}});
      }
      nlohmann::json conversation = e.opening.is_null() ? nlohmann::json(nullptr) : e.opening;
      if (!e.messages.is_null())
        for (const nlohmann::json& m : e.messages) conversation.push_back(m);
      turns.push_back({inputs[live[k]].id, e.last_completion, std::move(conversation)});
    }
    t0 = Clock::now();
    const EnvironmentStep step = env.step(turns);
    const std::vector<EpisodeStepReply>& replies = step.episodes;
    stats.environment_seconds += seconds_since(t0);
    for (const auto& [name, value] : step.metrics) {
      std::pair<double, int64_t>& sum = stats.environment_metrics[name];
      sum.first += value;
      ++sum.second;
    }
    std::vector<size_t> next;
    for (size_t k = 0; k < live.size(); ++k) {
      EpisodeResult& e = out[live[k]];
      const EpisodeStepReply& r = replies[k];
      if (r.reward) e.reward = e.reward.value_or(0.0) + *r.reward;
      if (cut[k]) e.truncated = true;
      if (r.done || cut[k] || e.turns >= options.max_turns) continue;
      CHECK(!e.opening.is_null(),
            "{}: episode \"{}\" goes on after a turn, and a text prompt has no conversation to "
            "add messages to: give the dataset chat rows (messages) or open each episode with "
            "messages from the reset",
            env.who(), turns[k].id);
      CHECK(chat != nullptr, "{}: episode \"{}\" goes on, and the model has no chat template",
            env.who(), turns[k].id);
      std::vector<int32_t> context = e.prompt_ids;
      context.insert(context.end(), e.ids.begin(), e.ids.end());
      const ConversationSuffix s = chat->suffix(context, turns[k].messages, r.messages, tools);
      if (!s.extends_exactly) ++e.rerender_mismatches;
      // The environment's tokens and at least one of the model's must fit; else the episode
      // ends here, its last messages left out (TRL drops a tool result that would overflow).
      if (int64_t(s.ids.size()) + 1 > room(e, options)) {
        e.truncated = true;
        continue;
      }
      e.ids.insert(e.ids.end(), s.ids.begin(), s.ids.end());
      e.logp.insert(e.logp.end(), s.ids.size(), 0.0f);
      e.sampled.insert(e.sampled.end(), s.ids.size(), 0);
      for (const nlohmann::json& m : r.messages) e.messages.push_back(m);
      next.push_back(live[k]);
    }
    live = std::move(next);
  }
  return out;
}

}  // namespace fp8rl
