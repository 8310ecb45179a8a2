// An agent program as GRPO's environment (environment_server, rl/agent_environment.h): the
// trajectory an episode's chat completions make (one sequence while each prompt extends the
// last, another where the history was rewritten, the budget over all of them), and runs on the
// demo model with the example agent (examples/agent_server/agent.py, Python's urllib) checked
// with on_policy_exact (every sampled token's trainer logprob equals the engine's, so the
// recorded and packed sequences are the ones the engine sampled from), the endpoint's errors
// (unknown or ended episode, n > 1, a wrong key), streaming and the X-Episode-Id header, and bad
// programs stopping the run with the last checkpoint intact.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "cli/train_session.h"
#include "core/check.h"
#include "formats/safetensors.h"
#include "rl/agent_trajectory.h"
#include "rl/grpo_trainer.h"
#include "rl/prompt_data.h"
#include "train/run_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
const std::string kDemo = FP8RL_SOURCE_DIR "/examples/demo";
const std::string kAgent = FP8RL_SOURCE_DIR "/examples/agent_server/agent.py";

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---- The trajectory ----

TEST(AgentTrajectory, AGrowingConversationIsOneSequenceWithTheModelsTokensTrained) {
  AgentTrajectory t(/*max_prompt=*/8, /*max_completion=*/32);
  const std::vector<int32_t> p1 = {1, 2, 3}, c1 = {4, 5}, env = {6, 7}, c2 = {8, 9, 10};
  EXPECT_EQ(t.room(p1), 32);
  t.record(p1, c1, {-0.5f, -0.25f});
  const std::vector<int32_t> p2 = cat(cat(p1, c1), env);
  EXPECT_TRUE(t.extends(p2));
  EXPECT_EQ(t.room(p2), 32 - 2 - 2);
  t.record(p2, c2, {-1.0f, -2.0f, -3.0f});
  ASSERT_EQ(t.sequences().size(), 1u);
  const AgentSequence& s = t.sequences()[0];
  // The reference: the last request's prompt and its completion, the model's tokens marked.
  EXPECT_EQ(s.ids, cat(p2, c2));
  EXPECT_EQ(s.sampled, (std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ(s.logp, (std::vector<float>{0, 0, 0, -0.5f, -0.25f, 0, 0, -1, -2, -3}));
  EXPECT_EQ(t.prompt_length(), 3);
  EXPECT_EQ(t.completion_tokens(), 7);
  EXPECT_EQ(t.completions(), 2);
}

TEST(AgentTrajectory, ARewrittenHistoryStartsASequence) {
  AgentTrajectory t(8, 32);
  const std::vector<int32_t> p1 = {1, 2, 3}, c1 = {4, 5};
  t.record(p1, c1, {-0.5f, -0.25f});
  // The same conversation with one earlier token changed (the negative control of extends).
  const std::vector<int32_t> p2 = {1, 2, 9, 4, 5, 6};
  EXPECT_FALSE(t.extends(p2));
  EXPECT_TRUE(t.extends(cat(p1, c1)));
  EXPECT_EQ(t.room(p2), 32 - 2 - 6);  // the new sequence's prompt is context, counted whole
  t.record(p2, {7}, {-1.0f});
  ASSERT_EQ(t.sequences().size(), 2u);
  EXPECT_EQ(t.sequences()[0].ids, cat(p1, c1));
  EXPECT_EQ(t.sequences()[1].ids, cat(p2, {7}));
  EXPECT_EQ(t.sequences()[1].sampled, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(t.completion_tokens(), 2 + 7);
}

TEST(AgentTrajectory, AFirstPromptPastThePlanIsContextAndTheBudgetBindsEverySequence) {
  AgentTrajectory t(/*max_prompt=*/4, /*max_completion=*/10);
  const std::vector<int32_t> p1 = {1, 2, 3, 4, 5, 6};  // 2 tokens past the planned prompt
  EXPECT_EQ(t.room(p1), 8);
  t.record(p1, {7, 8, 9}, {0, 0, 0});
  EXPECT_EQ(t.prompt_length(), 4);
  EXPECT_EQ(t.completion_tokens(), 5);
  EXPECT_EQ(t.room({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), 4);
  EXPECT_EQ(t.room({1, 2, 3, 4, 5, 6}), -1);  // a new sequence of 6: none left
  EXPECT_THROW(t.record({1, 2, 3, 4, 5, 6}, {1}, {0}), Error);
}

TEST(AgentConfig, TheAgentProgramIsTheOnlyEnvironment) {
  const auto error = [](const std::function<void(GrpoConfig&)>& set) {
    GrpoConfig c;
    c.environment_server = "python3 agent.py";
    c.rewards = Json::array();
    set(c);
    try {
      c.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error([](GrpoConfig&) {}), "");  // its rewards are the run's
  EXPECT_NE(error([](GrpoConfig& c) {
              c.environment = "env.sh";
            }).find("`environment_server` with `environment`"),
            std::string::npos);
  EXPECT_NE(error([](GrpoConfig& c) { c.tools = {"m:f"}; }).find("with `tools`"),
            std::string::npos);
  EXPECT_NE(error([](GrpoConfig& c) { c.max_turns = 3; }).find("the agent program decides"),
            std::string::npos);
}

// ---- Runs on the demo model ----

fs::path temp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("fp8rl_agent_" + name + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

bool have_python() {
  return std::system("command -v python3 >/dev/null 2>&1") == 0;
}

GrpoConfig agent_config(const fs::path& out, const std::string& program) {
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
  c.max_completion_length = 48;
  c.max_prompt_length = 32;
  c.learning_rate = 5e-4;
  c.lr_scheduler_type = LrSchedulerType::constant;
  c.max_steps = 1;
  c.save_steps = 1;
  c.seed = 7;
  c.environment_server = program;
  c.rewards = Json::array();  // the program's rewards only
  return c;
}

std::vector<Json> read_lines(const fs::path& p) {
  std::vector<Json> out;
  std::ifstream f(p);
  for (std::string l; std::getline(f, l);) out.push_back(Json::parse(l));
  return out;
}

struct AgentRun {
  std::vector<float> params;
  std::vector<Json> metrics;
  Json round;  // the last checkpoint's
};

AgentRun run_agent_on_demo(const GrpoConfig& c) {
  cli::TrainSession ts(c, uint64_t(c.seed));
  const auto& chat = ts.tokenizer_setup().chat;
  PromptDataOptions d;
  d.max_prompt_length = c.max_prompt_length;
  std::vector<PromptExample> prompts =
      read_prompt_dataset(c.data, ts.tokenizer(), chat ? &*chat : nullptr, d);
  prompts.resize(16);
  GrpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), &ts.tokenizer(), ts.session().eos_ids(),
                      std::move(prompts), c, RewardSet(), "demo");
  trainer.set_chat_template(chat ? &*chat : nullptr);
  trainer.run();
  AgentRun r;
  const TensorView p = ts.adapter().master_params();
  r.params.assign(p.ptr<float>(), p.ptr<float>() + p.numel());
  r.metrics = read_lines(c.output_dir + "/metrics.jsonl");
  const auto st =
      SafetensorsFile::open(latest_checkpoint(c.output_dir) + "/trainer_state.safetensors");
  r.round = Json::parse(st->metadata().at("train.run_state")).value("round", Json());
  return r;
}

// Rewrites a checkpoint's run state (the safetensors header's metadata) through `edit`.
void edit_run_state(const fs::path& file, const std::function<void(Json&)>& edit) {
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  Json header = Json::parse(bytes.substr(8, n));
  Json state = Json::parse(header["__metadata__"]["train.run_state"].get<std::string>());
  edit(state);
  header["__metadata__"]["train.run_state"] = state.dump();
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t m = text.size();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&m), 8);
  out << text << bytes.substr(8 + n);
}

TEST(GrpoAgent, TheExampleAgentTrainsOnTheCompletionsItAskedFor) {
  if (!have_python()) GTEST_SKIP() << "no python3";
  for (const bool rewrite : {false, true}) {
    const fs::path dir = temp_dir(rewrite ? "rewrite" : "grow");
    GrpoConfig c =
        agent_config(dir, fmt::format("exec python3 '{}'{}", kAgent, rewrite ? " --rewrite" : ""));
    c.on_policy_exact = true;    // the trainer's logprob of every sampled token is the engine's
    c.steps_per_generation = 2;  // one round serves steps 1 and 2 (checkpoint-1 holds it)
    c.per_device_train_batch_size = 4;
    c.max_steps = 2;
    const AgentRun run = run_agent_on_demo(c);
    ASSERT_EQ(run.metrics.size(), 2u);
    const Json& m = run.metrics[0];
    const auto requests = m["env/agent/requests"].get<int64_t>();
    // One or two completions per episode (a second when the first answer is a number).
    EXPECT_GE(requests, 8) << m;
    EXPECT_LE(requests, 16) << m;
    EXPECT_EQ(m["env/agent/refused_requests"], 0) << m;
    EXPECT_TRUE(m.contains("rewards/environment/mean")) << m;
    EXPECT_EQ(m["sampling/sampling_logp_difference/max"], 0.0) << m;
    // A growing conversation is one sequence; a rewritten one starts a sequence per completion
    // after the first.
    const int64_t extra = m["env/agent/extra_sequences"].get<int64_t>();
    EXPECT_EQ(extra, rewrite ? requests - 8 : 0) << m;
    ASSERT_TRUE(run.round.is_object());
    int64_t starts = 0;
    for (const Json& s : run.round["sequence_starts"]) starts += int64_t(s.size());
    EXPECT_EQ(starts, extra);
    // Sampled tokens are trained; the context between them is not.
    for (size_t k = 0; k < run.round["ids"].size(); ++k) {
      const Json& sampled = run.round["sampled"][k];
      EXPECT_EQ(sampled[sampled.size() - 1], 1);
      for (size_t j = 0; j < sampled.size(); ++j)
        if (sampled[j] == 0) {
          EXPECT_EQ(run.round["engine_logp"][k][j], 0.0);
        }
    }
    if (!rewrite) continue;
    // The round's sequences survive a checkpoint: step 2 resumed from checkpoint-1 trains the
    // same adapter as the uninterrupted run.
    const fs::path again = temp_dir("rewrite_resumed");
    GrpoConfig r = c;
    r.output_dir = (again / "run").string();
    r.resume_from_checkpoint = (dir / "run" / "checkpoint-1").string();
    const AgentRun resumed = run_agent_on_demo(r);
    EXPECT_EQ(resumed.params, run.params);
    // The negative control: the same checkpoint with its sequence starts dropped packs each
    // episode as one sequence (the second prompt in the first one's context) and trains another
    // adapter.
    const fs::path dropped = temp_dir("rewrite_dropped");
    fs::copy(dir / "run" / "checkpoint-1", dropped / "checkpoint-1");
    edit_run_state(dropped / "checkpoint-1" / "trainer_state.safetensors", [](Json& state) {
      for (Json& st : state["round"]["sequence_starts"]) st = Json::array();
    });
    r.output_dir = (dropped / "run").string();
    r.resume_from_checkpoint = (dropped / "checkpoint-1").string();
    EXPECT_NE(run_agent_on_demo(r).params, run.params);
  }
}

// A program that probes the endpoint in the first round and misbehaves (`bad`) in the second.
std::string probing_agent(const fs::path& dir, const fs::path& log, const std::string& bad) {
  std::ofstream(dir / "agent.py") << fmt::format(R"PY(import json, os, sys, threading, time
import urllib.request, urllib.error
BASE, KEY = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
log = open({:?}, "a")
def post(body, key=KEY, headers={{}}):
    h = {{"Content-Type": "application/json", "Authorization": "Bearer " + key}}
    h.update(headers)
    r = urllib.request.Request(BASE + "/chat/completions", data=json.dumps(body).encode(), headers=h)
    try:
        with urllib.request.urlopen(r, timeout=600) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
def ask(eid, row, how):
    body = {{"model": eid, "messages": row["messages"], "max_tokens": 6}}
    if how == "header":
        body["model"] = "anything"
        return post(body, headers={{"X-Episode-Id": eid}})
    if how == "stream":
        body["stream"] = True
    return post(body)
resets, last = 0, []
for line in sys.stdin:
    resets += 1
    request = json.loads(line)
    eps = request["episodes"]
    if resets == 1:
        msgs = eps[0]["row"]["messages"]
        log.write(json.dumps({{
            "unknown": post({{"model": "nope", "messages": msgs}})[0],
            "n2": post({{"model": eps[0]["id"], "messages": msgs, "n": 2}})[0],
            "key": post({{"model": eps[0]["id"], "messages": msgs}}, key="wrong")[0]}}) + "\n")
    else:
        log.write(json.dumps({{"ended": post({{"model": last[0], "messages": [{{"role": "user", "content": "hi"}}]}})[0]}}) + "\n")
        bad = {:?}
        if bad == "exit": sys.exit(3)
        if bad == "hang": time.sleep(30)
        if bad == "garbage":
            print("this is not json", flush=True); continue
        if bad == "no-reward":
            print(json.dumps({{"episodes": [{{"id": e["id"]}} for e in eps]}}), flush=True); continue
        if bad == "no-completion":
            print(json.dumps({{"episodes": [{{"id": e["id"], "reward": 1}} for e in eps]}}), flush=True); continue
    statuses = {{}}
    def run(k, e):
        statuses[e["id"]] = ask(e["id"], e["row"], ["plain", "header", "stream"][k % 3])[0]
    threads = [threading.Thread(target=run, args=(k, e)) for k, e in enumerate(eps)]
    for t in threads: t.start()
    for t in threads: t.join()
    log.write(json.dumps({{"statuses": sorted(statuses.values())}}) + "\n")
    log.flush()
    last = [e["id"] for e in eps]
    print(json.dumps({{"episodes": [{{"id": e["id"], "reward": 0.5}} for e in eps]}}), flush=True)
)PY",
                                                 log.string(), bad);
  return fmt::format("exec python3 '{}'", (dir / "agent.py").string());
}

TEST(GrpoAgent, TheEndpointAnswersMistakesWithOpenAIErrorsAndStreams) {
  if (!have_python()) GTEST_SKIP() << "no python3";
  const fs::path dir = temp_dir("probe");
  GrpoConfig c = agent_config(dir, probing_agent(dir, dir / "log.jsonl", ""));
  c.max_steps = 2;
  const AgentRun run = run_agent_on_demo(c);
  ASSERT_EQ(run.metrics.size(), 2u);
  const std::vector<Json> log = read_lines(dir / "log.jsonl");
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0], Json::parse(R"({"unknown": 404, "n2": 400, "key": 401})"));
  // Plain, X-Episode-Id and streamed requests all answered.
  EXPECT_EQ(log[1]["statuses"], Json(std::vector<int>(8, 200)));
  EXPECT_EQ(log[2], Json::parse(R"({"ended": 404})"));  // an episode of the last round
  EXPECT_EQ(run.metrics[0]["env/agent/refused_requests"], 3);
  EXPECT_EQ(run.metrics[0]["env/agent/requests"], 8);
  EXPECT_DOUBLE_EQ(run.metrics[0]["reward"].get<double>(), 0.5);
}

TEST(GrpoAgent, BadProgramsStopTheRunWithTheCheckpointIntact) {
  if (!have_python()) GTEST_SKIP() << "no python3";
  const std::map<std::string, std::string> cases = {
      {"exit", "exited with status 3"},
      {"hang", "gave no answer within 1 s"},
      {"garbage", "not a JSON object"},
      {"no-reward", "needs a number 'reward'"},
      {"no-completion", "without asking for a completion"},
  };
  for (const auto& [bad, want] : cases) {
    const fs::path dir = temp_dir("bad_" + bad);
    GrpoConfig c = agent_config(dir, probing_agent(dir, dir / "log.jsonl", bad));
    c.max_steps = 2;
    c.environment_timeout_s = 1;
    std::string e;
    try {
      run_agent_on_demo(c);
    } catch (const Error& err) {
      e = err.what();
    }
    EXPECT_NE(e.find(want), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("environment_server `exec python3"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_TRUE(fs::exists(dir / "run" / "checkpoint-1" / "adapter_model.safetensors")) << bad;
    EXPECT_FALSE(fs::exists(dir / "run" / "checkpoint-2")) << bad;
  }
}

}  // namespace
}  // namespace fp8rl
