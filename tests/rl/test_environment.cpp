// Multi-turn GRPO with an environment process (rl/environment_process.h): the protocol's lines
// and the checks of its answers, the episode's tokens (the environment's cut from the chat
// template's render, re-renders compared), and runs on the demo model with a scripted
// environment in Python and the same in POSIX shell: what fp8rl writes, the loss mask, the
// rewards, the prefix cache between turns (against a run without it), truncation, and bad
// environments stopping the run with the last checkpoint intact.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include "cli/train_session.h"
#include "core/check.h"
#include "formats/safetensors.h"
#include "rl/conversation_tokens.h"
#include "rl/environment_process.h"
#include "rl/grpo_trainer.h"
#include "rl/reward_config.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/run_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
const std::string kDemo = FP8RL_SOURCE_DIR "/examples/demo";

// The question the scripted environments ask after the first and second turns.
constexpr const char* kQuestion = "What is 11+22?";

fs::path temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fp8rl_env_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- The protocol's lines ----

TEST(EnvironmentProtocol, RequestLinesCarryTheEpisodes) {
  const std::string reset =
      EnvironmentProcess::reset_line({{"0-0", {{"answer", "82"}}}, {"0-1", {{"answer", "7"}}}});
  EXPECT_EQ(reset, R"({"type":"reset","episodes":[{"id":"0-0","row":{"answer":"82"}},)"
                   R"({"id":"0-1","row":{"answer":"7"}}]})"
                   "\n");
  const Json msgs = Json::parse(R"([{"role": "user", "content": "hi"}])");
  const std::string step = EnvironmentProcess::step_line({{"0-1", "82", msgs}});
  EXPECT_EQ(Json::parse(step),
            Json::parse(R"({"type": "step", "episodes": [{"id": "0-1", "completion": "82",
                            "messages": [{"role": "user", "content": "hi"}]}]})"));
  EXPECT_EQ(step.back(), '\n');
}

TEST(EnvironmentProtocol, AnswersAreCheckedAndReorderedById) {
  const std::vector<std::string> ids = {"a", "b"};
  const auto steps = EnvironmentProcess::parse_step_reply(
                         R"({"episodes": [{"id": "b", "messages": [], "reward": null, "done": true},
                       {"id": "a", "messages": [{"role": "user", "content": "x"}],
                        "reward": 0.5, "done": false}]})",
                         ids, "env")
                         .episodes;
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].reward, 0.5);
  EXPECT_FALSE(steps[0].done);
  EXPECT_EQ(steps[0].messages.size(), 1u);
  EXPECT_FALSE(steps[1].reward.has_value());
  EXPECT_TRUE(steps[1].done);
  const auto opening =
      EnvironmentProcess::parse_reset_reply(
          R"({"episodes": [{"id": "a"}, {"id": "b", "messages": [{"role": "system", "content": "s"}]}]})",
          ids, "env")
          .openings;
  EXPECT_TRUE(opening[0].is_null());
  EXPECT_EQ(opening[1].size(), 1u);

  const auto step_error = [&](const std::string& line) {
    return error_of([&] { EnvironmentProcess::parse_step_reply(line, ids, "env"); });
  };
  const std::string a_ok = R"({"id": "a", "messages": [], "reward": 1, "done": true})";
  const std::map<std::string, std::string> bad = {
      {"not json", "not a JSON object"},
      {"[1, 2]", "expected one line {\"episodes\""},
      {R"({"episodes": [)" + a_ok + "]}", "answered 1 episodes to a step request of 2"},
      {R"({"episodes": [)" + a_ok + "," + a_ok + "]}", "answered twice"},
      {R"({"episodes": [)" + a_ok + R"(, {"id": "c", "messages": [], "reward": 1, "done": true}]})",
       "which this step request did not send"},
      {R"({"episodes": [)" + a_ok + R"(, {"id": "b", "messages": [], "reward": 1}]})",
       "has no 'done'"},
      {R"({"episodes": [)" + a_ok + R"(, {"id": "b", "reward": 1, "done": true}]})",
       "has no 'messages'"},
      {R"({"episodes": [)" + a_ok +
           R"(, {"id": "b", "messages": [], "reward": "1", "done": true}]})",
       "'reward' must be a number or null"},
      {R"({"episodes": [)" + a_ok + R"(, {"id": "b", "messages": [], "reward": 1, "done": 1}]})",
       "'done' must be true or false"},
      {R"({"episodes": [)" + a_ok +
           R"(, {"id": "b", "messages": [{"content": "x"}], "reward": 1, "done": false}]})",
       "with a string role"},
      {R"({"episodes": [)" + a_ok +
           R"(, {"id": "b", "messages": [], "reward": 1, "done": true, "x": 1}]})",
       "unknown key 'x'"},
      {R"({"episodes": [)" + a_ok + R"(, {"messages": [], "reward": 1, "done": true}]})",
       "has no string 'id'"},
  };
  for (const auto& [line, want] : bad) {
    const std::string e = step_error(line);
    EXPECT_NE(e.find(want), std::string::npos) << line << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;  // one line
  }
  EXPECT_NE(error_of([&] {
              EnvironmentProcess::parse_reset_reply(R"({"episodes": [{"id": "a"}]})", ids, "env");
            }).find("answered 1 episodes to a reset request of 2"),
            std::string::npos);
}

// ---- The episode's tokens ----

struct DemoText {
  tok::Tokenizer tokenizer = tok::Tokenizer::from_file(kDemo + "/model/tokenizer.json");
  ChatTemplateConfig chat = load_chat_template_config(kDemo + "/model");
  std::vector<int32_t> eos = {287, 285};  // generation_config.json's
};

TEST(ConversationTokens, TheEnvironmentsTokensExtendTheEpisodeExactly) {
  const DemoText d;
  const ConversationTokens conv(d.chat, d.tokenizer, d.eos, Json::object());
  const Json opening = Json::parse(R"([{"role": "user", "content": "What is 37+45?"}])");
  std::vector<int32_t> context = conv.opening(opening);
  // The model's turn as sampled: "82" and <|im_end|>.
  for (int32_t id : d.tokenizer.encode("82<|im_end|>")) context.push_back(id);
  Json conversation = opening;
  conversation.push_back({{"role", "assistant"}, {"content", "82"}});
  const Json appended = Json::parse(R"([{"role": "user", "content": "What is 82+13?"}])");
  const ConversationSuffix s = conv.suffix(context, conversation, appended);
  EXPECT_TRUE(s.extends_exactly);
  EXPECT_EQ(d.tokenizer.decode(s.ids),
            "\n<|im_start|>user\nWhat is 82+13?<|im_end|>\n<|im_start|>assistant\n");
  // The whole episode is the render of the whole conversation.
  std::vector<int32_t> all = context;
  all.insert(all.end(), s.ids.begin(), s.ids.end());
  Json whole = conversation;
  whole.push_back(appended[0]);
  EXPECT_EQ(all, conv.opening(whole));
}

// A template that re-renders an earlier assistant turn differently (as Qwen3's drops earlier
// reasoning): the episode keeps its tokens as sampled and the new messages are still exactly
// the template's; the difference is reported.
TEST(ConversationTokens, ATemplateThatRewritesHistoryIsReportedAndTheSuffixStaysExact) {
  DemoText d;
  d.chat.source =
      "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' }}"
      "{%- if message['role'] == 'assistant' and not loop.last %}{{- 'X' }}"
      "{%- else %}{{- message['content'] }}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  const ConversationTokens conv(d.chat, d.tokenizer, d.eos, Json::object());
  const Json opening = Json::parse(R"([{"role": "user", "content": "What is 37+45?"}])");
  std::vector<int32_t> context = conv.opening(opening);
  for (int32_t id : d.tokenizer.encode("82<|im_end|>")) context.push_back(id);
  Json conversation = opening;
  conversation.push_back({{"role", "assistant"}, {"content", "82"}});
  const ConversationSuffix s = conv.suffix(
      context, conversation, Json::parse(R"([{"role": "user", "content": "What is 82+13?"}])"));
  EXPECT_FALSE(s.extends_exactly);
  EXPECT_EQ(d.tokenizer.decode(s.ids),
            "\n<|im_start|>user\nWhat is 82+13?<|im_end|>\n<|im_start|>assistant\n");
  // A template that does not close the turns cannot be continued: an error naming it.
  d.chat.source = "{%- for message in messages %}{{- message['content'] }}{%- endfor %}";
  const ConversationTokens open_ended(d.chat, d.tokenizer, d.eos, Json::object());
  EXPECT_NE(error_of([&] {
              open_ended.suffix(context, conversation, Json::array());
            }).find("the template must close every turn"),
            std::string::npos);
}

// ---- Runs on the demo model ----

// The scripted environment: every episode opens with its row; after turn 1 and turn 2 the
// environment asks kQuestion; turn 3 ends the episode. A turn's reward is its text's length
// times 0.5, 0.25 and 1 in turns 1, 2 and 3. Each request line is appended to `log`. In Python,
// or the same in POSIX shell.
constexpr double kTurnWeight[] = {0.5, 0.25, 1.0};
std::string python_environment(const fs::path& dir, const fs::path& log) {
  std::ofstream(dir / "env.py") << fmt::format(R"PY(import json, sys
log = open({:?}, "a")
turn = 0
for line in sys.stdin:
    log.write(line)
    log.flush()
    request = json.loads(line)
    ids = [e["id"] for e in request["episodes"]]
    if request["type"] == "reset":
        turn = 0
        out = [{{"id": i}} for i in ids]
    else:
        turn += 1
        weight = {{1: 0.5, 2: 0.25}}.get(turn, 1)
        ask = [{{"role": "user", "content": {:?}}}] if turn < 3 else []
        out = [{{"id": e["id"], "messages": ask, "reward": weight * len(e["completion"]),
                "done": turn >= 3}} for e in request["episodes"]]
    print(json.dumps({{"episodes": out}}), flush=True)
)PY",
                                               log.string(), kQuestion);
  return fmt::format("exec python3 '{}'", (dir / "env.py").string());
}

// `bad`: what the shell environment does at the second reset ("exit", "hang", "garbage",
// "wrong-id") or at the first step after it ("no-done"); empty: nothing wrong.
std::string shell_environment(const fs::path& dir, const fs::path& log,
                              const std::string& bad = "") {
  std::ofstream(dir / "env.sh") << fmt::format(R"SH(#!/bin/sh
turn=0
resets=0
while IFS= read -r line; do
  printf '%s\n' "$line" >> '{}'
  ids=$(printf '%s' "$line" | grep -o '"id":"[0-9]*-[0-9]*"' | sed 's/"id"://')
  # The turns' texts, one a line, in the episodes' order (the demo model writes no quotes).
  texts=$(printf '%s' "$line" | grep -o '"completion":"[^"]*"' | sed 's/"completion":"//; s/"$//')
  case "$line" in
    '{{"type":"reset"'*)
      turn=0
      resets=$((resets + 1))
      if [ "$resets" = 2 ]; then
        case '{}' in
          exit) exit 3 ;;
          hang) sleep 30 ;;
          garbage) echo 'this is not json'; continue ;;
          wrong-id) ids=$(printf '%s\n' "$ids" | sed 's/-/-9/') ;;
        esac
      fi
      entry='{{"id":%s}}%.0s' ;;
    *)
      turn=$((turn + 1))
      if [ "$resets" = 2 ] && [ '{}' = no-done ]; then
        entry='{{"id":%s,"messages":[],"reward":%s}}'
      elif [ "$turn" = 1 ]; then
        entry='{{"id":%s,"messages":[{{"role":"user","content":"{}"}}],"reward":%s,"done":false}}'
      elif [ "$turn" = 2 ]; then
        entry='{{"id":%s,"messages":[{{"role":"user","content":"{}"}}],"reward":%s,"done":false}}'
      else
        entry='{{"id":%s,"messages":[],"reward":%s,"done":true}}'
      fi ;;
  esac
  out=''
  sep=''
  k=0
  for id in $ids; do
    k=$((k + 1))
    text=$(printf '%s\n' "$texts" | sed -n "${{k}}p")
    case "$turn" in
      1) reward=$(awk "BEGIN {{ print 0.5 * ${{#text}} }}") ;;
      2) reward=$(awk "BEGIN {{ print 0.25 * ${{#text}} }}") ;;
      *) reward=${{#text}} ;;
    esac
    out="$out$sep$(printf "$entry" "$id" "$reward")"
    sep=','
  done
  printf '{{"episodes":[%s]}}\n' "$out"
done
)SH",
                                               log.string(), bad, bad, kQuestion, kQuestion);
  return fmt::format("exec sh '{}'", (dir / "env.sh").string());
}

GrpoConfig episode_config(const fs::path& out, const std::string& environment) {
  GrpoConfig c;
  c.model = kDemo + "/model";
  c.data = kDemo + "/train.jsonl";
  c.output_dir = (out / "run").string();
  c.fp8 = "row";
  c.lora_r = 8;
  c.lora_alpha = 16;
  c.lora_dropout = 0.0;
  c.lora_target_modules = std::vector<std::string>{"all-linear"};
  c.num_generations = 4;
  c.per_device_train_batch_size = 8;  // 2 prompts x 4 episodes per step
  c.max_completion_length = 64;
  c.max_prompt_length = 32;
  c.learning_rate = 5e-4;
  c.lr_scheduler_type = LrSchedulerType::constant;
  c.max_steps = 1;
  c.save_steps = 1;
  c.seed = 7;
  c.environment = environment;
  c.max_turns = 3;
  c.rewards = Json::array();  // the environment's rewards only
  return c;
}

struct EpisodeRun {
  std::vector<float> params;
  std::vector<Json> metrics, samples, requests;
  Json round;  // the last checkpoint's round
};

std::vector<Json> read_lines(const fs::path& p) {
  std::vector<Json> out;
  std::ifstream f(p);
  for (std::string l; std::getline(f, l);) out.push_back(Json::parse(l));
  return out;
}

EpisodeRun run_episodes_on_demo(const GrpoConfig& c, const fs::path& log,
                                RewardSet rewards = RewardSet()) {
  cli::TrainSession ts(c, uint64_t(c.seed));
  const auto& chat = ts.tokenizer_setup().chat;
  PromptDataOptions d;
  d.max_prompt_length = c.max_prompt_length;
  std::vector<PromptExample> prompts =
      read_prompt_dataset(c.data, ts.tokenizer(), chat ? &*chat : nullptr, d);
  prompts.resize(16);
  GrpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), &ts.tokenizer(), ts.session().eos_ids(),
                      std::move(prompts), c, std::move(rewards), "demo");
  trainer.set_chat_template(chat ? &*chat : nullptr);
  trainer.run();
  EpisodeRun r;
  const TensorView p = ts.adapter().master_params();
  r.params.assign(p.ptr<float>(), p.ptr<float>() + p.numel());
  r.metrics = read_lines(c.output_dir + "/metrics.jsonl");
  r.samples = read_lines(c.output_dir + "/samples.jsonl");
  r.requests = read_lines(log);
  const auto st =
      SafetensorsFile::open(latest_checkpoint(c.output_dir) + "/trainer_state.safetensors");
  r.round = Json::parse(st->metadata().at("train.run_state")).at("round");
  return r;
}

// The Python environment's run, shared by the tests that compare with it.
const EpisodeRun& python_run() {
  static const EpisodeRun run = [] {
    if (std::system("command -v python3 >/dev/null 2>&1") != 0) return EpisodeRun{};
    const fs::path dir = temp_dir("py");
    return run_episodes_on_demo(episode_config(dir, python_environment(dir, dir / "log.jsonl")),
                                dir / "log.jsonl");
  }();
  return run;
}

TEST(GrpoEnvironment, EpisodesFollowTheProtocolAndTrainOnTheModelsTokensOnly) {
  const EpisodeRun& run = python_run();
  if (run.metrics.empty()) GTEST_SKIP() << "no python3";
  const DemoText d;
  // What fp8rl wrote: a reset of 8 episodes with their rows, then one step per turn for the
  // episodes still running, each with the turn's text and the conversation so far.
  ASSERT_GE(run.requests.size(), 2u);
  const Json& reset = run.requests[0];
  EXPECT_EQ(reset["type"], "reset");
  ASSERT_EQ(reset["episodes"].size(), 8u);
  std::set<std::string> ids;
  for (const Json& e : reset["episodes"]) {
    ids.insert(e["id"].get<std::string>());
    EXPECT_TRUE(e["row"].contains("answer")) << e;
    EXPECT_EQ(e["row"]["messages"][0]["role"], "user") << e;
  }
  EXPECT_EQ(ids.size(), 8u);
  std::set<std::string> live = ids;
  for (size_t k = 1; k < run.requests.size(); ++k) {
    const Json& step = run.requests[k];
    EXPECT_EQ(step["type"], "step");
    for (const Json& e : step["episodes"]) {
      EXPECT_TRUE(live.contains(e["id"].get<std::string>())) << e;
      const Json& m = e["messages"];
      // Opening, then per turn the assistant's message and, but after the last, kQuestion.
      ASSERT_EQ(m.size(), 2 * k) << e;
      EXPECT_EQ(m.back()["role"], "assistant");
      EXPECT_EQ(m.back()["content"], e["completion"]);
      if (k > 1) {
        EXPECT_EQ(m[2 * k - 2]["content"], kQuestion);
      }
    }
    live.clear();
    for (const Json& e : step["episodes"]) live.insert(e["id"].get<std::string>());
  }
  EXPECT_EQ(run.requests.size(), 4u);  // 3 turns (an episode may end early by truncation)
  const Json& m = run.metrics.at(0);
  for (const char* key : {"env/turns/mean", "env/turns/max", "env/truncated_episodes",
                          "timing/environment_seconds", "rewards/environment/mean"})
    EXPECT_TRUE(m.contains(key)) << key;
  EXPECT_EQ(m["env/turns/max"], 3.0);
  EXPECT_EQ(m["env/rerender_mismatches"], 0);  // the demo's template is prefix-preserving
  // The reward is the sum of the step rewards.
  ASSERT_EQ(run.samples.size(), 8u);
  std::set<double> rewards;
  for (const Json& s : run.samples) {
    double want = 0;
    size_t turn = 0;
    for (const Json& msg : s["completion_messages"])
      if (msg["role"] == "assistant")
        want += kTurnWeight[turn++] * double(msg["content"].get<std::string>().size());
    EXPECT_EQ(s["reward"].get<double>(), want) << s;
    rewards.insert(want);
  }
  EXPECT_GT(rewards.size(), 1u);  // the advantages are not all 0: the runs below train
  // The round the trainer saw: one sequence per episode, the environment's tokens (the
  // question and the next generation prompt) in it with mask 0, the model's with mask 1.
  const Json& r = run.round;
  const std::string env_text =
      fmt::format("\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n", kQuestion);
  int64_t trained = 0;
  ASSERT_EQ(r["ids"].size(), 8u);
  for (size_t c = 0; c < 8; ++c) {
    const std::vector<int32_t> ids_c = r["ids"][c];
    const std::vector<uint8_t> mask = r["mask"][c], sampled = r["sampled"][c];
    const std::vector<double> logp = r["engine_logp"][c];
    EXPECT_TRUE(r["prompt_ids"][c].empty());  // the row's prompt opened it
    EXPECT_EQ(mask, sampled);
    trained += std::accumulate(mask.begin(), mask.end(), int64_t(0));
    std::vector<int32_t> run_ids;
    for (size_t k = 0; k <= ids_c.size(); ++k) {
      if (k < ids_c.size() && sampled[k] == 0) {
        run_ids.push_back(ids_c[k]);
        EXPECT_EQ(logp[k], 0.0);
        continue;
      }
      if (!run_ids.empty()) {
        EXPECT_EQ(d.tokenizer.decode(run_ids), env_text);
      }
      run_ids.clear();
      if (k < ids_c.size()) {
        EXPECT_LT(logp[k], 0.0);
        // A model turn ends with <|im_end|> before the environment's tokens.
        if (k + 1 < ids_c.size() && sampled[k + 1] == 0) {
          EXPECT_EQ(ids_c[k], 287);
        }
      }
    }
  }
  EXPECT_EQ(r["num_items"], trained);
}

// The same environment in POSIX shell gives the same run: the protocol is the process's
// stdin and stdout, whatever the language. And between turns the engine finds the previous
// turn's KV in its prefix cache: with caching off (the control) the same episodes prefill every
// token of every turn again, and train the same adapter.
TEST(GrpoEnvironment, AShellEnvironmentTrainsTheSameAndTurnsContinueFromThePrefixCache) {
  const EpisodeRun& py = python_run();
  const fs::path dir = temp_dir("sh"), off_dir = temp_dir("sh_off");
  const EpisodeRun sh = run_episodes_on_demo(
      episode_config(dir, shell_environment(dir, dir / "log.jsonl")), dir / "log.jsonl");
  if (!py.metrics.empty()) {
    EXPECT_EQ(sh.requests, py.requests);
    EXPECT_EQ(sh.params, py.params);
    EXPECT_EQ(sh.metrics[0]["reward"], py.metrics[0]["reward"]);
  }
  GrpoConfig off = episode_config(off_dir, shell_environment(off_dir, off_dir / "log.jsonl"));
  off.enable_prefix_caching = false;
  const EpisodeRun uncached = run_episodes_on_demo(off, off_dir / "log.jsonl");
  EXPECT_EQ(uncached.params, sh.params);
  const Json& on = sh.metrics[0];
  const Json& no = uncached.metrics[0];
  EXPECT_EQ(no["env/prefix_hit_tokens"], 0);
  const int64_t hit = on["env/prefix_hit_tokens"], prefilled = on["env/prefill_tokens"];
  const int64_t all = no["env/prefill_tokens"];
  // Every prompt token of every turn is either found in the cache or prefilled.
  EXPECT_EQ(hit + prefilled, all);
  EXPECT_GT(hit, 0);
  // A turn prefills only what the previous turn did not compute: the full blocks of the
  // sequence so far come from the cache, so at most the tail of the last partial block (15
  // tokens), the previous turn's tokens and the environment's are computed again; the opening
  // once. Without the cache every turn prefills its whole sequence.
  const DemoText d;
  const ConversationTokens conv(d.chat, d.tokenizer, d.eos, Json::object());
  int64_t bound = 0;
  for (const Json& e : sh.requests[0]["episodes"])
    bound += int64_t(conv.opening(e["row"]["messages"]).size());
  for (const Json& s : sh.round["sampled"]) {
    const std::vector<uint8_t> bits = s;
    size_t last = bits.size();  // where the last model turn starts
    while (last > 0 && bits[last - 1] == 1) --last;
    int64_t turns = 0;
    for (size_t k = 0; k < bits.size(); ++k) turns += bits[k] == 1 && (k == 0 || bits[k - 1] == 0);
    bound += int64_t(last) + 15 * (turns - 1);
  }
  EXPECT_LE(prefilled, bound);
  EXPECT_GT(all, bound);  // the control computes more than the bound allows
}

// An episode whose next turn cannot fit max_completion_length ends there, counted as
// truncated, its last messages left out; mask_truncated_completions leaves it out of the loss.
TEST(GrpoEnvironment, EpisodesPastTheBudgetAreTruncatedCountedAndMasked) {
  const fs::path dir = temp_dir("trunc");
  GrpoConfig c = episode_config(dir, shell_environment(dir, dir / "log.jsonl"));
  c.max_completion_length = 16;  // a turn of 2-4 tokens, then the question's 18 do not fit
  c.mask_truncated_completions = true;
  const EpisodeRun run = run_episodes_on_demo(c, dir / "log.jsonl");
  const Json& m = run.metrics[0];
  EXPECT_EQ(m["env/truncated_episodes"], 8);
  EXPECT_EQ(m["env/turns/max"], 1.0);
  EXPECT_EQ(m["completions/clipped_ratio"], 1.0);
  EXPECT_EQ(run.round["num_items"], 0);
  for (const Json& s : run.round["sampled"])
    for (const Json& bit : s) EXPECT_EQ(bit, 1);  // the question was never appended
  for (const Json& s : run.samples)
    EXPECT_EQ(s["reward"].get<double>(), 0.5 * double(s["completion"].get<std::string>().size()));
}

// A checkpoint taken inside a round stores the episodes (their openings and which tokens the
// model sampled): the resumed run trains on them and ends with the same adapter, bit for bit.
TEST(GrpoEnvironment, ResumingInsideARoundContinuesItsEpisodesExactly) {
  const fs::path a = temp_dir("resume_a"), b = temp_dir("resume_b");
  const auto config = [](const fs::path& dir) {
    GrpoConfig c = episode_config(dir, shell_environment(dir, dir / "log.jsonl"));
    c.per_device_train_batch_size = 4;
    c.steps_per_generation = 2;  // one round of 8 episodes serves steps 1 and 2
    c.max_steps = 2;
    return c;
  };
  const EpisodeRun full = run_episodes_on_demo(config(a), a / "log.jsonl");
  GrpoConfig r = config(b);
  r.resume_from_checkpoint = (a / "run" / "checkpoint-1").string();
  const EpisodeRun resumed = run_episodes_on_demo(r, b / "log.jsonl");
  EXPECT_TRUE(resumed.requests.empty());  // the round came from the checkpoint
  ASSERT_FALSE(full.round["sampled"].empty());
  EXPECT_EQ(resumed.params, full.params);
}

// The configured reward functions score each episode's last turn beside the environment's
// rewards (weight 1, TRL's nansum), each logged under its name.
TEST(GrpoEnvironment, ConfiguredRewardsAddToTheEnvironments) {
  const fs::path dir = temp_dir("rewards");
  GrpoConfig c = episode_config(dir, shell_environment(dir, dir / "log.jsonl"));
  c.max_turns = 1;
  c.rewards = Json::parse(R"([{"type": "answer_match", "column": "answer", "mode": "numeric"}])");
  const EpisodeRun run = run_episodes_on_demo(c, dir / "log.jsonl", make_reward_set(c.rewards));
  const Json& m = run.metrics[0];
  EXPECT_TRUE(m.contains("rewards/answer_match/mean"));
  EXPECT_TRUE(m.contains("rewards/environment/mean"));
  EXPECT_DOUBLE_EQ(m["reward"].get<double>(), m["rewards/answer_match/mean"].get<double>() +
                                                  m["rewards/environment/mean"].get<double>());
  for (const Json& s : run.samples) {
    const std::string text = s["completion"];
    EXPECT_GE(s["reward"].get<double>(), 0.5 * double(text.size())) << s;
  }
}

// A dying, hanging or malformed environment stops the run with a clear error; the checkpoint
// of the last completed step stays intact.
TEST(GrpoEnvironment, BadEnvironmentsStopTheRunWithTheCheckpointIntact) {
  const std::map<std::string, std::string> cases = {
      {"exit", "exited with status 3"}, {"hang", "gave no answer within 1 s"},
      {"garbage", "not a JSON object"}, {"wrong-id", "which this reset request did not send"},
      {"no-done", "has no 'done'"},
  };
  for (const auto& [bad, want] : cases) {
    const fs::path dir = temp_dir("bad_" + bad);
    GrpoConfig c = episode_config(dir, shell_environment(dir, dir / "log.jsonl", bad));
    c.max_steps = 2;
    c.environment_timeout_s = 1;
    const std::string e = error_of([&] { run_episodes_on_demo(c, dir / "log.jsonl"); });
    EXPECT_NE(e.find(want), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("environment `exec sh"), std::string::npos) << e;  // names the process
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_TRUE(fs::exists(dir / "run" / "checkpoint-1" / "adapter_model.safetensors")) << bad;
    EXPECT_FALSE(fs::exists(dir / "run" / "checkpoint-2")) << bad;
  }
}

}  // namespace
}  // namespace fp8rl
