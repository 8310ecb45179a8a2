// TRL's `tools` in multi-turn GRPO: a turn's calls parsed into its assistant message in each
// template family's format (a bad call as tool_call_error), the optional protocol fields (the
// reset's tools, the step's metrics), the tools reaching the chat template's render, the
// fp8rl_reward.tools helper answering turn texts written here (the demo model writes no calls by
// itself), a GRPO run with `tools:` on the demo model, and the bad inputs: unknown module or
// function, a function without a docstring, the helper not installed, tools with an environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "cli/train_session.h"
#include "core/check.h"
#include "engine/engine.h"
#include "rl/conversation_tokens.h"
#include "rl/environment_process.h"
#include "rl/episode_rollout.h"
#include "rl/grpo_trainer.h"
#include "rl/reward_config.h"
#include "rl/tool_turn.h"
#include "rl/tools_environment.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
const std::string kDemo = FP8RL_SOURCE_DIR "/examples/demo";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- A turn's calls ----

TEST(ToolTurn, EachFamilysCallsBecomeOpenAIToolCalls) {
  struct Case {
    const char* raw;
    ToolCallFormat format;
  };
  for (const Case& c :
       {Case{"Let me see. <tool_call>{\"name\": \"multiply\", \"arguments\": {\"x\": 2, \"y\": "
             "3}}</tool_call>",
             ToolCallFormat::hermes},
        Case{"Let me see. [TOOL_CALLS][{\"name\": \"multiply\", \"arguments\": {\"x\": 2, \"y\": "
             "3}}]",
             ToolCallFormat::mistral},
        Case{"<|python_tag|>{\"name\": \"multiply\", \"parameters\": {\"x\": 2, \"y\": 3}}",
             ToolCallFormat::llama3}}) {
    const Json m = assistant_message("the text", c.raw, c.format);
    ASSERT_TRUE(m.contains("tool_calls")) << c.raw;
    EXPECT_EQ(m["tool_calls"], Json::parse(R"([{"type": "function", "function":
                  {"name": "multiply", "arguments": {"x": 2, "y": 3}}}])"))
        << c.raw;
    EXPECT_EQ(m["content"], c.format == ToolCallFormat::llama3 ? "" : "Let me see.");
    EXPECT_FALSE(m.contains("tool_call_error"));
  }
  // Negative control: plain text is plain content.
  const Json plain =
      assistant_message("The answer is 6.", "The answer is 6.", ToolCallFormat::hermes);
  EXPECT_EQ(plain, Json::parse(R"({"role": "assistant", "content": "The answer is 6."})"));
  // A marker that does not parse: the error for the environment, the text kept.
  for (const Case& c :
       {Case{"<tool_call>{\"name\": \"multiply\", \"arguments\": {\"x\": 2</tool_call>",
             ToolCallFormat::hermes},
        Case{"[TOOL_CALLS]multiply[ARGS]{", ToolCallFormat::mistral},
        Case{"<|python_tag|>{\"name\": 3}", ToolCallFormat::llama3}}) {
    const Json m = assistant_message("kept", c.raw, c.format);
    EXPECT_FALSE(m.contains("tool_calls")) << c.raw;
    ASSERT_TRUE(m.contains("tool_call_error")) << c.raw;
    EXPECT_NE(m["tool_call_error"].get<std::string>().find("does not parse"), std::string::npos);
    EXPECT_EQ(m["content"], "kept");
  }
}

// ---- The optional protocol fields ----

TEST(ToolsProtocol, TheResetsToolsAndTheStepsMetricsAreRead) {
  const std::vector<std::string> ids = {"a"};
  const EnvironmentReset r = EnvironmentProcess::parse_reset_reply(
      R"({"episodes": [{"id": "a"}], "tools": [{"type": "function", "function": {"name": "f"}}]})",
      ids, "env");
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools[0]["function"]["name"], "f");
  EXPECT_TRUE(EnvironmentProcess::parse_reset_reply(R"({"episodes": [{"id": "a"}]})", ids, "env")
                  .tools.is_null());
  const EnvironmentStep s = EnvironmentProcess::parse_step_reply(
      R"({"episodes": [{"id": "a", "messages": [], "reward": null, "done": true}],
          "metrics": {"tools/call_frequency": 1.5}})",
      ids, "env");
  EXPECT_EQ(s.metrics.at("tools/call_frequency"), 1.5);
  const std::string ok_step = R"({"id": "a", "messages": [], "reward": null, "done": true})";
  for (const auto& [line, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"episodes": [{"id": "a"}], "tools": {"name": "f"}})", "'tools' must be a list"},
           {R"({"episodes": [{"id": "a"}], "tools": ["f"]})", "tools[0] must be a JSON schema"},
           {R"({"episodes": [{"id": "a"}], "metrics": {}})",
            "may hold only 'episodes' and 'tools'"},
       })
    EXPECT_NE(error_of([&] { EnvironmentProcess::parse_reset_reply(line, ids, "env"); }).find(want),
              std::string::npos)
        << line;
  for (const auto& [line, want] : std::vector<std::pair<std::string, std::string>>{
           {R"({"episodes": [)" + ok_step + R"(], "metrics": [1]})", "'metrics' must be an object"},
           {R"({"episodes": [)" + ok_step + R"(], "metrics": {"m": "1"}})",
            "metric 'm' must be a number"},
           {R"({"episodes": [)" + ok_step + R"(], "tools": []})",
            "may hold only 'episodes' and 'metrics'"},
       })
    EXPECT_NE(error_of([&] { EnvironmentProcess::parse_step_reply(line, ids, "env"); }).find(want),
              std::string::npos)
        << line;
}

// ---- The template and the helper ----

// The demo's template, with the tools printed in a system turn and an assistant's calls written
// back in Hermes' format.
ChatTemplateConfig template_with_tools() {
  ChatTemplateConfig chat = load_chat_template_config(kDemo + "/model");
  chat.source =
      "{%- if tools %}{{- '<|im_start|>system\\nTools:' }}{%- for t in tools %}{{ ' ' + "
      "t.function.name }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}"
      "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] }}{%- for c in message.tool_calls or [] %}{{- '<tool_call>' + "
      "c.function.name + '</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endfor %}"
      "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  return chat;
}

// A module of tools in a fresh folder, and PYTHONPATH set to it and the repository's python/.
fs::path tool_module() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("fp8rl_tools_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    std::ofstream(d / "demo_tools.py") << R"PY(
def multiply(x: float, y: float):
    """
    Multiplies two numbers.

    Args:
        x: The first number
        y: The second number
    """
    return x * y


def undocumented(x: int):
    return x
)PY";
    return d;
  }();
  ::setenv("PYTHONPATH", (FP8RL_SOURCE_DIR "/python:" + dir.string()).c_str(), 1);
  ::setenv("PYTHONDONTWRITEBYTECODE", "1", 1);
  return dir;
}

bool have_python() {
  return std::system("command -v python3 >/dev/null 2>&1") == 0;
}

TEST(ToolsEnvironment, TheHelperAnswersATurnsCallsAndTheTemplateRendersTools) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  tool_module();
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(kDemo + "/model/tokenizer.json");
  const ChatTemplateConfig chat = template_with_tools();
  const ConversationTokens conv(chat, tokenizer, {287, 285}, nullptr);
  EXPECT_EQ(conv.tool_call_format(), ToolCallFormat::hermes);

  EnvironmentOptions o;
  o.command = tools_command({"demo_tools:multiply"});
  o.timeout_s = 60;
  EnvironmentProcess env(o);
  const Json row = Json::parse(R"({"messages": [{"role": "user", "content": "2 times 3?"}]})");
  const EnvironmentReset reset = env.reset({{"e0", row}, {"e1", row}});
  ASSERT_TRUE(reset.tools.is_array());
  EXPECT_EQ(reset.tools[0]["function"]["name"], "multiply");
  EXPECT_EQ(reset.tools[0]["function"]["parameters"]["required"], Json::parse(R"(["x", "y"])"));
  // The tools reach the render; without them (the negative control) they do not.
  const std::string with = tokenizer.decode(conv.opening(row["messages"], reset.tools));
  const std::string without = tokenizer.decode(conv.opening(row["messages"]));
  EXPECT_NE(with.find("Tools: multiply"), std::string::npos) << with;
  EXPECT_EQ(without.find("Tools:"), std::string::npos) << without;

  // Turn texts written here: a good call in e0, a call that does not parse in e1.
  std::vector<EpisodeTurn> turns;
  for (const auto& [id, raw] : std::vector<std::pair<std::string, std::string>>{
           {"e0", R"(<tool_call>{"name": "multiply", "arguments": {"x": 2, "y": 3}}</tool_call>)"},
           {"e1", R"(<tool_call>{"name": "multiply", "arguments": </tool_call>)"}}) {
    Json messages = row["messages"];
    messages.push_back(assistant_message(raw, raw, conv.tool_call_format()));
    turns.push_back({id, raw, messages});
  }
  const EnvironmentStep step = env.step(turns);
  ASSERT_EQ(step.episodes.size(), 2u);
  EXPECT_EQ(step.episodes[0].messages,
            Json::parse(R"([{"role": "tool", "name": "multiply", "content": "6"}])"));
  EXPECT_FALSE(step.episodes[0].done);
  ASSERT_EQ(step.episodes[1].messages.size(), 1u);
  EXPECT_NE(step.episodes[1].messages[0]["content"].get<std::string>().find("does not parse"),
            std::string::npos);
  EXPECT_EQ(step.metrics.at("tools/call_frequency"), 1.0);     // 2 calls over 2 episodes
  EXPECT_EQ(step.metrics.at("tools/failure_frequency"), 0.5);  // 1 of them failed

  // The tool's answer becomes the environment's tokens of the episode, the calls re-rendered.
  std::vector<int32_t> context = conv.opening(row["messages"], reset.tools);
  const std::vector<int32_t> turn = tokenizer.encode(
      R"(<tool_call>{"name": "multiply", "arguments": {"x": 2, "y": 3}}</tool_call><|im_end|>)",
      false);
  context.insert(context.end(), turn.begin(), turn.end());
  const ConversationSuffix s =
      conv.suffix(context, turns[0].messages, step.episodes[0].messages, reset.tools);
  EXPECT_EQ(tokenizer.decode(s.ids), "\n<|im_start|>tool\n6<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ToolsEnvironment, BadToolsStopTheRunWithOneLineNamingThem) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  tool_module();
  check_tools_helper({"demo_tools:multiply"});  // the positive control
  for (const auto& [specs, want] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"no_such_module:f"}, "No module named 'no_such_module'"},
           {{"demo_tools:nothing"}, "nothing"},
           {{"demo_tools:undocumented"}, "undocumented"},
           {{"demo_tools"}, "is not MODULE:FUNCTION"},
           {{"demo_tools:multiply; rm -rf x"}, "is not MODULE:FUNCTION"},
       }) {
    const std::string e = error_of([&] { check_tools_helper(specs); });
    EXPECT_NE(e.find(want), std::string::npos) << specs[0] << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  // The helper not installed: the error says how to install it.
  const std::string path = ::getenv("PYTHONPATH");
  ::setenv("PYTHONPATH", fs::temp_directory_path().c_str(), 1);
  const std::string e = error_of([&] { check_tools_helper({"demo_tools:multiply"}); });
  ::setenv("PYTHONPATH", path.c_str(), 1);
  EXPECT_NE(e.find("pip install ./python"), std::string::npos) << e;

  GrpoConfig c;
  c.model = kDemo + "/model";
  c.data = kDemo + "/train.jsonl";
  c.rewards = Json::parse(R"([{"type": "answer_match", "column": "answer"}])");
  c.tools = {"demo_tools:multiply"};
  c.environment = "python3 env.py";
  EXPECT_NE(error_of([&] { c.validate(); }).find("`tools` with an `environment`"),
            std::string::npos);
  c.environment.clear();
  c.max_turns = 3;
  EXPECT_NE(error_of([&] { c.validate(); }).find("max_tool_calling_iterations"), std::string::npos);
}

// ---- Episodes ----

// run_episodes with the real helper and template, its turns written by a scripted stand-in of
// the engine (by the episode's question and the turn): e0 calls multiply, then answers; e1 writes
// a call that does not parse, then calls multiply twice, the second time past the tool rounds.
TEST(ToolsEpisodes, CallsRunAndTheirResultsAreTheEnvironmentsTokens) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  tool_module();
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(kDemo + "/model/tokenizer.json");
  const ChatTemplateConfig chat = template_with_tools();
  const ConversationTokens conv(chat, tokenizer, {287, 285}, nullptr);
  EnvironmentOptions eo;
  eo.command = tools_command({"demo_tools:multiply"});
  eo.timeout_s = 60;
  EnvironmentProcess env(eo);
  const std::string call =
      R"(<tool_call>{"name": "multiply", "arguments": {"x": 2, "y": 3}}</tool_call>)";
  const std::map<std::pair<std::string, int>, std::string> script = {
      {{"2 times 3?", 0}, call},
      {{"2 times 3?", 1}, "6"},
      {{"bad call?", 0}, R"(<tool_call>{"name": "multiply"</tool_call>)"},
      {{"bad call?", 1}, call},
      {{"bad call?", 2}, call},
  };
  const std::vector<int32_t> end = tokenizer.encode("<|im_end|>", false);
  ASSERT_EQ(end.size(), 1u);
  const TurnGenerator scripted = [&](const std::vector<GenerationRequest>& requests,
                                     EpisodeStats&) {
    std::vector<RequestOutput> outs;
    for (const GenerationRequest& q : requests) {
      const std::string prompt = tokenizer.decode(q.prompt_ids);
      int turn = -1;
      for (size_t at = 0; (at = prompt.find("<|im_start|>assistant", at)) != std::string::npos;
           ++at)
        ++turn;
      const std::string question =
          prompt.find("2 times 3?") != std::string::npos ? "2 times 3?" : "bad call?";
      CompletionOutput c;
      c.ids = tokenizer.encode(script.at({question, turn}), false);
      c.ids.push_back(end[0]);
      c.processed_logprobs.assign(c.ids.size(), -0.5f);
      c.finish = FinishReason::stop;
      outs.push_back({{c}});
    }
    return outs;
  };
  std::vector<EpisodeInput> inputs;
  for (const char* q : {"2 times 3?", "bad call?"}) {
    EpisodeInput in;
    in.id = fmt::format("e{}", inputs.size());
    in.prompt_messages = Json::array({{{"role", "user"}, {"content", q}}});
    in.row = {{"messages", in.prompt_messages}};
    in.prompt_ids = conv.opening(in.prompt_messages);
    inputs.push_back(std::move(in));
  }
  EpisodeOptions o;
  o.max_turns = 3;  // max_tool_calling_iterations: 2
  o.max_completion_length = 256;
  o.max_context = 1024;
  EpisodeStats stats;
  const std::vector<EpisodeResult> out =
      run_episodes(scripted, env, &conv, tokenizer, inputs, o, stats);
  ASSERT_EQ(out.size(), 2u);
  // The opening is rendered with the tools.
  EXPECT_NE(tokenizer.decode(out[0].prompt_ids).find("Tools: multiply"), std::string::npos);
  // e0: the call, its result, the answer; the environment's tokens masked out.
  EXPECT_EQ(out[0].turns, 2);
  ASSERT_EQ(out[0].messages.size(), 3u);
  EXPECT_EQ(out[0].messages[0]["tool_calls"][0]["function"],
            Json::parse(R"({"name": "multiply", "arguments": {"x": 2, "y": 3}})"));
  EXPECT_EQ(out[0].messages[1],
            Json::parse(R"({"role": "tool", "name": "multiply", "content": "6"})"));
  EXPECT_EQ(out[0].messages[2], Json::parse(R"({"role": "assistant", "content": "6"})"));
  std::vector<int32_t> env_ids, model_ids;
  for (size_t k = 0; k < out[0].ids.size(); ++k)
    (out[0].sampled[k] ? model_ids : env_ids).push_back(out[0].ids[k]);
  EXPECT_EQ(tokenizer.decode(env_ids), "\n<|im_start|>tool\n6<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tokenizer.decode(model_ids), call + "<|im_end|>6<|im_end|>");
  // e1: the bad call answered as an error, then a call; the third turn ends the episode (its
  // results left out), as TRL's loop ends after the turn that follows the last tool round.
  EXPECT_EQ(out[1].turns, 3);
  ASSERT_EQ(out[1].messages.size(), 5u);
  EXPECT_TRUE(out[1].messages[0].contains("tool_call_error"));
  EXPECT_EQ(out[1].messages[1]["role"], "tool");
  EXPECT_NE(out[1].messages[1]["content"].get<std::string>().find("'error'"), std::string::npos);
  EXPECT_EQ(out[1].messages[3]["content"], "6");
  EXPECT_TRUE(out[1].messages[4].contains("tool_calls"));
  // The helper's metrics, summed over the three step answers: calls per episode 1, 1/2, 1;
  // failed calls per call 1/2, 0, 0.
  EXPECT_EQ(stats.environment_metrics.at("tools/call_frequency"), std::make_pair(2.5, int64_t{3}));
  EXPECT_EQ(stats.environment_metrics.at("tools/failure_frequency"),
            std::make_pair(0.5, int64_t{3}));
}

// ---- A run ----

TEST(GrpoTools, ARunWithToolsRendersThemRunsTheHelperAndLogsItsMetrics) {
  if (!have_python()) GTEST_SKIP() << "python3 not found";
  const fs::path dir = tool_module() / "run";
  GrpoConfig c;
  c.model = kDemo + "/model";
  c.data = kDemo + "/train.jsonl";
  c.output_dir = dir.string();
  c.fp8 = "row";
  c.lora_r = 8;
  c.lora_alpha = 16;
  c.lora_dropout = 0.0;
  c.lora_target_modules = std::vector<std::string>{"all-linear"};
  c.num_generations = 2;
  c.per_device_train_batch_size = 4;
  c.max_completion_length = 16;
  c.max_prompt_length = 48;
  c.max_steps = 1;
  c.save_steps = 0;
  c.seed = 7;
  c.tools = {"demo_tools:multiply"};
  c.max_tool_calling_iterations = 2;
  c.rewards = Json::parse(R"([{"type": "answer_match", "column": "answer", "mode": "numeric"}])");
  c.validate();
  EXPECT_EQ(c.episode_turns(), 3);
  cli::TrainSession ts(c, uint64_t(c.seed));
  const ChatTemplateConfig chat = template_with_tools();
  PromptDataOptions d;
  d.max_prompt_length = c.max_prompt_length;
  std::vector<PromptExample> prompts = read_prompt_dataset(c.data, ts.tokenizer(), &chat, d);
  prompts.resize(4);
  GrpoTrainer trainer(ts.ctx(), ts.model(), ts.adapter(), &ts.tokenizer(), ts.session().eos_ids(),
                      std::move(prompts), c, make_reward_set(c.rewards), "demo");
  trainer.set_chat_template(&chat);
  trainer.run();
  std::ifstream metrics(dir / "metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(metrics, line));
  const Json m = Json::parse(line);
  // The demo model writes no call: every episode ends after its first turn, no call counted.
  EXPECT_EQ(m.at("tools/call_frequency"), 0.0);
  EXPECT_EQ(m.at("tools/failure_frequency"), 0.0);
  EXPECT_EQ(m.at("env/turns/max"), 1.0);
  std::ifstream samples(dir / "samples.jsonl");
  ASSERT_TRUE(std::getline(samples, line));
  const Json s = Json::parse(line);
  EXPECT_NE(s.dump().find("Tools: multiply"), std::string::npos) << s.dump().substr(0, 400);
}

}  // namespace
}  // namespace fp8rl
