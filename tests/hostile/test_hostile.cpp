// The hostile-input suite: every class of input a hostile user found to crash,
// hang, exhaust memory, destroy files or mislead (and the fuzzers' kept findings), generated
// fresh per case and fed to the fp8rl binary under an address-space limit, a CPU limit and a
// wall clock. Each case must end in a clean one-line error naming the problem or in a correct
// success, within its memory bound, with its inputs and pre-existing outputs unchanged
// (verdict.h). The runner's own negative controls are in test_verdict.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "hostile/hostile_case.h"

namespace fp8rl::test::hostile {
namespace {

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (auto group :
       {deep_json_cases(), yaml_cases(), size_cases(), special_file_cases(), endless_cases(),
        safetensors_cases(), moe_cases(), template_cases(), destroyed_data_cases(), message_cases(),
        silent_cases(), fuzz_finding_cases(), control_cases()})
    all.insert(all.end(), group.begin(), group.end());
  return all;
}

class Hostile : public ::testing::TestWithParam<Case> {};

TEST_P(Hostile, CleanErrorOrCorrectSuccess) {
  const Case& c = GetParam();
  const fs::path dir =
      fs::temp_directory_path() / ("fp8rl_hostile_" + std::to_string(::getpid())) / c.name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  HostileRun run = c.make(dir);
  const Snapshot before = snapshot(run.unchanged);
  const ProcessResult r = fp8rl(run.args);
  if (run.cleanup) run.cleanup();
  const Snapshot after = snapshot(run.unchanged);
  std::string command = "fp8rl";
  for (const std::string& a : run.args)
    command += " " + (a.size() > 120 ? a.substr(0, 120) + "..." : a);
  Expect expect = run.expect;
  expect.max_rss_mb = long(double(expect.max_rss_mb) * kSanitizerSlowdown);
  expect.max_seconds *= kSanitizerSlowdown;
  EXPECT_EQ(verdict(r, expect, before, after), "")
      << command << "\nstderr: " << r.err.substr(0, 2000);
  for (const fs::path& m : run.must_load) {
    const ProcessResult load = fp8rl({"info", m});
    EXPECT_EQ(load.exit_code, 0) << m << " no longer loads: " << load.err;
  }
  RecordProperty("seconds", std::to_string(r.wall_seconds));
  RecordProperty("max_rss_kb", std::to_string(r.max_rss_kb));
  RecordProperty("last_line", last_line(r.err));  // --gtest_output=xml: what each case said
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Cases, Hostile, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fp8rl::test::hostile
