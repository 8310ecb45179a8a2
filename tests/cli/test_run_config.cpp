// The run-config binding: YAML keys and flags into SftConfig / GrpoConfig / DpoConfig, their
// aliases, the errors for unknown keys, wrong types and out-of-range values, TRL's GRPO batch
// relations, and the dump that reads back to the same configuration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "cli/config_keys.h"
#include "core/check.h"
#include "rl/reward_config.h"

namespace fs = std::filesystem;
using namespace fp8rl;
using namespace fp8rl::cli;

namespace {

// The message of the fp8rl::Error that `f` throws ("" if it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string write_file(const std::string& name, const std::string& text) {
  const fs::path dir = fs::path(::testing::TempDir()) / "run_config";
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p) << text;
  return p.string();
}

// The config that `args` (after the command name) give on a command with C's flags.
template <class C>
C parse_args(KeyTable<C> table, std::vector<std::string> args, bool with_model = false,
             bool validate = true) {
  // On a subcommand, as the commands use it.
  CLI::App top;
  CLI::App& app = *top.add_subcommand("run", "a command with a config");
  ConfigFlags<C> flags(app, std::move(table));
  if (with_model) flags.add_positional(app, "model", "model directory");
  std::vector<const char*> argv{"test", "run"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  top.parse(int(argv.size()), argv.data());
  return validate ? flags.resolve() : flags.merge();
}

template <class C>
C load_text(const KeyTable<C>& table, const std::string& text) {
  C c;
  table.load_yaml_text(text, "run.yaml", c);
  return c;
}

// A GRPO config that validates (GRPO needs a reward).
GrpoConfig valid_grpo() {
  GrpoConfig c;
  c.rewards = nlohmann::json::parse(R"([{"type": "answer_match"}])");
  return c;
}

TEST(RunConfig, DefaultsAreTrls) {
  const SftConfig s;
  EXPECT_EQ(s.learning_rate, 2e-5);
  EXPECT_EQ(s.num_train_epochs, 3.0);
  EXPECT_EQ(s.max_steps, -1);
  EXPECT_EQ(s.per_device_train_batch_size, 8);
  EXPECT_EQ(s.gradient_accumulation_steps, 1);
  EXPECT_EQ(s.max_length, 1024);
  EXPECT_EQ(s.max_grad_norm, 1.0);
  EXPECT_EQ(s.lr_scheduler_type, LrSchedulerType::linear);
  EXPECT_EQ(s.optim, OptimizerKind::adamw);
  EXPECT_EQ(s.adam_beta2, 0.999);
  EXPECT_EQ(s.seed, 42);
  EXPECT_EQ(s.logging_steps, 10);
  EXPECT_EQ(s.lora_r, 16);
  EXPECT_EQ(s.lora_alpha, 32);
  EXPECT_EQ(s.lora_dropout, 0.05);
  EXPECT_EQ(s.dataset_text_field, "text");
  EXPECT_FALSE(s.completion_only_loss.has_value());
  EXPECT_FALSE(s.assistant_only_loss);  // TRL's: loss on every token of messages rows
  EXPECT_FALSE(s.disable_dropout);
  EXPECT_FALSE(s.lora_target_modules.has_value());  // PEFT's default for the architecture
  EXPECT_EQ(s.warmup_steps, 0.0);
  EXPECT_FALSE(s.warmup_ratio.has_value());
  EXPECT_NO_THROW(s.validate());

  const GrpoConfig g;
  EXPECT_EQ(g.learning_rate, 1e-6);
  EXPECT_EQ(g.num_generations, 8);
  EXPECT_EQ(g.num_iterations, 1);
  EXPECT_EQ(g.max_completion_length, 512);  // TRL main (256 up to 1.9)
  EXPECT_FALSE(g.disable_dropout);
  EXPECT_EQ(g.beta, 0.0);
  EXPECT_EQ(g.epsilon, 0.2);
  EXPECT_FALSE(g.epsilon_high.has_value());
  EXPECT_EQ(g.loss_type, GrpoLossType::dapo);
  EXPECT_EQ(g.importance_sampling_level, ImportanceSamplingLevel::token);
  EXPECT_EQ(g.scale_rewards, ScaleRewards::group);
  EXPECT_EQ(g.top_k, 0);
  EXPECT_FALSE(g.min_p.has_value());
  EXPECT_TRUE(g.vllm_importance_sampling_correction);
  EXPECT_EQ(g.vllm_importance_sampling_mode, RolloutCorrectionMode::sequence_mask);
  EXPECT_EQ(g.vllm_importance_sampling_cap, 3.0);
  EXPECT_FALSE(g.delta.has_value());
  EXPECT_EQ(g.top_entropy_quantile, 1.0);
  EXPECT_EQ(g.sapo_temperature_neg, 1.05);
  EXPECT_EQ(g.sapo_temperature_pos, 1.0);
  EXPECT_TRUE(g.generation_kwargs.is_null());
  EXPECT_FALSE(g.num_completions_to_print.has_value());  // all completions

  const DpoConfig d;
  EXPECT_EQ(d.learning_rate, 1e-6);
  EXPECT_EQ(d.beta, 0.1);
  EXPECT_EQ(d.loss_type, DpoLossType::sigmoid);
  EXPECT_EQ(d.max_length, 1024);
  EXPECT_FALSE(d.ld_alpha.has_value());
  EXPECT_TRUE(d.disable_dropout);  // DPOConfig's default
  EXPECT_EQ(d.training_lora_dropout(), 0.0);
  EXPECT_EQ(d.lora_dropout, 0.05);  // still what the adapter's config records
  EXPECT_NO_THROW(d.validate());
}

TEST(RunConfig, YamlSetsEveryKindOfKey) {
  const GrpoConfig c = load_text(grpo_keys(), R"(
# a comment
model: /models/qwen3
learning_rate: 3e-6
max_steps: 200
dry_run: yes
loss_type: grpo
lora_target_modules: [q_proj, v_proj]
reward_weights: [1.0, 0.5]
epsilon_high: 0.28
min_p: ~
chat_template_kwargs: {enable_thinking: false}
rewards:
  - type: answer_match
    normalize: true
  - reward_process: "python3 -m my.reward"
)");
  EXPECT_EQ(c.model, "/models/qwen3");
  EXPECT_EQ(c.learning_rate, 3e-6);
  EXPECT_EQ(c.max_steps, 200);
  EXPECT_TRUE(c.dry_run);
  EXPECT_EQ(c.loss_type, GrpoLossType::grpo);
  EXPECT_EQ(c.lora_target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(c.reward_weights, (std::vector<double>{1.0, 0.5}));
  ASSERT_TRUE(c.epsilon_high.has_value());
  EXPECT_EQ(*c.epsilon_high, 0.28);
  EXPECT_FALSE(c.min_p.has_value());
  ASSERT_EQ(c.rewards.size(), 2u);
  EXPECT_EQ(c.rewards[0]["type"], "answer_match");
  EXPECT_EQ(c.rewards[0]["normalize"], true);
  EXPECT_EQ(c.rewards[1]["reward_process"], "python3 -m my.reward");
  EXPECT_EQ(c.chat_template_kwargs, nlohmann::json({{"enable_thinking", false}}));
  // Keys the file does not name keep their defaults.
  EXPECT_EQ(c.num_generations, 8);
  EXPECT_EQ(c.seed, 42);
  EXPECT_NO_THROW(c.validate());

  // A single scalar is a one-element list; an empty file sets nothing.
  EXPECT_EQ(load_text(sft_keys(), "lora_target_modules: all-linear\n").lora_target_modules,
            std::vector<std::string>{"all-linear"});
  EXPECT_EQ(load_text(sft_keys(), "").learning_rate, 2e-5);
}

// A list key's YAML scalar splits at commas as its flag does (TRL configs copied from a command
// line write `lora_target_modules: q_proj,v_proj`); a YAML list keeps its items whole.
TEST(RunConfig, CommaStringInYamlIsAList) {
  using List = std::vector<std::string>;
  const List qv = {"q_proj", "v_proj"};
  EXPECT_EQ(load_text(sft_keys(), "lora_target_modules: q_proj,v_proj\n").lora_target_modules, qv);
  EXPECT_EQ(load_text(grpo_keys(), "target_modules: \"q_proj, v_proj\"\n").lora_target_modules, qv);
  EXPECT_EQ(load_text(dpo_keys(), "lora_target_modules: [q_proj, v_proj]\n").lora_target_modules,
            qv);
  EXPECT_EQ(parse_args(sft_keys(), {"--lora-target-modules", "q_proj,v_proj"}).lora_target_modules,
            qv);
  EXPECT_EQ(load_text(sft_keys(), "report_to: tensorboard,none\n").report_to,
            (List{"tensorboard", "none"}));
  EXPECT_EQ(load_text(grpo_keys(), "reward_weights: 1.0, 0.5\n").reward_weights,
            (std::vector<double>{1.0, 0.5}));
  EXPECT_NE(error_of([] {
              load_text(grpo_keys(), "reward_weights: 1.0,x\n");
            }).find("key 'reward_weights' in run.yaml:1: expected a list of numbers, got 'x'"),
            std::string::npos);
  // The empty string is the empty list, as --lora-target-modules "" is.
  EXPECT_EQ(load_text(sft_keys(), "lora_target_modules: \"\"\n").lora_target_modules, List{});
}

TEST(RunConfig, LoadsAFileAndFlagsOverrideIt) {
  const std::string path =
      write_file("override.yaml", "learning_rate: 0.001\nmax_steps: 50\nseed: 7\n");
  SftConfig from_file;
  sft_keys().load_yaml(path, from_file);
  EXPECT_EQ(from_file.max_steps, 50);

  const SftConfig c =
      parse_args(sft_keys(), {"--config", path, "--max-steps", "60", "--learning-rate", "0.002"});
  EXPECT_EQ(c.max_steps, 60);                   // flag over file
  EXPECT_EQ(c.learning_rate, 0.002);            // flag over file
  EXPECT_EQ(c.seed, 7);                         // file over default
  EXPECT_EQ(c.per_device_train_batch_size, 8);  // default

  // The order on the command line does not matter: the file is read first.
  const SftConfig d = parse_args(sft_keys(), {"--max-steps", "60", "--config", path});
  EXPECT_EQ(d.max_steps, 60);

  EXPECT_NE(error_of([&] {
              parse_args(sft_keys(), {"--config", path + ".missing"});
            }).find("config file '" + path + ".missing': cannot open"),
            std::string::npos);
}

TEST(RunConfig, EveryAliasSetsItsKey) {
  // The aliases the issues name, as flags and as YAML keys.
  const SftConfig f =
      parse_args(sft_keys(), {"--lr",         "0.01",        "--steps",          "9",
                              "--epochs",     "2.5",         "--batch-size",     "3",
                              "--grad-accum", "4",           "--lora-r",         "5",
                              "--lora-alpha", "6",           "--target-modules", "q_proj,k_proj",
                              "--resume",     "ckpt/step-3", "--optimizer",      "sgd",
                              "--out",        "runs/x"});
  EXPECT_EQ(f.learning_rate, 0.01);
  EXPECT_EQ(f.max_steps, 9);
  EXPECT_EQ(f.num_train_epochs, 2.5);
  EXPECT_EQ(f.per_device_train_batch_size, 3);
  EXPECT_EQ(f.gradient_accumulation_steps, 4);
  EXPECT_EQ(f.lora_r, 5);
  EXPECT_EQ(f.lora_alpha, 6);
  EXPECT_EQ(f.lora_target_modules, (std::vector<std::string>{"q_proj", "k_proj"}));
  EXPECT_EQ(f.resume_from_checkpoint, "ckpt/step-3");
  EXPECT_EQ(f.optim, OptimizerKind::sgd);
  EXPECT_EQ(f.output_dir, "runs/x");

  // Every alias of every table, generically: the alias flag and YAML key give what the name
  // gives, and differ from the default (so the alias really set something).
  auto check_table = [](const auto& table, auto defaults) {
    for (const KeySpec& k : table.keys()) {
      if (k.aliases.empty()) continue;
      std::string text;
      switch (k.type) {
        case KeyType::integer:
          text = "3";
          break;
        case KeyType::real:
          text = "0.25";
          break;
        case KeyType::string_list:
          text = "gate_proj";
          break;
        case KeyType::boolean:  // the value that is not the default
          text = k.get(&defaults).template get<bool>() ? "false" : "true";
          break;
        case KeyType::choice:
          text = k.choices.back();
          break;
        default:
          text = "some/path";
      }
      const nlohmann::json by_name = parse_flag_value(k, flag_name(k.name), text);
      EXPECT_NE(by_name, k.get(&defaults)) << k.name;
      for (const std::string& a : k.aliases) {
        auto via_flag = parse_args(table, {flag_name(a), text}, false, false);
        EXPECT_EQ(k.get(&via_flag), by_name) << flag_name(a);
        decltype(defaults) via_yaml;
        table.load_yaml_text(a + ": " + text + "\n", "alias.yaml", via_yaml);
        EXPECT_EQ(k.get(&via_yaml), by_name) << a;
      }
    }
  };
  check_table(sft_keys(), SftConfig{});
  check_table(grpo_keys(), valid_grpo());
  check_table(dpo_keys(), DpoConfig{});
  check_table(kto_keys(), KtoConfig{});
  check_table(reward_keys(), RewardConfig{});
  check_table(ppo_keys(), PpoConfig{});
}

TEST(RunConfig, ChoiceSpellingsAndNulls) {
  EXPECT_EQ(load_text(sft_keys(), "optim: adamw_torch\n").optim, OptimizerKind::adamw);
  EXPECT_EQ(load_text(grpo_keys(), "scale_rewards: false\n").scale_rewards, ScaleRewards::none);
  EXPECT_EQ(load_text(grpo_keys(), "scale_rewards: true\n").scale_rewards, ScaleRewards::group);
  EXPECT_EQ(load_text(grpo_keys(), "scale_rewards: batch\n").scale_rewards, ScaleRewards::batch);
  EXPECT_EQ(load_text(sft_keys(), "init_lora_weights: true\n").init_lora_weights, "default");
  EXPECT_EQ(load_text(sft_keys(), "init_lora_weights: gaussian\n").init_lora_weights, "gaussian");
  // A dump names each value by its canonical spelling.
  const SftConfig torch = load_text(sft_keys(), "optim: adamw_torch_fused\n");
  EXPECT_EQ(sft_keys().to_json(torch)["optim"], "adamw");
  // TRL writes None for unset optional values.
  EXPECT_FALSE(load_text(grpo_keys(), "max_prompt_length: null\n").max_prompt_length.has_value());
  EXPECT_EQ(load_text(sft_keys(), "adapter: null\n").adapter, "");
  EXPECT_EQ(load_text(sft_keys(), "completion_only_loss: false\n").completion_only_loss,
            std::optional<bool>(false));
  const GrpoConfig g = parse_args(grpo_keys(), {"--max-prompt-length", "none", "--min-p", "0.05",
                                                "--rewards", R"([{"type":"format"}])"});
  EXPECT_FALSE(g.max_prompt_length.has_value());
  EXPECT_EQ(g.min_p, std::optional<double>(0.05));
  EXPECT_EQ(g.rewards, nlohmann::json::parse(R"([{"type":"format"}])"));
}

TEST(RunConfig, BoolFlags) {
  EXPECT_TRUE(parse_args(sft_keys(), {"--dry-run"}).dry_run);
  EXPECT_TRUE(parse_args(sft_keys(), {"--dry-run", "true"}).dry_run);
  EXPECT_FALSE(parse_args(sft_keys(), {"--dry-run", "false"}).dry_run);
  EXPECT_FALSE(parse_args(sft_keys(), {"--dry-run=false"}).dry_run);
  EXPECT_FALSE(parse_args(sft_keys(), {}).dry_run);
  // A flag given twice: the last wins. The file's true is overridden by the flag's false.
  EXPECT_FALSE(parse_args(sft_keys(), {"--truncation", "--truncation", "false"}).truncation);
  const std::string path = write_file("bool.yaml", "truncation: true\n");
  EXPECT_FALSE(parse_args(sft_keys(), {"--config", path, "--truncation=false"}).truncation);
  EXPECT_TRUE(parse_args(sft_keys(), {"--config", path}).truncation);
  // A bare --resume means the newest checkpoint (transformers' resume_from_checkpoint=True).
  EXPECT_EQ(parse_args(sft_keys(), {"--resume"}).resume_from_checkpoint, "true");
  // A flag the value of a bool cannot be.
  EXPECT_NE(error_of([] {
              parse_args(sft_keys(), {"--dry-run", "maybe"});
            }).find("--dry-run: expected true or false, got 'maybe'"),
            std::string::npos);
}

TEST(RunConfig, PositionalModel) {
  const SftConfig c = parse_args(sft_keys(), {"/models/m", "--lr", "0.1"}, true);
  EXPECT_EQ(c.model, "/models/m");
  const std::string twice = error_of([] {
    parse_args(sft_keys(), {"/models/m", "--model", "/other"}, true);
  });
  EXPECT_NE(twice.find("model given twice"), std::string::npos) << twice;
}

TEST(RunConfig, UnknownKeySuggestsTheNearest) {
  const std::string e = error_of(
      [] { load_text(grpo_keys(), "learning_rate: 1e-6\nnum_generations: 4\nmax_step: 10\n"); });
  EXPECT_NE(e.find("unknown key 'max_step' in run.yaml:3 (did you mean 'max_steps'?)"),
            std::string::npos)
      << e;
  // Dashes are a typo too; a name far from every key gets no suggestion.
  EXPECT_NE(error_of([] {
              load_text(sft_keys(), "max-length: 10\n");
            }).find("(did you mean 'max_length'?)"),
            std::string::npos);
  const std::string far = error_of([] { load_text(sft_keys(), "zzzzzzzz: 1\n"); });
  EXPECT_NE(far.find("unknown key 'zzzzzzzz' in run.yaml:1"), std::string::npos) << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  // A GRPO-only key in an SFT config is unknown there.
  EXPECT_NE(error_of([] {
              load_text(sft_keys(), "num_generations: 4\n");
            }).find("unknown key 'num_generations'"),
            std::string::npos);
  // Flags too; and a stray argument.
  EXPECT_NE(error_of([] {
              parse_args(sft_keys(), {"--lr", "1", "--max-step", "3"});
            }).find("unknown flag '--max-step' (did you mean '--max-steps'?)"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_args(sft_keys(), {"--lora-rank=3"});
            }).find("unknown flag '--lora-rank' (did you mean '--lora-r'?)"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_args(sft_keys(), {"stray"}); }).find("unexpected argument 'stray'"),
            std::string::npos);
  // The same without suggestions when nothing is near.
  const std::string far_flag = error_of([] { parse_args(sft_keys(), {"--zzzzzzzz"}); });
  EXPECT_NE(far_flag.find("unknown flag '--zzzzzzzz'"), std::string::npos);
  EXPECT_EQ(far_flag.find("did you mean"), std::string::npos);
}

TEST(RunConfig, WrongTypesAreNamed) {
  auto yaml_error = [](const std::string& text) {
    return error_of([&] { load_text(grpo_keys(), text); });
  };
  EXPECT_NE(yaml_error("seed: 1\nmax_steps: ten\n")
                .find("key 'max_steps' in run.yaml:2: expected an integer, got 'ten'"),
            std::string::npos);
  EXPECT_NE(yaml_error("max_steps: 1.5\n").find("expected an integer, got '1.5'"),
            std::string::npos);
  EXPECT_NE(yaml_error("learning_rate: fast\n").find("expected a number, got 'fast'"),
            std::string::npos);
  EXPECT_NE(yaml_error("gpu_memory: 16GB\n")
                .find("key 'gpu_memory' in run.yaml:1: expected a "
                      "number, or null, got '16GB'"),
            std::string::npos);
  EXPECT_NE(yaml_error("dry_run: 2\n").find("expected true or false, got '2'"), std::string::npos);
  EXPECT_NE(
      yaml_error("loss_type: ppo\n")
          .find("expected one of dapo, grpo, bnpo, dr_grpo, cispo, sapo, luspo, rloo, got 'ppo'"),
      std::string::npos);
  EXPECT_NE(yaml_error("seed: [1, 2]\n")
                .find("key 'seed' in run.yaml:1: expected an integer, got a list"),
            std::string::npos);
  EXPECT_NE(
      yaml_error("reward_weights: {a: 1}\n").find("expected a list of numbers, got a mapping"),
      std::string::npos);
  EXPECT_NE(yaml_error("reward_weights: [1, x]\n").find("expected a list of numbers, got 'x'"),
            std::string::npos);
  EXPECT_NE(yaml_error("seed: ~\n").find("expected an integer, got null"), std::string::npos);
  EXPECT_NE(yaml_error("lr: 1\nlearning_rate: 2\n")
                .find("key 'learning_rate' in run.yaml:2 sets learning_rate again (already set "
                      "on line 1)"),
            std::string::npos);
  EXPECT_NE(yaml_error("seed: 1\nbeta: 0\nseed: 2\n")
                .find("key 'seed' in run.yaml:3 sets seed again (already set on line 1)"),
            std::string::npos);
  EXPECT_NE(yaml_error("rewards: [{[1]: 2}]\n").find("key 'rewards' in run.yaml:1:"),
            std::string::npos);
  EXPECT_NE(yaml_error("- a\n- b\n").find("a run config is a YAML mapping"), std::string::npos);
  EXPECT_NE(yaml_error("seed: 1\nmodel: [unclosed\n").find("run.yaml:"), std::string::npos);
  EXPECT_NE(yaml_error("seed: 1\nmodel: [unclosed\n").find("not valid YAML"), std::string::npos);
  // Flags.
  EXPECT_NE(error_of([] {
              parse_args(grpo_keys(), {"--num-generations", "many"});
            }).find("--num-generations: expected an integer, got 'many'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_args(sft_keys(), {"--lr-scheduler-type", "step"});
            })
                .find("--lr-scheduler-type: expected one of linear, cosine, constant, "
                      "constant_with_warmup, got 'step'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_args(grpo_keys(), {"--rewards", "[oops"});
            }).find("--rewards: expected JSON text"),
            std::string::npos);
}

// YAML aliases repeat the node their anchor names without repeating its text: the conversion
// of the values counts what it creates, so that a few hundred bytes cannot grow to gigabytes
// (nine levels of nine aliases: 9^9 nodes) or recurse without end (an alias in its own anchor).
TEST(RunConfig, YamlAliasesAreBudgeted) {
  auto yaml_error = [](const std::string& text) {
    return error_of([&] { load_text(grpo_keys(), text); });
  };
  std::string laughs = "seed: 1\nrewards:\n  - &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    laughs += "  - &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) laughs += (j ? ", *a" : "*a") + std::to_string(i - 1);
    laughs += "]\n";
  }
  ASSERT_LT(laughs.size(), 600u);
  const std::string nodes = yaml_error(laughs);
  EXPECT_NE(nodes.find("key 'rewards' in run.yaml:2: rewards["), std::string::npos) << nodes;
  EXPECT_NE(nodes.find("the value expands past the limit of 100000 YAML nodes"), std::string::npos)
      << nodes;
  const std::string cycle = yaml_error("rewards: &a [1, *a]\n");
  EXPECT_NE(cycle.find("key 'rewards' in run.yaml:1: rewards[1][1][1]"), std::string::npos)
      << cycle;
  EXPECT_NE(cycle.find("nested deeper than the limit of 256 levels"), std::string::npos) << cycle;
  // A list key's aliases of a long scalar: the bytes are counted.
  std::string list = "lora_target_modules: [";
  for (int i = 0; i < 5000; ++i) list += i ? ", *s" : "&s " + std::string(4096, 'q');
  const std::string bytes = yaml_error(list + "]\n");
  EXPECT_NE(bytes.find("key 'lora_target_modules' in run.yaml:1: lora_target_modules["),
            std::string::npos)
      << bytes;
  EXPECT_NE(bytes.find("the limit of 16777216 bytes of YAML scalars"), std::string::npos) << bytes;
  // The controls: aliases within the budget are values like any other.
  const GrpoConfig c = load_text(grpo_keys(), "rewards:\n  - &r {type: answer_match}\n  - *r\n");
  EXPECT_EQ(c.rewards,
            nlohmann::json::parse(R"([{"type": "answer_match"}, {"type": "answer_match"}])"));
  std::string below = "rewards:\n  - &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 5; ++i) {  // 9^5 = 59049 nodes
    below += "  - &a" + std::to_string(i) + " [";
    for (int j = 0; j < 9; ++j) below += (j ? ", *a" : "*a") + std::to_string(i - 1);
    below += "]\n";
  }
  EXPECT_EQ(yaml_error(below), "");
}

// A YAML mapping key that is a list or a mapping has no JSON form: the error names where.
TEST(RunConfig, ComplexYamlKeysAreNamed) {
  auto yaml_error = [](const std::string& text) {
    return error_of([&] { load_text(grpo_keys(), text); });
  };
  const std::string e = yaml_error("rewards:\n  - type: pattern\n    ? [a, b]\n    : 1\n");
  EXPECT_NE(e.find("key 'rewards' in run.yaml:1: rewards[0]: a mapping key must be a string, not a "
                   "list (line 3)"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("bad conversion"), std::string::npos) << e;
  const std::string map = yaml_error("rewards: [{x: {? {a: 1} : 2}}]\n");
  EXPECT_NE(map.find("rewards[0].x: a mapping key must be a string, not a mapping"),
            std::string::npos)
      << map;
  // Scalar keys of any spelling are strings; a null key is "null", as json.dumps writes None.
  const GrpoConfig c = load_text(grpo_keys(), "rewards: [{~: 1, 3: x, true: y}]\n");
  EXPECT_EQ(c.rewards, nlohmann::json::parse(R"([{"null": 1, "3": "x", "true": "y"}])"));
}

// An explicit YAML key may be megabytes long: an unknown one is quoted cut short and looked up
// for no near spelling (the edit distance is quadratic in its length: 3 MB took 5 s); inside a
// json key, keys count against the byte budget (an alias can repeat a long key).
TEST(RunConfig, LongKeysAreCutAndCounted) {
  const auto start = std::chrono::steady_clock::now();
  const std::string e =
      error_of([] { load_text(grpo_keys(), "? " + std::string(3000000, 'a') + "\n: 1\n"); });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
  EXPECT_LT(e.size(), 300u) << e.substr(0, 300);
  EXPECT_NE(e.find("unknown key '\"aaaa"), std::string::npos) << e.substr(0, 300);
  std::string keys = "rewards:\n  - {? &k " + std::string(1 << 20, 'k') + "\n    : 1}\n";
  for (int i = 0; i < 20; ++i) keys += "  - {? *k\n    : 1}\n";
  const std::string bytes = error_of([&] { load_text(grpo_keys(), keys); });
  EXPECT_NE(bytes.find("the limit of 16777216 bytes of YAML scalars"), std::string::npos)
      << bytes.substr(0, 300);
  EXPECT_LT(bytes.size(), 400u);
}

// Ill-formed UTF-8 reached values (yaml-cpp passes the bytes through) that JSON cannot hold and
// that the run's config.yaml did not read back the same (found by fuzz_replay_run_config).
TEST(RunConfig, YamlMustBeUtf8) {
  const std::string e =
      error_of([] { load_text(grpo_keys(), "seed: 1\nrewards: [{type: \"answer\xF4match\"}]\n"); });
  EXPECT_NE(e.find("run.yaml:2: not valid YAML: not UTF-8 text (ill-formed byte 0xF4 at byte "
                   "offset 32)"),
            std::string::npos)
      << e;
  // yaml-cpp decodes the escapes \N and \_ to the bytes 0x85 and 0xA0, not UTF-8: they read as
  // U+0085 and U+00A0, as PyYAML reads them (the ill-formed bytes broke JSON's dump).
  EXPECT_EQ(load_text(grpo_keys(), R"(rewards: [{"\N\_": "a\N\_b\x85\u00e9"}])"
                                   "\n")
                .rewards,
            nlohmann::json::parse(R"([{"\u0085\u00a0": "a\u0085\u00a0b\u0085\u00e9"}])"));
  // The control: the same text in UTF-8 reads.
  EXPECT_EQ(load_text(grpo_keys(), "rewards: [{type: \"answer\xC3\xA9\"}]\n").rewards,
            nlohmann::json::parse("[{\"type\": \"answer\u00e9\"}]"));
}

// gpu_memory (the device memory budget) as a key and as --gpu-memory; unset: the whole GPU.
// The range and the device are checked by validate() (OutOfRangeValuesAreNamed).
TEST(RunConfig, GpuMemoryKeyAndFlag) {
  EXPECT_FALSE(load_text(grpo_keys(), "seed: 1\n").gpu_memory.has_value());
  const GrpoConfig g = load_text(grpo_keys(), "device: cuda\ngpu_memory: 16\n");
  EXPECT_EQ(g.gpu_memory, std::optional<double>(16));
  EXPECT_NO_THROW(static_cast<const ModelArguments&>(g).validate());
  const SftConfig s = parse_args(sft_keys(), {"--device", "cuda", "--gpu-memory", "12.5"});
  EXPECT_EQ(s.gpu_memory, std::optional<double>(12.5));
  EXPECT_NO_THROW(s.validate());
}

TEST(RunConfig, OutOfRangeValuesAreNamed) {
  struct Case {
    std::string yaml, message;
  };
  const std::vector<Case> sft_cases = {
      {"learning_rate: -1", "learning_rate = -1 is out of range (must be > 0)"},
      {"max_steps: 0", "max_steps = 0 is out of range (must be >= 1, or -1"},
      {"per_device_train_batch_size: 0",
       "per_device_train_batch_size = 0 is out of range (must be >= 1)"},
      {"warmup_ratio: 1.5", "warmup_ratio = 1.5 is out of range (must be in [0, 1])"},
      {"adam_beta1: 1", "adam_beta1 = 1 is out of range (must be in [0, 1))"},
      {"lora_r: 0", "lora_r = 0 is out of range (must be >= 1)"},
      {"lora_dropout: 1.0", "lora_dropout = 1 is out of range (must be in [0, 1))"},
      {"max_grad_norm: -0.5", "max_grad_norm = -0.5 is out of range (must be >= 0)"},
      {"max_tokens_per_batch: 100", "max_tokens_per_batch = 100 is out of range"},
      {"lora_target_modules: []", "lora_target_modules is empty"},
      {"{device: cuda, gpu_memory: -1}",
       "gpu_memory = -1 is out of range (must be in (0, 4096] GiB"},
      {"{device: cuda, gpu_memory: 0}", "gpu_memory = 0 is out of range"},
      {"{device: cuda, gpu_memory: 1.0e9}", "gpu_memory = 1000000000 is out of range"},
      {"gpu_memory: 16", "gpu_memory = 16 applies to device cuda only"},
      {"chat_template_kwargs: [enable_thinking]",
       "chat_template_kwargs = [\"enable_thinking\"] is not a mapping of template variables"},
  };
  for (const Case& c : sft_cases) {
    const SftConfig config = load_text(sft_keys(), c.yaml);
    const std::string e = error_of([&] { config.validate(); });
    EXPECT_NE(e.find(c.message), std::string::npos) << c.yaml << " -> " << e;
  }
  const std::vector<Case> grpo_cases = {
      {"temperature: 0", "temperature = 0 is out of range (must be > 0)"},
      {"top_p: 0", "top_p = 0 is out of range (must be in (0, 1])"},
      {"top_k: -1", "top_k = -1 is out of range (must be >= 0)"},
      {"min_p: 2", "min_p = 2 is out of range (must be in [0, 1])"},
      {"epsilon: 1", "epsilon = 1 is out of range (must be in (0, 1))"},
      {"beta: -0.1", "beta = -0.1 is out of range (must be >= 0)"},
      {"vllm_importance_sampling_cap: 0.5", "vllm_importance_sampling_cap = 0.5 is out of range"},
      {"kv_memory: -1", "kv_memory = -1 is out of range (must be >= 0)"},
      {"num_iterations: 0", "num_iterations = 0 is out of range (must be >= 1)"},
      {"reward_weights: [1, 2]", "reward_weights has 2 values, but there are 1 reward functions"},
      {"rewards: []", "no reward"},
      {"delta: 0", "delta = 0 is out of range (must be > 0)"},
      {"top_entropy_quantile: 1.5",
       "top_entropy_quantile = 1.5 is out of range (must be in [0, 1])"},
      {"sapo_temperature_neg: 0", "sapo_temperature_neg = 0 is out of range (must be > 0)"},
      {"loss_type: luspo", "loss_type luspo needs importance_sampling_level: sequence, got token"},
      {"{loss_type: luspo, importance_sampling_level: sequence, beta: 0.1}",
       "loss_type luspo needs beta: 0"},
      {"{loss_type: luspo, importance_sampling_level: sequence, top_entropy_quantile: 0.2}",
       "loss_type luspo needs top_entropy_quantile: 1"},
      {"{loss_type: luspo, importance_sampling_level: sequence, "
       "vllm_importance_sampling_mode: token_mask}",
       "loss_type luspo needs a sequence_* vllm_importance_sampling_mode"},
      {"generation_kwargs: [1]", "generation_kwargs = [1] is not a mapping of sampling fields"},
      {"generation_kwargs: {num_beams: 4}", "generation_kwargs: unknown key 'num_beams'"},
      {"generation_kwargs: {n: 4}",
       "generation_kwargs.n = 4 is set by the trainer; use num_generations"},
      {"generation_kwargs: {max_tokens: 64}", "use max_completion_length"},
      {"generation_kwargs: {max_new_tokens: 64}", "use max_completion_length"},
      {"generation_kwargs: {seed: 1}",
       "generation_kwargs.seed = 1 is set by the trainer; use seed"},
      {"generation_kwargs: {top_p: 2}", "generation_kwargs: top_p must be in (0, 1], got 2"},
      {"generation_kwargs: {temperature: 0}", "generation_kwargs.temperature must be > 0, got 0"},
      {"generation_kwargs: {min_tokens: 600}", "generation_kwargs: min_tokens must be in [0"},
      {"{advantage_estimator: rloo, num_generations: 1}",
       "num_generations = 1 is out of range (must be >= 2)"},
      {"{advantage_estimator: rloo, scale_rewards: batch}",
       "scale_rewards batch applies to advantage_estimator grpo only, not rloo"},
      {"{advantage_estimator: reinforce_plus_plus, scale_rewards: none}",
       "scale_rewards none applies to advantage_estimator grpo only, not reinforce_plus_plus"},
      {"normalize_advantages: true",
       "normalize_advantages (RLOOConfig's) needs advantage_estimator rloo, got grpo"},
      {"{loss_type: rloo, beta: 0.05, vllm_importance_sampling_correction: false}",
       "loss_type rloo takes beta = 0.05 into the reward, which advantage_estimator rloo does, "
       "not grpo"},
      {"{loss_type: rloo, advantage_estimator: rloo}",
       "loss_type rloo takes no rollout correction (TRL's RLOO has none): set "
       "vllm_importance_sampling_correction: false"},
      {"{loss_type: rloo, advantage_estimator: rloo, vllm_importance_sampling_correction: false, "
       "delta: 2}",
       "loss_type rloo takes no delta"},
      {"reward_clip_range: [-1, 1]",
       "reward_clip_range (RLOOConfig's) needs advantage_estimator rloo, got grpo"},
      {"{advantage_estimator: rloo, reward_clip_range: [1, -1]}",
       "reward_clip_range must be [low, high] with low <= high, got 2 values"},
      {"{advantage_estimator: rloo, reward_clip_range: [1]}",
       "reward_clip_range must be [low, high] with low <= high, got 1 values"},
  };
  for (const Case& c : grpo_cases) {
    GrpoConfig config = valid_grpo();
    grpo_keys().load_yaml_text(c.yaml, "run.yaml", config);
    const std::string e = error_of([&] { config.validate(); });
    EXPECT_NE(e.find(c.message), std::string::npos) << c.yaml << " -> " << e;
  }
  const std::vector<Case> dpo_cases = {
      {"beta: 0", "beta = 0 is out of range (must be > 0)"},
      {"label_smoothing: 0.5", "label_smoothing = 0.5 is out of range (must be in [0, 0.5))"},
      {"{loss_type: ipo, label_smoothing: 0.1}",
       "applies to loss_type sigmoid, robust, exo_pair, aot and aot_unpaired only, not ipo"},
      {"loss_type: exo_pair", "loss_type exo_pair needs label_smoothing > 0"},
      {"{loss_type: discopop, discopop_tau: 0}", "discopop_tau = 0 is out of range (must be > 0)"},
      {"ld_alpha: 1.5", "ld_alpha = 1.5 is out of range (must be in [0, 1])"},
      {"{loss_type: sft, ld_alpha: 0.5}", "ld_alpha = 0.5 has no effect on loss_type sft"},
      {"max_prompt_length: 1024",
       "max_prompt_length = 1024 is out of range (must be < "
       "max_length = 1024"},
  };
  for (const Case& c : dpo_cases) {
    const DpoConfig config = load_text(dpo_keys(), c.yaml);
    const std::string e = error_of([&] { config.validate(); });
    EXPECT_NE(e.find(c.message), std::string::npos) << c.yaml << " -> " << e;
  }
  // resolve() validates: an out-of-range flag fails the command.
  EXPECT_NE(error_of([] {
              parse_args(sft_keys(), {"--lr", "0"});
            }).find("learning_rate = 0 is out of range"),
            std::string::npos);
  // Controls: the same keys in range validate.
  EXPECT_NO_THROW(load_text(sft_keys(),
                            "{learning_rate: 1, max_steps: 1, warmup_ratio: 1, "
                            "adam_beta1: 0, lora_dropout: 0, max_tokens_per_batch: "
                            "1024}")
                      .validate());
  GrpoConfig g = valid_grpo();
  grpo_keys().load_yaml_text("{top_p: 1, top_k: 0, min_p: 1, epsilon: 0.99, reward_weights: [2]}",
                             "run.yaml", g);
  EXPECT_NO_THROW(g.validate());
  EXPECT_NE(error_of([] {
              load_text(grpo_keys(), "advantage_estimator: ppo\n");
            }).find("advantage_estimator"),
            std::string::npos);
  for (const char* yaml :
       {"{advantage_estimator: rloo, normalize_advantages: true, beta: 0.05}",
        "{advantage_estimator: rloo, loss_type: rloo, beta: 0.05, "
        "vllm_importance_sampling_correction: false, reward_clip_range: [-1, 1]}",
        "{advantage_estimator: reinforce_plus_plus_baseline}"}) {
    GrpoConfig e = valid_grpo();
    grpo_keys().load_yaml_text(yaml, "run.yaml", e);
    EXPECT_NO_THROW(e.validate()) << yaml;
  }
  // reward_process replaces `rewards` with one function.
  grpo_keys().load_yaml_text("{rewards: [], reward_process: ./score.sh}", "run.yaml", g);
  EXPECT_NO_THROW(g.validate());
  EXPECT_EQ(g.num_reward_functions(), 1);
}

// KTOConfig's keys and defaults, its checks (TRL's batch-size refusal for the KL estimate),
// and the plumbing keys whose other values would change the run.
TEST(RunConfig, KtoKeysAsTrl) {
  const KtoConfig d;
  EXPECT_EQ(d.learning_rate, 1e-6);
  EXPECT_EQ(d.beta, 0.1);
  EXPECT_EQ(d.desirable_weight, 1.0);
  EXPECT_EQ(d.undesirable_weight, 1.0);
  EXPECT_EQ(d.loss_type, KtoLossType::kto);
  EXPECT_EQ(d.max_length, 1024);
  EXPECT_TRUE(d.disable_dropout);
  EXPECT_NO_THROW(d.validate());
  const KtoConfig k = load_text(kto_keys(),
                                "{beta: 0.2, desirable_weight: 1.33, undesirable_weight: 0.5, "
                                "loss_type: apo_zero_unpaired, max_length: 64, truncation: true}");
  EXPECT_EQ(k.beta, 0.2);
  EXPECT_EQ(k.desirable_weight, 1.33);
  EXPECT_EQ(k.undesirable_weight, 0.5);
  EXPECT_EQ(k.loss_type, KtoLossType::apo_zero_unpaired);
  EXPECT_EQ(k.max_length, 64);
  EXPECT_TRUE(k.truncation);
  struct Case {
    std::string yaml, message;
  };
  const std::vector<Case> cases = {
      {"beta: 0", "beta = 0 is out of range (must be > 0)"},
      {"desirable_weight: -1", "desirable_weight = -1 is out of range (must be >= 0)"},
      {"undesirable_weight: -0.5", "undesirable_weight = -0.5 is out of range (must be >= 0)"},
      {"{desirable_weight: 0, undesirable_weight: 0}",
       "desirable_weight and undesirable_weight are both 0"},
      {"max_length: 1", "max_length = 1 is out of range (must be >= 2)"},
      {"per_device_train_batch_size: 1",
       "per_device_train_batch_size = 1 is out of range for loss_type kto (must be > 1: the KL "
       "estimate pairs each prompt with another example's completion of the batch)"},
  };
  for (const Case& c : cases) {
    const KtoConfig config = load_text(kto_keys(), c.yaml);
    const std::string e = error_of([&] { config.validate(); });
    EXPECT_NE(e.find(c.message), std::string::npos) << c.yaml << " -> " << e;
  }
  // Control: apo_zero_unpaired has no KL estimate, so one example a batch is fine (as in TRL).
  EXPECT_NO_THROW(
      load_text(kto_keys(), "{loss_type: apo_zero_unpaired, per_device_train_batch_size: 1}")
          .validate());
  EXPECT_NE(error_of([] { load_text(kto_keys(), "loss_type: sigmoid\n"); }).find("loss_type"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              load_text(kto_keys(), "train_sampling_strategy: random\n");
            }).find("TRL's sequential sampling"),
            std::string::npos);
  EXPECT_NO_THROW(load_text(kto_keys(), "train_sampling_strategy: sequential\n"));
  EXPECT_NE(error_of([] { load_text(kto_keys(), "sync_ref_model: true\n"); }).find("TR-DPO"),
            std::string::npos);
}

// RLOOConfig: GRPOConfig's keys with RLOO's defaults (beta 0.05, num_generations 2) and its
// own loss; fp8rl rloo keeps to TRL's RLOO (other combinations are fp8rl grpo's).
TEST(RunConfig, RlooKeysAsTrl) {
  RlooConfig r;
  r.rewards = nlohmann::json::parse(R"([{"type": "answer_match"}])");
  EXPECT_EQ(r.beta, 0.05);
  EXPECT_EQ(r.num_generations, 2);
  EXPECT_EQ(r.learning_rate, 1e-6);
  EXPECT_EQ(r.epsilon, 0.2);
  EXPECT_FALSE(r.normalize_advantages);
  EXPECT_TRUE(r.reward_clip_range.empty());
  EXPECT_EQ(r.advantage_estimator, AdvantageEstimator::rloo);
  EXPECT_EQ(r.loss_type, GrpoLossType::rloo);
  EXPECT_TRUE(r.kl_in_reward());
  EXPECT_NO_THROW(r.validate());
  rloo_keys().load_yaml_text("{normalize_advantages: true, reward_clip_range: [-2, 3]}", "run.yaml",
                             r);
  EXPECT_TRUE(r.normalize_advantages);
  EXPECT_EQ(r.reward_clip_range, (std::vector<double>{-2, 3}));
  EXPECT_NO_THROW(r.validate());
  RlooConfig grpo_loss = r;
  rloo_keys().load_yaml_text("loss_type: dapo", "run.yaml", grpo_loss);
  EXPECT_NE(error_of([&] { grpo_loss.validate(); }).find("other combinations run with fp8rl grpo"),
            std::string::npos);
  // Control: GRPOConfig's defaults stay GRPO's.
  EXPECT_EQ(GrpoConfig{}.beta, 0.0);
  EXPECT_EQ(GrpoConfig{}.num_generations, 8);
}

// OnlineDPOConfig's defaults and keys: beta a number or a list, TRL's reward_model_path, judge
// refused unless null; what the GRPO loop runs (two completions per prompt, prompts by
// max_length - max_new_tokens).
TEST(RunConfig, OnlineDpoKeysAsTrl) {
  OnlineDpoConfig o;
  o.rewards = nlohmann::json::parse(R"([{"type": "answer_match"}])");
  EXPECT_EQ(o.learning_rate, 5e-7);
  EXPECT_EQ(o.temperature, 0.9);
  EXPECT_EQ(o.max_completion_length, 64);
  EXPECT_EQ(o.max_length, 512);
  EXPECT_EQ(o.dpo_beta, std::vector<double>{0.1});
  EXPECT_EQ(o.dpo_loss_type, DpoLossType::sigmoid);
  EXPECT_FALSE(o.missing_eos_penalty);
  EXPECT_NO_THROW(o.validate());
  online_dpo_keys().load_yaml_text(
      "{beta: 0.05, loss_type: ipo, max_new_tokens: 16, missing_eos_penalty: 1.5, "
      "per_device_train_batch_size: 3, judge: null}",
      "run.yaml", o);
  EXPECT_EQ(o.dpo_beta, std::vector<double>{0.05});
  EXPECT_EQ(o.dpo_loss_type, DpoLossType::ipo);
  EXPECT_EQ(o.missing_eos_penalty, 1.5);
  EXPECT_NO_THROW(o.validate());
  const GrpoConfig g = o.trainer_config();
  ASSERT_TRUE(g.online_dpo);
  EXPECT_EQ(g.online_dpo->beta, std::vector<double>{0.05});
  EXPECT_EQ(g.per_device_train_batch_size, 6);  // 3 prompts x 2 completions
  EXPECT_EQ(g.max_prompt_length, 512 - 16);
  EXPECT_TRUE(g.needs_reference());
  online_dpo_keys().load_yaml_text("{beta: [0.2, 0.1], reward_model_path: models/rm}", "run.yaml",
                                   o);
  EXPECT_EQ(o.dpo_beta, (std::vector<double>{0.2, 0.1}));
  EXPECT_EQ(o.rewards,
            nlohmann::json::parse(R"([{"type": "reward_model", "model": "models/rm"}])"));
  EXPECT_NE(error_of([&] {
              online_dpo_keys().load_yaml_text("judge: pairrm", "run.yaml", o);
            }).find("pairwise judges are not supported"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              online_dpo_keys().load_yaml_text("loss_type: hinge", "run.yaml", o);
            }).find("loss_type"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              online_dpo_keys().load_yaml_text("epsilon: 0.1", "run.yaml", o);
            }).find("unknown key 'epsilon'"),
            std::string::npos);
  // Control: GRPOConfig's defaults run the GRPO loss and no reference.
  EXPECT_FALSE(GrpoConfig{}.online_dpo);
  EXPECT_FALSE(GrpoConfig{}.needs_reference());
}

TEST(RunConfig, GrpoGenerationKwargsOverrideTheSamplingKeys) {
  GrpoConfig c = valid_grpo();
  grpo_keys().load_yaml_text(R"(
temperature: 0.9
top_p: 0.95
max_completion_length: 64
generation_kwargs: {temperature: 0.7, top_k: 20, min_tokens: 2, stop: ["</answer>"],
                    stop_token_ids: [7], repetition_penalty: 1.1, min_p: 0.05}
)",
                             "run.yaml", c);
  EXPECT_NO_THROW(c.validate());
  const SamplingParams s = c.sampling_params();
  EXPECT_EQ(s.temperature, 0.7);  // the override wins (TRL: they override the keys)
  EXPECT_EQ(s.top_k, 20);
  EXPECT_EQ(s.min_tokens, 2);
  EXPECT_EQ(s.stop, std::vector<std::string>{"</answer>"});
  EXPECT_EQ(s.stop_token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(s.repetition_penalty, 1.1);
  EXPECT_EQ(s.min_p, 0.05);
  // The keys it leaves alone, and the trainer's own fields.
  EXPECT_EQ(s.top_p, 0.95);
  EXPECT_EQ(s.max_tokens, 64);
  EXPECT_EQ(s.n, 8);
  EXPECT_TRUE(s.processed_logprobs);
  // Control: without it, the keys.
  c.generation_kwargs = nullptr;
  EXPECT_EQ(c.sampling_params().temperature, 0.9);
  EXPECT_EQ(c.sampling_params().top_k, 0);
}

TEST(RunConfig, GrpoBatchRelationsAsTrl) {
  GrpoConfig c = valid_grpo();
  // Defaults: one round per optimizer step, of per_device_train_batch_size completions.
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.resolved_steps_per_generation(), 1);
  EXPECT_EQ(c.resolved_generation_batch_size(), 8);
  EXPECT_EQ(c.prompts_per_generation(), 1);
  // steps_per_generation defaults to gradient_accumulation_steps.
  c.gradient_accumulation_steps = 4;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.resolved_steps_per_generation(), 4);
  EXPECT_EQ(c.resolved_generation_batch_size(), 32);
  EXPECT_EQ(c.prompts_per_generation(), 4);
  // generation_batch_size given: steps_per_generation follows from it.
  c = valid_grpo();
  c.generation_batch_size = 24;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.resolved_steps_per_generation(), 3);
  EXPECT_EQ(c.prompts_per_generation(), 3);
  // ... and must be a multiple of the batch.
  c.generation_batch_size = 12;
  EXPECT_NE(error_of([&] { c.validate(); })
                .find("generation_batch_size (12) must be divisible by the global batch size "
                      "per_device_train_batch_size (8)"),
            std::string::npos);
  // Not both.
  c = valid_grpo();
  c.generation_batch_size = 16;
  c.steps_per_generation = 2;
  EXPECT_NE(error_of([&] { c.validate(); }).find("can not both be set"), std::string::npos);
  // Whole groups per round.
  c = valid_grpo();
  c.per_device_train_batch_size = 6;
  EXPECT_NE(error_of([&] { c.validate(); })
                .find("generation_batch_size (6 = per_device_train_batch_size * "
                      "steps_per_generation) must be divisible by num_generations (8)"),
            std::string::npos);
  c.steps_per_generation = 4;  // 24 completions = 3 groups of 8
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.resolved_generation_batch_size(), 24);
  EXPECT_EQ(c.prompts_per_generation(), 3);
  // G >= 2.
  c = valid_grpo();
  c.num_generations = 1;
  EXPECT_NE(
      error_of([&] { c.validate(); }).find("num_generations = 1 is out of range (must be >= 2)"),
      std::string::npos);
  // epsilon_high defaults to epsilon.
  c = valid_grpo();
  EXPECT_EQ(c.resolved_epsilon_high(), 0.2);
  c.epsilon_high = 0.28;
  EXPECT_EQ(c.resolved_epsilon_high(), 0.28);
}

// samples.jsonl: all of a round (null), or the first N completions rounded up to whole groups.
TEST(RunConfig, SamplesPerRoundAreWholeGroups) {
  GrpoConfig c = valid_grpo();
  c.num_generations = 4;
  EXPECT_EQ(c.samples_per_round(32), 32);
  c.num_completions_to_print = 0;
  EXPECT_EQ(c.samples_per_round(32), 0);
  c.num_completions_to_print = 1;
  EXPECT_EQ(c.samples_per_round(32), 4);
  c.num_completions_to_print = 4;
  EXPECT_EQ(c.samples_per_round(32), 4);
  c.num_completions_to_print = 5;
  EXPECT_EQ(c.samples_per_round(32), 8);
  c.num_completions_to_print = 40;
  EXPECT_EQ(c.samples_per_round(32), 32);
  c.num_completions_to_print = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(c.samples_per_round(32), 32);
}

// transformers 5: warmup_steps is steps, or a fraction below 1; a given warmup_ratio replaces
// it (transformers 4 let warmup_steps > 0 win, which would give 3 below).
TEST(RunConfig, WarmupStepsAsTransformers5) {
  SftConfig c;
  EXPECT_EQ(c.num_warmup_steps(95), 0);
  c.warmup_steps = 3;
  EXPECT_EQ(c.num_warmup_steps(95), 3);
  c.warmup_ratio = 0.1;
  EXPECT_EQ(c.num_warmup_steps(95), 10);  // ceil(9.5): the ratio wins
  c.warmup_ratio = 0.0;                   // given, even as 0
  EXPECT_EQ(c.num_warmup_steps(95), 0);
  c.warmup_ratio.reset();
  c.warmup_steps = 0.1;  // a fraction
  EXPECT_EQ(c.num_warmup_steps(95), 10);
  const SftConfig y = load_text(sft_keys(), "warmup_steps: 0.05\nwarmup_ratio: null\n");
  EXPECT_EQ(y.num_warmup_steps(100), 5);
  EXPECT_NO_THROW(y.validate());
  // Through train_step_config, as the trainers build the schedule.
  SftConfig both = load_text(sft_keys(), "warmup_steps: 7\nwarmup_ratio: 0.5\n");
  EXPECT_EQ(train_step_config(both, 10).schedule.num_warmup_steps, 5);
  EXPECT_NE(error_of([] {
              load_text(sft_keys(), "warmup_steps: 2.5\n").validate();
            }).find("warmup_steps = 2.5 is neither a whole number"),
            std::string::npos);
}

// Evaluation keys as transformers: eval_steps defaults to logging_steps, below 1 it is a
// fraction of the run's steps (rounded up); steps evaluate on the multiples, epoch at each
// epoch's end and the run's last step; nothing at the end otherwise. Errors name the key and
// value: eval_steps <= 0 or a non-integer above 1, eval keys without eval_dataset, GRPO's eval
// batch not holding whole groups, a bad eval_generation_kwargs field.
TEST(RunConfig, EvaluationKeysAsTransformers) {
  SftConfig c = load_text(sft_keys(), "{eval_dataset: eval.jsonl, eval_strategy: steps}");
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.per_device_eval_batch_size, 8);
  EXPECT_EQ(c.eval_interval(100), 10);  // logging_steps
  c.eval_steps = 0.25;
  EXPECT_EQ(c.eval_interval(10), 3);  // ceil(2.5)
  c.eval_steps = 4;
  EXPECT_TRUE(c.should_evaluate(8, 10, false));
  EXPECT_FALSE(c.should_evaluate(10, 10, true));  // the end is not a multiple of 4
  c.eval_strategy = EvalStrategy::epoch;
  EXPECT_TRUE(c.should_evaluate(3, 10, true));
  EXPECT_FALSE(c.should_evaluate(4, 10, false));
  EXPECT_TRUE(c.should_evaluate(10, 10, false));  // the last (cut short) epoch ends
  c.eval_strategy = EvalStrategy::no;
  EXPECT_FALSE(c.should_evaluate(10, 10, true));
  EXPECT_FALSE(load_text(sft_keys(), "eval_dataset: eval.jsonl").evaluates());

  struct Case {
    std::string yaml, message;
  };
  const std::vector<Case> cases = {
      {"{eval_dataset: e.jsonl, eval_strategy: steps, eval_steps: 0}",
       "eval_steps = 0 is out of range (must be > 0"},
      {"{eval_dataset: e.jsonl, eval_strategy: steps, eval_steps: -3}",
       "eval_steps = -3 is out of range"},
      {"{eval_dataset: e.jsonl, eval_strategy: steps, eval_steps: 2.5}",
       "eval_steps = 2.5 must be an integer if bigger than 1"},
      {"{eval_dataset: e.jsonl, per_device_eval_batch_size: 0}",
       "per_device_eval_batch_size = 0 is out of range (must be >= 1)"},
      {"eval_strategy: steps", "eval_strategy = steps needs an eval_dataset"},
      {"eval_strategy: epoch", "eval_strategy = epoch needs an eval_dataset"},
      {"eval_on_start: true", "eval_on_start needs an eval_dataset"},
      {"eval_steps: 50", "eval_steps = 50 needs an eval_dataset"},
  };
  for (const Case& k : cases) {
    const SftConfig config = load_text(sft_keys(), k.yaml);
    const std::string e = error_of([&] { config.validate(); });
    EXPECT_NE(e.find(k.message), std::string::npos) << k.yaml << " -> " << e;
    const DpoConfig dpo = load_text(dpo_keys(), k.yaml);
    EXPECT_NE(error_of([&] { dpo.validate(); }).find(k.message), std::string::npos) << k.yaml;
  }
  const std::vector<Case> grpo_cases = {
      {"{eval_dataset: e.jsonl, eval_strategy: steps, num_generations: 8}",
       "per_device_eval_batch_size (8) must be divisible"},  // a control: this one validates
      {"{eval_dataset: e.jsonl, eval_strategy: steps, per_device_eval_batch_size: 12}",
       "per_device_eval_batch_size (12) must be divisible by the number of generations used for "
       "evaluation (8 = num_generations)"},
      {"{eval_dataset: e.jsonl, eval_strategy: steps, num_generations_eval: 0}",
       "num_generations_eval = 0 is out of range (must be >= 1)"},
      {"{eval_dataset: e.jsonl, eval_strategy: steps, eval_generation_kwargs: {n: 2}}",
       "eval_generation_kwargs.n = 2 is set by the trainer; use num_generations_eval"},
      {"{eval_dataset: e.jsonl, eval_strategy: steps, eval_generation_kwargs: {top_p: 2}}",
       "eval_generation_kwargs: top_p must be in (0, 1], got 2"},
  };
  for (size_t i = 0; i < grpo_cases.size(); ++i) {
    GrpoConfig config = valid_grpo();
    grpo_keys().load_yaml_text(grpo_cases[i].yaml, "run.yaml", config);
    const std::string e = error_of([&] { config.validate(); });
    if (i == 0)
      EXPECT_EQ(e, "");
    else
      EXPECT_NE(e.find(grpo_cases[i].message), std::string::npos)
          << grpo_cases[i].yaml << " -> " << e;
  }
  // Greedy evaluation: temperature 0 is allowed for eval completions only.
  GrpoConfig g = valid_grpo();
  grpo_keys().load_yaml_text(
      "{eval_dataset: e.jsonl, eval_strategy: steps, num_generations_eval: 1, "
      "eval_generation_kwargs: {temperature: 0}}",
      "run.yaml", g);
  EXPECT_NO_THROW(g.validate());
  EXPECT_EQ(g.eval_sampling_params().temperature, 0.0);
  EXPECT_EQ(g.eval_sampling_params().n, 1);
  EXPECT_EQ(g.sampling_params().temperature, 1.0);
}

// dump -> load gives the same values, for configs far from the defaults.
template <class C>
void expect_round_trip(const KeyTable<C>& table, const C& config) {
  const std::string yaml = table.dump_yaml(config);
  C back;
  table.load_yaml_text(yaml, "dump.yaml", back);
  EXPECT_EQ(table.to_json(back), table.to_json(config)) << yaml;
  // Control: the dump is not the defaults' (the round trip moved real values).
  EXPECT_NE(table.to_json(C{}), table.to_json(config));
  // Every recorded key is in the dump; keys fp8rl ignores or translates are not.
  for (const KeySpec& k : table.keys())
    EXPECT_EQ(("\n" + yaml).find("\n" + k.name + ":") != std::string::npos, k.recorded) << k.name;
}

TEST(RunConfig, DumpLoadRoundTrip) {
  SftConfig s;
  s.model = "/models/tiny model";
  s.output_dir = "123";  // a string that reads like a number stays a string
  s.data = "true";       // and one that reads like a bool
  s.resume_from_checkpoint = "ck: \"quoted\" # not a comment";
  s.learning_rate = 1.0 / 3.0;  // needs every digit
  s.adam_epsilon = 1e-12;
  s.max_steps = 123456789012;
  s.lr_scheduler_type = LrSchedulerType::constant_with_warmup;
  s.optim = OptimizerKind::sgd;
  s.lora_target_modules = std::vector<std::string>{"q_proj", "down_proj"};
  s.warmup_ratio = 0.25;
  s.warmup_steps = 0.5;
  s.random_state = 3407;
  s.disable_dropout = true;
  s.completion_only_loss = true;
  s.assistant_only_loss = false;
  s.dry_run = true;
  s.init_lora_weights = "gaussian";
  s.dataset_text_field = "Ünïcode";
  expect_round_trip(sft_keys(), s);

  GrpoConfig g = valid_grpo();
  g.rewards = nlohmann::json::parse(
      R"([{"type": "answer_match", "weight": 2.0, "pattern": "\\boxed{(.*)}", "n": 3,
           "nested": {"list": [1, "2", null, false]}},
          {"reward_process": "python3 -m rewards --x '1'"}])");
  g.reward_weights = {0.5, 2.0};
  g.generation_batch_size = 16;
  g.min_p = 0.05;
  g.max_prompt_length.reset();
  g.scale_rewards = ScaleRewards::none;
  g.loss_type = GrpoLossType::cispo;
  g.epsilon_high = 5.0;
  g.kv_dtype = "fp8";
  g.vllm_importance_sampling_mode = RolloutCorrectionMode::token_truncate;
  g.fp8 = "row";
  g.delta = 1.5;
  g.top_entropy_quantile = 0.2;
  g.sapo_temperature_neg = 2.0;
  g.generation_kwargs = {{"min_tokens", 3}, {"stop", {"\n\n"}}};
  g.gpu_memory_utilization = 0.6;
  g.max_seq_length = 2048;
  g.max_lora_rank = 64;
  expect_round_trip(grpo_keys(), g);
  // An empty list and a null optional survive too.
  GrpoConfig empty = valid_grpo();
  empty.lora_target_modules = std::vector<std::string>{};
  empty.reward_weights.clear();
  expect_round_trip(grpo_keys(), empty);

  DpoConfig d;
  d.loss_type = DpoLossType::hinge;
  d.beta = 0.05;
  d.max_prompt_length.reset();
  d.ld_alpha = 0.5;
  expect_round_trip(dpo_keys(), d);

  RewardConfig r;
  r.center_rewards_coefficient = 0.01;
  r.max_length = 512;
  r.truncation = true;
  expect_round_trip(reward_keys(), r);
  // TRL's RewardConfig defaults.
  EXPECT_EQ(RewardConfig{}.learning_rate, 1e-4);
  EXPECT_FALSE(RewardConfig{}.center_rewards_coefficient.has_value());
  EXPECT_FALSE(load_text(reward_keys(), "center_rewards_coefficient: null\n")
                   .center_rewards_coefficient.has_value());
}

// PPOConfig's keys round-trip, with TRL's defaults, and TRL's plumbing keys are accepted.
TEST(RunConfig, PpoKeys) {
  PpoConfig p;
  p.num_ppo_epochs = 2;
  p.stop_token = "eos";
  p.missing_eos_penalty = 1.0;
  p.kl_estimator = "k3";
  p.value_adapter = "runs/rm";
  expect_round_trip(ppo_keys(), p);
  const PpoConfig d;
  EXPECT_EQ(d.learning_rate, 3e-6);
  EXPECT_EQ(d.num_ppo_epochs, 4);
  EXPECT_EQ(d.response_length, 53);
  EXPECT_EQ(d.temperature, 0.7);
  EXPECT_EQ(d.vf_coef, 0.1);
  EXPECT_EQ(d.cliprange_value, 0.2);
  EXPECT_EQ(d.lam, 0.95);
  EXPECT_EQ(d.kl_coef, 0.05);
  EXPECT_FALSE(d.stop_token.has_value());
  const PpoConfig t =
      load_text(ppo_keys(), "stop_token: eos\nsft_model_path: x\nkl_estimator: k3\n");
  EXPECT_EQ(*t.stop_token, "eos");
  EXPECT_EQ(t.kl_estimator, "k3");
  EXPECT_NE(error_of([] { load_text(ppo_keys(), "kl_estimator: k2\n"); }).find("kl_estimator"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              load_text(ppo_keys(), "environment: python3 env.py\n");
            }).find("ppo has no environments or tools yet"),
            std::string::npos);
}

TEST(RunConfig, JsonRecordNamesEveryKey) {
  const nlohmann::ordered_json j = grpo_keys().to_json(valid_grpo());
  const KeyTable<GrpoConfig> table = grpo_keys();
  const auto& keys = table.keys();
  EXPECT_EQ(j.size(), size_t(std::count_if(keys.begin(), keys.end(),
                                           [](const KeySpec& k) { return k.recorded; })));
  EXPECT_FALSE(j.contains("use_vllm"));
  EXPECT_FALSE(j.contains("use_gradient_checkpointing"));
  EXPECT_EQ(j.begin().key(), "data");  // table order
  EXPECT_EQ(j["loss_type"], "dapo");
  EXPECT_EQ(j["learning_rate"], 1e-6);
  EXPECT_TRUE(j["generation_batch_size"].is_null());
  EXPECT_TRUE(j["lora_target_modules"].is_null());  // resolved by the command before the run
}

TEST(RunConfig, NamesAreUniqueSnakeCase) {
  auto check = [](const auto& table) {
    std::map<std::string, std::string> owner;
    for (const KeySpec& k : table.keys()) {
      std::vector<std::string> names = k.aliases;
      names.push_back(k.name);
      for (const std::string& n : names) {
        EXPECT_TRUE(std::all_of(n.begin(), n.end(), [](char c) {
          return std::islower(c) || std::isdigit(c) || c == '_';
        })) << n;
        const auto [it, fresh] = owner.emplace(n, k.name);
        EXPECT_TRUE(fresh) << n << " names both " << it->second << " and " << k.name;
      }
      EXPECT_FALSE(k.help.empty()) << k.name;
    }
  };
  check(sft_keys());
  check(grpo_keys());
  check(dpo_keys());
  check(reward_keys());
}

TEST(RunConfig, FlagsInHelp) {
  CLI::App app;
  ConfigFlags<GrpoConfig> flags(app, grpo_keys());
  const std::string help = app.help();
  for (const char* flag :
       {"--config", "--learning-rate", "--lr", "--max-steps", "--steps", "--num-generations",
        "--loss-type", "--reward-process", "--vllm-importance-sampling-cap",
        "--lora-target-modules", "--target-modules", "--kv-memory", "--load-in-fp8",
        "--use-gradient-checkpointing", "--disable-dropout"})
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  // Keys accepted only to be ignored stay out of the help.
  for (const char* flag : {"--use-vllm", "--bf16", "--push-to-hub"})
    EXPECT_EQ(help.find(flag), std::string::npos) << flag;
  EXPECT_NE(help.find("dapo|grpo|bnpo|dr_grpo|cispo"), std::string::npos);
}

// A TRL GRPO config as the TRL docs and Unsloth notebooks write it: its plumbing keys load,
// print one note each and leave the run as the same file without them.
TEST(RunConfig, TrlPlumbingKeysAreIgnoredWithANote) {
  const std::string core = R"(learning_rate: 1.0e-5
num_generations: 4
max_steps: 10
)";
  const std::string plumbing = R"(use_vllm: true
vllm_mode: colocate
vllm_gpu_memory_utilization: 0.3
bf16: true
fp16: false
gradient_checkpointing_kwargs: {use_reentrant: false}
ddp_find_unused_parameters: false
dataloader_num_workers: 4
push_to_hub: false
)";
  const GrpoConfig with = load_text(grpo_keys(), core + plumbing);
  const GrpoConfig without = load_text(grpo_keys(), core);
  EXPECT_EQ(grpo_keys().to_json(with), grpo_keys().to_json(without));
  // Control: the core keys did move the config off its defaults.
  EXPECT_NE(grpo_keys().to_json(without), grpo_keys().to_json(GrpoConfig{}));
  // One note per key given, in table order, each naming its key and value.
  const nlohmann::json given = read_yaml(grpo_keys().keys(), core + plumbing, "run.yaml");
  const std::vector<std::string> notes = config_notes(grpo_keys().keys(), given);
  EXPECT_EQ(notes.size(), 9u);
  for (const std::string key : {"use_vllm", "vllm_mode", "bf16", "push_to_hub"}) {
    const auto it = std::find_if(notes.begin(), notes.end(), [&](const std::string& n) {
      return n.rfind("note: " + key + " = ", 0) == 0;
    });
    ASSERT_NE(it, notes.end()) << key;
    EXPECT_NE(it->find("ignored: fp8rl"), std::string::npos) << *it;
    EXPECT_EQ(it->find('\n'), std::string::npos) << *it;
  }
  EXPECT_TRUE(config_notes(grpo_keys().keys(), read_yaml(grpo_keys().keys(), core, "r")).empty());
  // The same keys as flags (a bare flag is true; a non-JSON value is text).
  const GrpoConfig flags = parse_args(grpo_keys(), {"--use-vllm", "--bf16", "true"}, false, false);
  EXPECT_EQ(grpo_keys().to_json(flags), grpo_keys().to_json(GrpoConfig{}));
  // Every command takes the accelerate / transformers ones.
  EXPECT_NO_THROW(load_text(sft_keys(), plumbing.substr(plumbing.find("bf16"))));
  EXPECT_NO_THROW(load_text(dpo_keys(), plumbing.substr(plumbing.find("bf16"))));
}

// Values of plumbing keys that would change the run are errors naming key and value; keys that
// change the result and are not implemented stay unknown keys.
TEST(RunConfig, PlumbingValuesThatWouldChangeTheRunAreErrors) {
  struct Case {
    std::string yaml, message;
  };
  for (const Case& c : std::vector<Case>{
           {"push_to_hub: true", "key 'push_to_hub' in run.yaml:1: true is not supported"},
           {"load_in_4bit: true",
            "key 'load_in_4bit' in run.yaml:1: true is not supported: "
            "fp8rl has no 4-bit path"},
           {"use_peft: false", "key 'use_peft' in run.yaml:1: false is not supported"},
           {"shuffle_dataset: false", "key 'shuffle_dataset'"},
           {"save_strategy: epoch", "key 'save_strategy'"},
           {"dataloader_drop_last: true", "key 'dataloader_drop_last'"},
       }) {
    const std::string e = error_of([&] { load_text(grpo_keys(), c.yaml + "\n"); });
    EXPECT_NE(e.find(c.message), std::string::npos) << c.yaml << " -> " << e;
  }
  EXPECT_NE(error_of([] {
              parse_args(grpo_keys(), {"--push-to-hub"});
            }).find("--push-to-hub: true is not supported"),
            std::string::npos);
  // Controls: the harmless values load.
  for (const char* ok : {"push_to_hub: false", "report_to: []", "report_to: [none]",
                         "load_in_4bit: false", "use_peft: true", "shuffle_dataset: true"})
    EXPECT_NO_THROW(load_text(grpo_keys(), std::string(ok) + "\n")) << ok;
}

// TRL's CLI names and Unsloth's from_pretrained / get_peft_model names.
TEST(RunConfig, TrlCliAndUnslothNames) {
  const GrpoConfig g = load_text(grpo_keys(), R"(model_name_or_path: /models/qwen3
dataset_name: data/prompts.jsonl
use_peft: true
load_in_fp8: true
max_seq_length: 1024
max_lora_rank: 32
lora_r: 32
gpu_memory_utilization: 0.6
use_gradient_checkpointing: unsloth
random_state: 3407
fast_inference: true
load_in_4bit: false
reward_funcs: [think_format_reward, get_soft_overlong_punishment]
)");
  EXPECT_EQ(g.model, "/models/qwen3");
  EXPECT_EQ(g.data, "data/prompts.jsonl");
  EXPECT_EQ(g.fp8, "row");
  EXPECT_EQ(g.max_seq_length, std::optional<int64_t>(1024));
  EXPECT_EQ(g.max_lora_rank, std::optional<int64_t>(32));
  EXPECT_EQ(g.gpu_memory_utilization, std::optional<double>(0.6));
  EXPECT_TRUE(g.gradient_checkpointing);
  EXPECT_TRUE(g.activation_offloading);
  EXPECT_EQ(g.random_state, std::optional<int64_t>(3407));
  EXPECT_EQ(g.adapter_init_seed(g.seed), 3407u);
  EXPECT_EQ(GrpoConfig{}.adapter_init_seed(42), 42u);  // control: seed without random_state
  ASSERT_EQ(g.rewards.size(), 2u);
  EXPECT_EQ(g.rewards[0]["type"], "regex");
  EXPECT_EQ(g.rewards[0]["name"], "think_format_reward");
  EXPECT_EQ(g.rewards[1]["mode"], "soft_overlong");
  EXPECT_EQ(g.rewards[1]["max_length"], 1280);
  GrpoConfig v = g;
  v.reward_weights.clear();
  EXPECT_NO_THROW(v.validate());
  // The dump records what they set, under fp8rl's names.
  const std::string yaml = grpo_keys().dump_yaml(g);
  EXPECT_NE(yaml.find("\nactivation_offloading: true\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\nfp8: row\n"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("use_gradient_checkpointing"), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("reward_funcs"), std::string::npos) << yaml;

  EXPECT_EQ(load_text(sft_keys(), "load_in_fp8: block\n").fp8, "block");
  EXPECT_EQ(load_text(sft_keys(), "load_in_fp8: false\n").fp8, "off");
  const SftConfig plain = load_text(sft_keys(), "use_gradient_checkpointing: true\n");
  EXPECT_TRUE(plain.gradient_checkpointing);
  EXPECT_FALSE(plain.activation_offloading);
  EXPECT_FALSE(load_text(sft_keys(), "use_gradient_checkpointing: false\n").gradient_checkpointing);
  EXPECT_EQ(load_text(sft_keys(), "max_seq_length: 2048\n").max_length, 2048);
  EXPECT_EQ(load_text(dpo_keys(), "max_seq_length: 2048\n").max_length, 2048);
  EXPECT_EQ(load_text(dpo_keys(), "disable_dropout: false\n").training_lora_dropout(), 0.05);
  EXPECT_EQ(load_text(grpo_keys(), "disable_dropout: true\n").training_lora_dropout(), 0.0);

  // Errors name key and value.
  struct Case {
    std::string yaml, message;
  };
  for (const Case& c : std::vector<Case>{
           {"reward_funcs: [accuracy_reward]", "'accuracy_reward' is TRL's math_verify reward"},
           {"reward_funcs: my_lib.rewards.fn", "'my_lib.rewards.fn' is not a built-in reward"},
           {"use_gradient_checkpointing: always", "expected one of true, false, unsloth"},
           {"use_gradient_checkpointing: unsloth\ngradient_checkpointing: true",
            "sets gradient_checkpointing again"},
           {"reward_funcs: [think_format_reward]\nrewards: []", "sets rewards again"},
           {"load_in_fp8: int4", "key 'load_in_fp8' in run.yaml:1: expected one of auto, off"},
       }) {
    const std::string e = error_of([&] { load_text(grpo_keys(), c.yaml + "\n"); });
    EXPECT_NE(e.find(c.message), std::string::npos) << c.yaml << " -> " << e;
  }
  for (const Case& c : std::vector<Case>{
           {"max_lora_rank: 8", "lora_r = 16 is above max_lora_rank = 8"},
           {"max_seq_length: 600",
            "max_prompt_length (512) + max_completion_length (512) exceed "
            "max_seq_length (600)"},
           {"gpu_memory_utilization: 1.5", "gpu_memory_utilization = 1.5 is out of range"},
           {"gpu_memory_utilization: 0.5\nkv_memory: 4", "give one"},
           {"random_state: -1", "random_state = -1 is out of range"},
       }) {
    GrpoConfig config = valid_grpo();
    grpo_keys().load_yaml_text(c.yaml + "\n", "run.yaml", config);
    const std::string e = error_of([&] { config.validate(); });
    EXPECT_NE(e.find(c.message), std::string::npos) << c.yaml << " -> " << e;
  }
}

// PEFT's TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING for the architectures fp8rl runs:
// q_proj and v_proj for each; model types it lacks have no default.
TEST(RunConfig, UnsetTargetModulesArePeftsDefault) {
  for (const char* type : {"llama", "qwen2", "qwen3", "mistral", "gemma3_text"})
    EXPECT_EQ(peft_default_target_modules(type), (std::vector<std::string>{"q_proj", "v_proj"}))
        << type;
  // Controls: PEFT has no entry for "gemma3" (the multimodal wrapper) nor for unknown types.
  EXPECT_FALSE(peft_default_target_modules("gemma3").has_value());
  EXPECT_FALSE(peft_default_target_modules("").has_value());

  const fs::path dir = fs::path(::testing::TempDir()) / "run_config_models";
  auto model = [&](const std::string& type) {
    const fs::path m = dir / (type.empty() ? "none" : type);
    fs::create_directories(m);
    std::ofstream(m / "config.json") << nlohmann::json{{"model_type", type}}.dump();
    return m.string();
  };
  SftConfig llama;
  llama.model = model("llama");
  llama.resolve_target_modules();
  EXPECT_EQ(llama.lora_target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(llama.lora_config().target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  // Control: a value given stays.
  SftConfig given = load_text(sft_keys(), "lora_target_modules: all-linear\n");
  given.model = model("qwen3");
  given.resolve_target_modules();
  EXPECT_EQ(given.lora_target_modules, std::vector<std::string>{"all-linear"});
  // No default for the model type: an error naming the key and the type.
  SftConfig other;
  other.model = model("gpt2");
  const std::string e = error_of([&] { other.resolve_target_modules(); });
  EXPECT_NE(e.find("lora_target_modules is unset and PEFT has no default for model_type 'gpt2'"),
            std::string::npos)
      << e;
  // Unresolved, the adapter cannot be made.
  EXPECT_NE(error_of([] { SftConfig{}.lora_config(); }).find("lora_target_modules is unset"),
            std::string::npos);
  fs::remove_all(dir);
}

// reward_funcs' think_format_reward scores TRL's docstring examples as TRL does.
TEST(RunConfig, RewardFuncsThinkFormatAsTrl) {
  const GrpoConfig g = load_text(grpo_keys(), "reward_funcs: think_format_reward\n");
  RewardSet set = make_reward_set(g.rewards);
  RewardBatch b;
  b.completions = {"<think>\nThis is my reasoning.\n</think>\nThis is my answer.",
                   "<think>\nThis is my reasoning.\nThis is my answer.",
                   "<think>a</think><think>b</think>", "x <think>a</think>"};
  b.prompts.assign(b.completions.size(), "p");
  b.completion_ids.assign(b.completions.size(), {1});
  b.columns = nlohmann::json::object();
  const CombinedRewards r = set.score(b);
  EXPECT_EQ(r.names, std::vector<std::string>{"think_format_reward"});
  EXPECT_EQ(r.total, (std::vector<double>{1.0, 0.0, 0.0, 0.0}));
}

// report_to as transformers takes it: a name or a list, none and [] for no tracker; a tracker
// fp8rl does not have is an error naming it. logging_dir is a path.
TEST(RunConfig, ReportToAsTransformers) {
  using List = std::vector<std::string>;
  EXPECT_EQ(SftConfig().report_to, List{});  // transformers >= 5: none
  EXPECT_EQ(load_text(sft_keys(), "report_to: tensorboard").report_to, List{"tensorboard"});
  EXPECT_EQ(load_text(dpo_keys(), "report_to: [tensorboard]").report_to, List{"tensorboard"});
  EXPECT_EQ(load_text(sft_keys(), "report_to: none").report_to, List{"none"});
  EXPECT_EQ(load_text(sft_keys(), "report_to: []").report_to, List{});
  EXPECT_EQ(load_text(sft_keys(), "logging_dir: /tmp/tb").logging_dir, "/tmp/tb");
  EXPECT_EQ(load_text(sft_keys(), "logging_dir: null").logging_dir, "");
  for (const char* yaml :
       {"report_to: tensorboard", "report_to: all", "report_to: none", "report_to: []"})
    EXPECT_NO_THROW(load_text(sft_keys(), yaml).validate()) << yaml;
  const SftConfig flags =
      parse_args(sft_keys(), {"--report-to", "tensorboard", "--logging-dir", "tb"});
  EXPECT_EQ(flags.report_to, List{"tensorboard"});
  EXPECT_EQ(flags.logging_dir, "tb");
  EXPECT_NE(error_of([] {
              parse_args(sft_keys(), {"--report-to", "wandb"});
            }).find("report_to: 'wandb' is a tracker fp8rl does not have"),
            std::string::npos);
  GrpoConfig g = valid_grpo();
  grpo_keys().load_yaml_text("report_to: [tensorboard, mlflow]", "run.yaml", g);
  EXPECT_NE(error_of([&] { g.validate(); }).find("'mlflow'"), std::string::npos);
}

}  // namespace
