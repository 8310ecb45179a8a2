// Hostile inputs, continued: template budgets, outputs over inputs, messages, checkpoints
// accepted silently, the fuzzers' findings, and the controls on clean inputs.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hostile/hostile_case.h"

namespace fp8rl::test::hostile {

// ---- chat templates: the execution budget, through the CLI ----

namespace {

HostileRun template_case(const fs::path& d, const std::string& tpl, Expect expect) {
  const fs::path m = copy_demo_model(d / "model");
  edit_json(m / "tokenizer_config.json", [&](ojson& c) { c["chat_template"] = tpl; });
  return HostileRun{
      chat_template(m, messages_file(d)), std::move(expect), {m, d / "messages.json"}};
}

}  // namespace

std::vector<Case> template_cases() {
  const std::string budget = "chat template exceeded its budget of ";
  std::vector<std::pair<std::string, std::string>> over = {
      {"NestedLoops",
       "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}."
       "{% endfor %}{% endfor %}{% endfor %}"},
      {"ExponentialMacros",
       "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% else %}x{% endif %}"
       "{% endmacro %}{{ f(60) }}"},
      {"UnboundedRecursion", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"},
      {"StringRepeatOverflow", "{{ 'x' * 10**18 }}"},
      {"StringRepeatOverflow64", "{{ 'abcd' * 2**62 }}"},
      {"CenterWidth", "{{ 'ab'|center(10**12) }}"},
      {"FormatWidth", "{{ '{:>99999999999999999999999}'.format('a') }}"},
      {"PercentWidth", "{{ '%10000000000d' % 1 }}"},
      {"TojsonIndent", "{{ {'a': [1]}|tojson(indent=10**9) }}"},
      {"Batch", "{{ [1, 2, 3]|batch(10**9) }}"},
      {"DoublingString",
       "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
       "{% endfor %}"},
      {"ManyStringsKept",
       "{% set ns = namespace(l=[]) %}{% for i in range(3000) %}{% set ns.l = ns.l + ['x' * "
       "1000000] %}{% endfor %}"},
      {"OutputFlood", "{% for i in range(100000) %}{{ 'x' * 10000 }}{% endfor %}"},
  };
  std::vector<Case> cases;
  for (const auto& [name, tpl] : over) {
    cases.push_back({"Template_" + name, [tpl, budget](const fs::path& d) {
                       HostileRun r = template_case(d, tpl, error(budget));
                       // The budget is 256 MB per string and 1 GiB in total: no case needs more.
                       r.expect.max_rss_mb = 1536;
                       return r;
                     }});
  }
  // 100k macro definitions: linear, so it renders (quadratic lookups took minutes).
  cases.push_back({"Template_100kMacrosRender", [](const fs::path& d) {
                     std::string tpl;
                     for (int i = 0; i < 100000; ++i)
                       tpl += "{% macro m" + std::to_string(i) + "() %}" + std::to_string(i) +
                              "{% endmacro %}";
                     tpl += "{{ m0() }},{{ m99999() }}";
                     HostileRun r = template_case(d, tpl, success(stdout_has("0,99999")));
                     r.expect.max_seconds = 15;
                     return r;
                   }});
  return cases;
}

// ---- outputs that would destroy inputs or replace special files ----

// A model directory, a second copy to compare against, and the case's command.

std::vector<Case> destroyed_data_cases() {
  std::vector<Case> cases;
  const std::vector<std::pair<std::string, std::function<std::string(const fs::path&)>>> outs = {
      {"Itself", [](const fs::path& m) { return m.string(); }},
      {"TrailingSlash", [](const fs::path& m) { return m.string() + "/"; }},
      {"Dot", [](const fs::path& m) { return m.string() + "/."; }},
      {"DotDot", [](const fs::path& m) { return (m / ".." / m.filename()).string(); }},
      {"Symlink",
       [](const fs::path& m) {
         fs::create_directory_symlink(m, m.parent_path() / "link");
         return (m.parent_path() / "link").string();
       }},
      {"ParentDirectory", [](const fs::path& m) { return m.parent_path().string(); }},
  };
  for (const auto& [name, out] : outs) {
    cases.push_back({"Destroy_QuantizeOnto" + name, [out](const fs::path& d) {
                       const fs::path m = copy_demo_model(d / "model");
                       const std::string target = out(m);
                       HostileRun r{{"quantize", m, target, "--scheme", "row"},
                                    error("refusing to write"),
                                    {d}};
                       r.must_load = {m};
                       return r;
                     }});
  }
  cases.push_back({"Destroy_LogitsOutOntoFifo", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     make_fifo(d / "out.npy");
                     return HostileRun{{"logits", m, "--ids", "1", "--out", d / "out.npy"},
                                       error("is a FIFO"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_LogitsOutOntoSymlink", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "owned.txt", "keep");
                     fs::create_symlink(d / "owned.txt", d / "out.npy");
                     return HostileRun{{"logits", m, "--ids", "1", "--out", d / "out.npy"},
                                       error("is a symbolic link"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_LogitsOutOntoModelFile", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     HostileRun r{{"logits", m, "--ids", "1", "--out", m / "model.safetensors"},
                                  error("inside the input"),
                                  {d}};
                     r.must_load = {m};
                     return r;
                   }});
  // bench --out (the JSON result): the same output rules, checked before the benchmark runs.
  cases.push_back({"Destroy_BenchOutOntoFifo", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     make_fifo(d / "out.json");
                     return HostileRun{{"bench", "forward", "--model", m, "--device", "cpu",
                                        "--tokens", "8", "--out", d / "out.json"},
                                       error("is a FIFO"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_BenchOutOntoSymlink", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "owned.txt", "keep");
                     fs::create_symlink(d / "owned.txt", d / "out.json");
                     return HostileRun{{"bench", "generate", "--model", m, "--device", "cpu",
                                        "--prompts", "1", "--n", "1", "--prompt-tokens", "4",
                                        "--max-tokens", "2", "--out", d / "out.json"},
                                       error("is a symbolic link"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_BenchOutOntoModelConfig", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     HostileRun r{{"bench", "train", "--model", m, "--device", "cpu", "--batch",
                                   "1", "--seq", "8", "--out", m / "config.json"},
                                  error("inside the input"),
                                  {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_GenerateOutOntoPrompts", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1, 2]})"
                                                      "\n");
                     return HostileRun{generate(m, d / "prompts.jsonl", d / "prompts.jsonl"),
                                       error("prompts.jsonl"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_SftOutOntoModel", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "data.jsonl", kSftRow + "\n");
                     HostileRun r{sft(m, d / "data.jsonl", m), error("refusing to write"), {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_GenerateOutOntoFifo", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1, 2]})"
                                                      "\n");
                     make_fifo(d / "out.jsonl");
                     return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                                       error("is a FIFO"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_GenerateOutOntoSymlink", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1, 2]})"
                                                      "\n");
                     write_bytes(d / "owned.txt", "keep");
                     fs::create_symlink(d / "owned.txt", d / "out.jsonl");
                     return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                                       error("is a symbolic link"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_SftOutOntoDataset", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "data.jsonl", kSftRow + "\n");
                     return HostileRun{sft(m, d / "data.jsonl", d / "data.jsonl"),
                                       error("refusing to write"),
                                       {d}};
                   }});
  cases.push_back({"Destroy_GrpoOutputDirHoldsTheModel", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     write_bytes(d / "data.jsonl", kGrpoRow + "\n");
                     const fs::path cfg = grpo_config(d, m, d / "data.jsonl", "");
                     std::vector<std::string> args = grpo(cfg);
                     args.insert(args.end(), {"--output-dir", d.string()});
                     HostileRun r{args, error("refusing to write"), {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_ReportOutOntoModelConfig", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     fs::create_directories(d / "run");
                     write_bytes(d / "run/metrics.jsonl", R"({"step": 1, "loss": 0.5})"
                                                          "\n");
                     HostileRun r{{"report", d / "run", "--out", m / "config.json"},
                                  error("refusing to overwrite"),
                                  {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_ReportOverItsEarlierReport", [](const fs::path& d) {
                     // The run's own report.html, written by an earlier report, is replaced.
                     fs::create_directories(d / "run");
                     write_bytes(d / "run/metrics.jsonl", R"({"step": 1, "loss": 0.5})"
                                                          "\n");
                     const ProcessResult first = fp8rl({"report", d / "run"});
                     if (first.exit_code != 0) throw std::runtime_error("report: " + first.err);
                     write_bytes(d / "run/metrics.jsonl", R"({"step": 1, "loss": 0.5})"
                                                          "\n"
                                                          R"({"step": 2, "loss": 0.25})"
                                                          "\n");
                     return HostileRun{{"report", d / "run"},
                                       success([d](const ProcessResult&) {
                                         return read_bytes(d / "run/report.html").find("0.25") !=
                                                        std::string::npos
                                                    ? ""
                                                    : "report.html not replaced";
                                       }),
                                       {d / "run/metrics.jsonl"}};
                   }});
  cases.push_back({"Destroy_InitOverModelWithoutForce", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     HostileRun r{{"init", "--arch", "qwen3", "--preset", "tiny", "--out", m},
                                  error("already holds a model: give --force"),
                                  {d}};
                     r.must_load = {m};
                     return r;
                   }});
  cases.push_back({"Destroy_InitOverModelWithForce", [](const fs::path& d) {
                     const fs::path m = copy_demo_model(d / "model");
                     HostileRun r{
                         {"init", "--arch", "qwen3", "--preset", "tiny", "--out", m, "--force"},
                         success([m](const ProcessResult&) {
                           // The tiny preset replaced the demo model (another hidden size).
                           const ojson c = ojson::parse(read_bytes(m / "config.json"));
                           return c["hidden_size"] != 128 ? "" : "config.json not replaced";
                         }),
                         {}};
                     r.must_load = {m};
                     return r;
                   }});
  return cases;
}

// ---- messages: one line, naming the value and the range ----

std::vector<Case> message_cases() {
  return {
      {"Message_MaxStepsMinusTwo",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kSftRow + "\n");
         std::vector<std::string> args = sft(m, d / "data.jsonl", d / "out");
         args[7] = "-2";
         return HostileRun{args, error("max_steps"), {m, d / "data.jsonl"}};
       }},
      {"Message_TemperatureNan",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         std::vector<std::string> args = generate(m, d / "prompts.jsonl", d / "out.jsonl");
         args.insert(args.end(), {"--temperature", "nan"});
         return HostileRun{args, error("temperature"), {m, d / "prompts.jsonl"}};
       }},
      {"Message_AdapterAlphaNegative",
       [](const fs::path& d) {
         // adapter_config.json's lora_alpha scales every update: -1e308 gave garbage logits.
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         fs::create_directories(d / "adapter");
         write_bytes(d / "adapter" / "adapter_config.json",
                     R"({"peft_type": "LORA", "r": 4, "lora_alpha": -1e308, )"
                     R"("target_modules": ["q_proj"]})");
         write_bytes(d / "adapter" / "adapter_model.safetensors", "");
         std::vector<std::string> args = generate(m, d / "prompts.jsonl", d / "out.jsonl");
         args.insert(args.end(), {"--adapter", (d / "adapter").string()});
         return HostileRun{args,
                           error("lora_alpha = -1e+308 must be positive and finite"),
                           {m, d / "prompts.jsonl", d / "adapter"}};
       }},
      {"Message_RewardTimeoutOverflows",
       [](const fs::path& d) {
         // 1e19 s overflowed the wait's milliseconds into a negative timeout.
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         std::string yaml = read_bytes(cfg);
         const std::string rewards = "  - {type: answer_match, mode: numeric}";
         yaml.replace(yaml.find(rewards), rewards.size(),
                      "  - {reward_process: cat, timeout_s: 1e19}");
         write_bytes(cfg, yaml);
         return HostileRun{grpo(cfg),
                           error("'timeout_s' must be <= 1000000000, got 1e+19"),
                           {m, d / "data.jsonl", cfg}};
       }},
      {"Message_RewardProcessExitsHoldingStdout",
       [](const fs::path& d) {
         // It exits while a program it started keeps its stdout open: no end of file came, and
         // only timeout_s (300 s by default) ended the wait.
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         std::string yaml = read_bytes(cfg);
         const std::string rewards = "  - {type: answer_match, mode: numeric}";
         yaml.replace(yaml.find(rewards), rewards.size(),
                      "  - {reward_process: 'sleep 50 & read -r line; exit 0'}");
         write_bytes(cfg, yaml);
         HostileRun r{grpo(cfg),
                      error("exited with status 0 without an answer, while a program it started "
                            "still holds its stdout open"),
                      {m, d / "data.jsonl", cfg}};
         r.expect.max_seconds = 20;
         return r;
       }},
      {"Message_DpoContentNotAString",
       [](const fs::path& d) {
         // Reported as the renders' token-prefix mismatch.
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", R"({"prompt": [{"role": "user", "content": "hi"}], )"
                                       R"("chosen": [{"role": "assistant", "content": 5}], )"
                                       R"("rejected": [{"role": "assistant", "content": "no"}]})"
                                       "\n");
         return HostileRun{dpo(m, d / "data.jsonl", d / "out"),
                           error("data.jsonl:1: \"chosen\"[0].content must be a string, got 5"),
                           {m, d / "data.jsonl"}};
       }},
      {"Message_ReportMetricsNumberOverflow",
       [](const fs::path& d) {
         fs::create_directories(d / "run");
         write_bytes(d / "run/metrics.jsonl", R"({"step": 1, "loss": 0.5})"
                                              "\n"
                                              R"({"step": 2, "loss": 1e999})"
                                              "\n");
         return HostileRun{{"report", d / "run", "--out", d / "report.html"},
                           error("metrics.jsonl:2:"),
                           {d / "run"}};
       }},
      {"Message_UnknownFlag",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{{"info", m, "--frobnicate"}, error("--frobnicate"), {m}};
       }},
      {"Message_IdsInt64Min",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{{"logits", m, "--ids", "-9223372036854775808", "--out", d / "x.npy"},
                           error("-9223372036854775808"),
                           {m}};
       }},
  };
}

// ---- checkpoints that must not be accepted silently ----

namespace {

// `args` with its --max-steps set to `steps`.
std::vector<std::string> with_max_steps(std::vector<std::string> args, const std::string& steps) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--max-steps") args[i + 1] = steps;
  return args;
}

// A finished one-step run of `args` (writing `run`/checkpoint-1), that checkpoint's files
// spoilt by `spoil`, then a resume to step 2, expected to fail naming `fragment`.
HostileRun resume_case(const std::vector<std::string>& args, const fs::path& run,
                       std::vector<fs::path> inputs,
                       const std::function<void(const fs::path&)>& spoil,
                       const std::string& fragment) {
  const ProcessResult first = fp8rl(args);
  if (first.exit_code != 0) throw std::runtime_error("the run to resume: " + first.err);
  spoil(run / "checkpoint-1");
  std::vector<std::string> resume = with_max_steps(args, "2");
  resume.push_back("--resume");
  inputs.push_back(run / "checkpoint-1");
  return HostileRun{resume, error(fragment), inputs};
}

// Replaces the run state (JSON metadata) of a checkpoint's trainer_state.safetensors.
void edit_run_state(const fs::path& checkpoint, const std::function<void(ojson&)>& edit) {
  RawSafetensors raw = RawSafetensors::read(checkpoint / "trainer_state.safetensors");
  ojson state = ojson::parse(raw.header["__metadata__"]["train.run_state"].get<std::string>());
  edit(state);
  raw.header["__metadata__"]["train.run_state"] = state.dump();
  raw.write(checkpoint / "trainer_state.safetensors");
}

// Sets float `index` of tensor `name` in the safetensors file `file` to `value`.
void set_float(const fs::path& file, const std::string& name, size_t index, float value) {
  RawSafetensors raw = RawSafetensors::read(file);
  std::memcpy(raw.data.at(name).data() + 4 * index, &value, 4);
  raw.write(file);
}

HostileRun dpo_resume_case(const fs::path& d, const std::function<void(const fs::path&)>& spoil,
                           const std::string& fragment) {
  const fs::path m = copy_demo_model(d / "model");
  write_bytes(d / "data.jsonl", kDpoRow + "\n");
  return resume_case(dpo(m, d / "data.jsonl", d / "out"), d / "out", {m, d / "data.jsonl"}, spoil,
                     fragment);
}

// A finished one-step GRPO run whose checkpoint's saved round is edited by `edit`, resumed.
HostileRun grpo_round_case(const fs::path& d, const std::function<void(ojson&)>& edit,
                           const std::string& fragment) {
  const fs::path m = copy_demo_model(d / "model");
  write_bytes(d / "data.jsonl", kGrpoRow + "\n");
  const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
  return resume_case(
      grpo(cfg), d / "run", {m, d / "data.jsonl", cfg},
      [&](const fs::path& c) {
        edit_run_state(c, [&](ojson& s) {
          if (!s.contains("round")) throw std::runtime_error("the checkpoint saved no round");
          edit(s["round"]);
        });
      },
      fragment);
}

}  // namespace

std::vector<Case> silent_cases() {
  return {
      {"Silent_GrpoResumeNegativeNextPrompt",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         return resume_case(
             grpo(cfg), d / "run", {m, d / "data.jsonl", cfg},
             [](const fs::path& c) { edit_run_state(c, [](ojson& s) { s["next_prompt"] = -7; }); },
             "'next_prompt' is -7");
       }},
      {"Silent_GrpoResumeRoundPromptOutsideTheData",
       [](const fs::path& d) {
         // An unused round (micro_used 0) whose completion points past the one-row dataset: the
         // micro-step read the prompt outside the data.
         return grpo_round_case(
             d,
             [](ojson& r) {
               r["micro_used"] = 0;
               r["prompt"][0] = 7;
             },
             "'prompt'[0] is 7, expected an integer in [0, 0]");
       }},
      {"Silent_GrpoResumeRoundMicroUsedNegative",
       [](const fs::path& d) {
         return grpo_round_case(
             d, [](ojson& r) { r["micro_used"] = -3; }, "'micro_used' is -3");
       }},
      {"Silent_GrpoResumeRoundTokenOutsideVocab",
       [](const fs::path& d) {
         return grpo_round_case(
             d,
             [](ojson& r) {
               r["micro_used"] = 0;
               r["ids"][0][0] = 1000000000;
             },
             "'ids'[0][0] is 1000000000");
       }},
      {"Silent_GrpoResumeRoundMaskShort",
       [](const fs::path& d) {
         return grpo_round_case(
             d,
             [](ojson& r) {
               r["micro_used"] = 0;
               r["mask"][1] = ojson::array();
             },
             "'mask'[1] must be a list of");
       }},
      {"Silent_ResumeMetricsLogFifo",
       [](const fs::path& d) {
         // The kept log was read with a plain stream: a FIFO there blocked the resume in open().
         return dpo_resume_case(
             d, [](const fs::path& c) { make_fifo(c.parent_path() / "metrics.jsonl"); },
             "metrics.jsonl' is not a regular file");
       }},
      {"Silent_ResumeMetricsLogDevZero",
       [](const fs::path& d) {
         // /dev/zero there was one endless line read until memory ran out.
         return dpo_resume_case(
             d,
             [](const fs::path& c) {
               make_special(c.parent_path() / "metrics.jsonl", Special::dev_zero);
             },
             "metrics.jsonl' is not a regular file");
       }},
      {"Silent_DpoResumeNegativeBatch",
       [](const fs::path& d) {
         return dpo_resume_case(
             d, [](const fs::path& c) { edit_run_state(c, [](ojson& s) { s["batch"] = -3; }); },
             "'batch' is -3");
       }},
      {"Silent_SftResumeNegativeBatch",
       [](const fs::path& d) {
         // Read without a range check: the step indexed before the epoch's plan.
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kSftRow + "\n");
         return resume_case(
             sft(m, d / "data.jsonl", d / "out"), d / "out", {m, d / "data.jsonl"},
             [](const fs::path& c) { edit_run_state(c, [](ojson& s) { s["batch"] = -2; }); },
             "'batch' is -2");
       }},
      {"Silent_ResumeRunStateNestedDeep",
       [](const fs::path& d) {
         // JSON text inside a metadata string: the header's depth limit does not reach it.
         return dpo_resume_case(
             d,
             [](const fs::path& c) {
               RawSafetensors raw = RawSafetensors::read(c / "trainer_state.safetensors");
               raw.header["__metadata__"]["train.run_state"] = deep_array(100000);
               raw.write(c / "trainer_state.safetensors");
             },
             "limit of 256");
       }},
      {"Silent_DpoResumeNegativeEpoch",
       [](const fs::path& d) {
         return dpo_resume_case(
             d, [](const fs::path& c) { edit_run_state(c, [](ojson& s) { s["epoch"] = -1; }); },
             "'epoch' is -1");
       }},
      {"Silent_ResumeNanMoment",
       [](const fs::path& d) {
         return dpo_resume_case(
             d,
             [](const fs::path& c) {
               set_float(c / "trainer_state.safetensors", "exp_avg", 3, std::nanf(""));
             },
             "tensor 'exp_avg' has nan");
       }},
      {"Silent_ResumeNegativeSecondMoment",
       [](const fs::path& d) {
         return dpo_resume_case(
             d,
             [](const fs::path& c) {
               set_float(c / "trainer_state.safetensors", "exp_avg_sq", 0, -1.0f);
             },
             "tensor 'exp_avg_sq' has -1");
       }},
      {"Silent_ResumeNanAdapterWeight",
       [](const fs::path& d) {
         return dpo_resume_case(
             d,
             [](const fs::path& c) {
               // All-ones bytes are NaN in F32 and in BF16.
               RawSafetensors raw = RawSafetensors::read(c / "adapter_model.safetensors");
               raw.data.begin()->second.replace(0, 4, 4, '\xff');
               raw.write(c / "adapter_model.safetensors");
             },
             "lora_A.weight' element 0 is");
       }},
      {"Silent_Qwen3LabelledLlama",
       [](const fs::path& d) {
         return config_case(
             d,
             [](ojson& c) {
               c["architectures"] = {"LlamaForCausalLM"};
               c["model_type"] = "llama";
             },
             "unexpected tensors");
       }},
      {"Silent_Gemma3LabelledLlama",
       [](const fs::path& d) {
         const fs::path m = d / "gemma";
         const ProcessResult init =
             fp8rl({"init", "--arch", "gemma3", "--preset", "tiny", "--out", m});
         if (init.exit_code != 0) throw std::runtime_error("init gemma3: " + init.err);
         edit_json(m / "config.json", [](ojson& c) {
           c["architectures"] = {"LlamaForCausalLM"};
           c["model_type"] = "llama";
         });
         return HostileRun{
             {"logits", m, "--ids", "1,2", "--out", d / "x.npy"}, error("tensors"), {m}};
       }},
      {"Silent_TieBesideLmHead",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         raw.header["lm_head.weight"] = raw.header["model.embed_tokens.weight"];
         raw.data["lm_head.weight"] = raw.data["model.embed_tokens.weight"];
         raw.write(m / "model.safetensors");
         return HostileRun{{"logits", m, "--ids", "1,2", "--out", d / "x.npy"},
                           error("tie_word_embeddings"),
                           {m}};
       }},
      {"Silent_NanWeight",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         const float nan = std::nanf("");
         std::memcpy(raw.data["model.layers.1.mlp.up_proj.weight"].data() + 40, &nan, 4);
         raw.write(m / "model.safetensors");
         return HostileRun{{"logits", m, "--ids", "1,2", "--out", d / "x.npy"},
                           error("model.layers.1.mlp.up_proj.weight"),
                           {m}};
       }},
      {"Silent_InfWeight",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         const float inf = INFINITY;
         std::memcpy(raw.data["model.norm.weight"].data(), &inf, 4);
         raw.write(m / "model.safetensors");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1]})"
                                          "\n");
         return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                           error("model.norm.weight"),
                           {m, d / "prompts.jsonl"}};
       }},
      {"Silent_UnknownDtype",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         raw.header["model.norm.weight"]["dtype"] = "F12";
         raw.write(m / "model.safetensors");
         return HostileRun{info(m), error("F12"), {m}};
       }},
      {"Silent_InfoWithTensorsMissing",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         RawSafetensors raw = RawSafetensors::read(m / "model.safetensors");
         raw.header.erase("model.layers.0.mlp.down_proj.weight");
         raw.data.erase("model.layers.0.mlp.down_proj.weight");
         raw.write(m / "model.safetensors");
         return HostileRun{
             info(m), error("missing tensors (1): model.layers.0.mlp.down_proj.weight"), {m}};
       }},
  };
}

// ---- the fuzzers' kept findings, fed to the commands that read their format ----

std::vector<Case> fuzz_finding_cases() {
  std::vector<Case> cases;
  const fs::path root = fs::path(FP8RL_SOURCE_DIR) / "fuzz/regressions";
  if (!fs::exists(root)) return cases;
  for (const auto& format : fs::directory_iterator(root)) {
    for (const auto& file : fs::directory_iterator(format.path())) {
      const std::string kind = format.path().filename().string();
      std::string name = "Fuzz_" + kind + "_" + file.path().stem().string();
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      const fs::path input = file.path();
      cases.push_back({name, [kind, input](const fs::path& d) {
                         const fs::path m = copy_demo_model(d / "model");
                         if (kind == "quant_config") {
                           // A quantization_config in config.json: info reads it.
                           const std::string q = read_bytes(input);
                           write_bytes(m / "config.json",
                                       read_bytes(m / "config.json").substr(0, 1) +
                                           "\"quantization_config\": " + q + ", " +
                                           read_bytes(m / "config.json").substr(1));
                           return HostileRun{info(m), error("quantization_config"), {m}};
                         }
                         if (kind == "run_config") {
                           // A run config for grpo, with the model and data given as flags: a clean
                           // error or a run, never a crash.
                           write_bytes(d / "run.yaml", read_bytes(input));
                           write_bytes(d / "data.jsonl", kGrpoRow + "\n");
                           std::vector<std::string> args = grpo(d / "run.yaml");
                           args.insert(args.end(), {"--model", m.string(), "--data",
                                                    (d / "data.jsonl").string(), "--output-dir",
                                                    (d / "run").string()});
                           Expect e;
                           e.outcome = Outcome::error_or_success;
                           return HostileRun{args, e, {m, d / "run.yaml", d / "data.jsonl"}};
                         }
                         throw std::runtime_error("no command for fuzz findings of " + kind);
                       }});
    }
  }
  return cases;
}

// ---- controls: each command of the cases on clean inputs succeeds, so that the cases' errors
// come from what they spoil, not from a command line that could never work ----

namespace {

std::function<std::string(const ProcessResult&)> file_exists(const fs::path& path) {
  return [path](const ProcessResult&) {
    return fs::exists(path) ? "" : path.string() + " was not written";
  };
}

}  // namespace

std::vector<Case> control_cases() {
  return {
      {"Control_Info",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{info(m), success(stdout_has("Qwen3ForCausalLM")), {m}};
       }},
      {"Control_Logits",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{{"logits", m, "--ids", "1,2,3", "--out", d / "x.npy"},
                           success(file_exists(d / "x.npy")),
                           {m}};
       }},
      {"Control_Tokenize",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{
             tokenize(m, text_file(d)), success(stdout_has("[")), {m, d / "text.txt"}};
       }},
      {"Control_ChatTemplate",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         return HostileRun{chat_template(m, messages_file(d)),
                           success(stdout_has("hi")),
                           {m, d / "messages.json"}};
       }},
      {"Control_Generate",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "prompts.jsonl", R"({"prompt_ids": [1, 2]})"
                                          "\n");
         return HostileRun{generate(m, d / "prompts.jsonl", d / "out.jsonl"),
                           success(file_exists(d / "out.jsonl")),
                           {m, d / "prompts.jsonl"}};
       }},
      {"Control_Quantize",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         HostileRun r{{"quantize", m, d / "q", "--scheme", "row"},
                      success(file_exists(d / "q/model.safetensors")),
                      {m}};
         r.must_load = {m, d / "q"};
         return r;
       }},
      {"Control_Sft",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kSftRow + "\n");
         return HostileRun{sft(m, d / "data.jsonl", d / "out"),
                           success(file_exists(d / "out/adapter_model.safetensors")),
                           {m, d / "data.jsonl"}};
       }},
      {"Control_Grpo",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kGrpoRow + "\n");
         const fs::path cfg = grpo_config(d, m, d / "data.jsonl");
         return HostileRun{grpo(cfg),
                           success(file_exists(d / "run/adapter_model.safetensors")),
                           {m, d / "data.jsonl", cfg}};
       }},
      {"Control_Dpo",
       [](const fs::path& d) {
         const fs::path m = copy_demo_model(d / "model");
         write_bytes(d / "data.jsonl", kDpoRow + "\n");
         return HostileRun{dpo(m, d / "data.jsonl", d / "out"),
                           success(file_exists(d / "out/adapter_model.safetensors")),
                           {m, d / "data.jsonl"}};
       }},
  };
}

}  // namespace fp8rl::test::hostile
