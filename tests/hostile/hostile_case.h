// The cases of the hostile-input suite: what one case is (a command, its expectation, the paths
// that must not change), the runner's limits, and the command lines of the CLI that the cases
// spoil the inputs of. The cases themselves, by class, are in cases_*.cpp.
#pragma once

#include <sys/resource.h>

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "hostile/hostile_inputs.h"
#include "hostile/verdict.h"
#include "process_run.h"

namespace fp8rl::test::hostile {

// A normal run of the demo model (generate, sft) needs 100-200 MB of address space with two
// OpenMP threads (measured: generate fails under 100 MB and runs under 200 MB); 2 GiB is ten
// times that. OMP_NUM_THREADS pins the thread count, so that the bound does not depend on the
// machine's cores, and passive waiting keeps idle threads from spending the CPU limit on a
// loaded machine. The slowest clean run (the GRPO control) takes ~1.5 s alone and took 11 s of
// wall time on the shared 2-core machine while test_cli ran beside it: 40 s of CPU stops a busy
// hang, 60 s of wall time a blocked one, with room for a loaded CI machine.
// Under AddressSanitizer (an FP8RL_ASAN build, whose fp8rl is sanitized too) the address-space
// limit is off, since ASan reserves terabytes of shadow address space at start, and time and
// memory bounds are 3x (instrumented code, a 256 MB quarantine); the verdict's peak-RSS bound
// still stops runaway memory. tests/asan.sh runs the suite so in CI.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
inline constexpr double kSanitizerSlowdown = kSanitized ? 3.0 : 1.0;
inline constexpr rlim_t kAddressSpace = kSanitized ? 0 : rlim_t{2} << 30;
inline constexpr rlim_t kCpuSeconds = rlim_t(40 * kSanitizerSlowdown);
inline constexpr double kWallSeconds = 60 * kSanitizerSlowdown;

inline ProcessLimits limits() {
  ProcessLimits l;
  l.address_space = kAddressSpace;
  l.cpu_seconds = kCpuSeconds;
  l.wall_seconds = kWallSeconds;
  l.env = {{"OMP_NUM_THREADS", "2"}, {"OMP_WAIT_POLICY", "PASSIVE"}};
  return l;
}

inline ProcessResult fp8rl(const std::vector<std::string>& args) {
  std::vector<std::string> argv{FP8RL_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, limits());
}

// One case: the command (after `fp8rl`), what must come of it, the paths that must be unchanged
// (inputs and outputs that existed before), the model directories that must still load after
// it, and what to undo (a writer process to stop).
struct HostileRun {
  HostileRun(std::vector<std::string> a, Expect e, std::vector<fs::path> u)
      : args(std::move(a)), expect(std::move(e)), unchanged(std::move(u)) {}
  std::vector<std::string> args;
  Expect expect;
  std::vector<fs::path> unchanged;
  std::vector<fs::path> must_load;
  std::function<void()> cleanup;
};

struct Case {
  std::string name;
  std::function<HostileRun(const fs::path& dir)> make;
};

inline std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.name;
}

inline Expect error(std::string fragment) {
  Expect e;
  e.fragment = std::move(fragment);
  return e;
}

inline Expect success(std::function<std::string(const ProcessResult&)> check) {
  Expect e;
  e.outcome = Outcome::success;
  e.success = std::move(check);
  return e;
}

inline std::function<std::string(const ProcessResult&)> stdout_has(const std::string& text) {
  return [text](const ProcessResult& r) {
    return r.out.find(text) != std::string::npos ? "" : "stdout lacks '" + text + "'";
  };
}

// ---- the inputs of each command ----

inline const std::string kSftRow = R"({"prompt": "What is 2+2? ", "completion": "4"})";
inline const std::string kGrpoRow =
    R"({"messages": [{"role": "user", "content": "What is 1+1?"}], )"
    R"("answer": "2"})";
inline const std::string kDpoRow = R"({"prompt": "What is 2+2? ", "chosen": "4", "rejected": "5"})";
inline const std::string kKtoRow =
    R"({"prompt": "What is 2+2? ", "completion": "4", "label": true})";

inline std::vector<std::string> info(const fs::path& model) {
  return {"info", model};
}

inline std::vector<std::string> tokenize(const fs::path& model, const fs::path& text) {
  return {"tokenize", model, "--text-file", text};
}

inline std::vector<std::string> chat_template(const fs::path& model, const fs::path& messages) {
  return {"chat-template", model, "--messages-file", messages};
}

inline fs::path messages_file(const fs::path& dir) {
  write_bytes(dir / "messages.json", R"([{"role": "user", "content": "hi"}])");
  return dir / "messages.json";
}

inline fs::path text_file(const fs::path& dir) {
  write_bytes(dir / "text.txt", "What is 2+2?");
  return dir / "text.txt";
}

inline std::vector<std::string> sft(const fs::path& model, const fs::path& data,
                                    const fs::path& out) {
  return {"sft",         model, "--data",       data, "--out",    out,
          "--max-steps", "1",   "--batch-size", "1",  "--device", "cpu"};
}

inline std::vector<std::string> dpo(const fs::path& model, const fs::path& data,
                                    const fs::path& out) {
  return {"dpo",         model, "--data",       data, "--out",    out,
          "--max-steps", "1",   "--batch-size", "1",  "--device", "cpu"};
}

inline std::vector<std::string> kto(const fs::path& model, const fs::path& data,
                                    const fs::path& out) {
  return {"kto",         model, "--data",       data, "--out",    out,
          "--max-steps", "1",   "--batch-size", "2",  "--device", "cpu"};
}

// A GRPO run config naming the model and dataset; `extra` is appended (YAML).
inline fs::path grpo_config(const fs::path& dir, const fs::path& model, const fs::path& data,
                            const std::string& extra = "") {
  write_bytes(dir / "run.yaml", "model: " + model.string() + "\ndata: " + data.string() +
                                    "\noutput_dir: " + (dir / "run").string() +
                                    "\nrewards:\n  - {type: answer_match, mode: numeric}\n" +
                                    extra);
  return dir / "run.yaml";
}

inline std::vector<std::string> grpo(const fs::path& config) {
  return {"grpo", "--config",
          config, "--max-steps",
          "1",    "--num-generations",
          "2",    "--per-device-train-batch-size",
          "2",    "--max-completion-length",
          "2",    "--device",
          "cpu"};
}

inline std::vector<std::string> generate(const fs::path& model, const fs::path& prompts,
                                         const fs::path& out) {
  return {"generate", model, "--prompts", prompts, "--out", out, "--max-tokens", "2"};
}

inline void edit_config(const fs::path& model, const std::function<void(ojson&)>& edit) {
  edit_json(model / "config.json", edit);
}

// The demo model with its config.json edited, and logits (or `args`) on it, expected to fail
// naming `fragment`.
inline HostileRun config_case(const fs::path& d, const std::function<void(ojson&)>& edit,
                              const std::string& fragment, std::vector<std::string> args = {}) {
  const fs::path m = copy_demo_model(d / "model");
  edit_config(m, edit);
  if (args.empty()) args = {"logits", m, "--ids", "1,2,3", "--out", d / "x.npy"};
  return HostileRun{args, error(fragment), {m}};
}

// The classes, each a list of cases (cases_inputs.cpp, cases_outputs.cpp).
std::vector<Case> deep_json_cases();
std::vector<Case> yaml_cases();
std::vector<Case> size_cases();
std::vector<Case> special_file_cases();
std::vector<Case> endless_cases();
std::vector<Case> safetensors_cases();
std::vector<Case> moe_cases();
std::vector<Case> template_cases();
std::vector<Case> destroyed_data_cases();
std::vector<Case> message_cases();
std::vector<Case> silent_cases();
std::vector<Case> fuzz_finding_cases();
std::vector<Case> control_cases();

}  // namespace fp8rl::test::hostile
