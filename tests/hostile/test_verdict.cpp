// The runner and the verdict of the hostile-input suite must themselves fail what they exist to
// catch (so that the suite cannot pass vacuously): a crash, a hang, memory past the bound, exit 0
// with garbage, a non-standard error, an error not naming the problem, a changed input.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "hostile/hostile_inputs.h"
#include "hostile/verdict.h"
#include "process_run.h"

namespace fp8rl::test {
namespace {

namespace fs = std::filesystem;

ProcessResult sh(const std::string& script, double wall_seconds = 5) {
  ProcessLimits l;
  l.address_space = rlim_t{2} << 30;
  l.cpu_seconds = 10;
  l.wall_seconds = wall_seconds;
  return run_process({"/bin/sh", "-c", script}, l);
}

Expect error(const std::string& fragment) {
  Expect e;
  e.fragment = fragment;
  return e;
}

std::string judge(const ProcessResult& r, const Expect& e) {
  return verdict(r, e, {}, {});
}

TEST(HostileVerdict, ACleanErrorPasses) {
  const ProcessResult r = sh("echo progress >&2; echo 'fp8rl: error: bad nesting' >&2; exit 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(judge(r, error("nesting")), "");
}

TEST(HostileVerdict, ACrashFails) {
  const ProcessResult r = sh("echo 'fp8rl: error: x' >&2; kill -SEGV $$");
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_NE(judge(r, error("x")).find("killed by signal 11"), std::string::npos);
}

TEST(HostileVerdict, AHangIsKilledAndFails) {
  // A child that ignores SIGTERM and starts a grandchild: the group kill ends both.
  const ProcessResult r = sh("trap '' TERM; sleep 30 & sleep 30", 1);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(r.wall_seconds, 5);
  EXPECT_NE(judge(r, error("")).find("timed out"), std::string::npos);
}

TEST(HostileVerdict, CpuLimitKills) {
  ProcessLimits l;
  l.cpu_seconds = 1;
  l.wall_seconds = 20;
  const ProcessResult r = run_process({"/bin/sh", "-c", "while :; do :; done"}, l);
  EXPECT_EQ(r.signal, SIGXCPU);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(judge(r, error("")), "");
}

TEST(HostileVerdict, MemoryOverTheBoundFails) {
  // dd's buffer of 300 MB, written through: resident.
  const ProcessResult r = sh("dd if=/dev/zero of=/dev/null bs=300M count=1 2>/dev/null; exit 1");
  EXPECT_GT(r.max_rss_kb, 250 * 1024);
  Expect e = error("");
  e.max_rss_mb = 100;
  EXPECT_NE(judge(r, e).find("peak RSS"), std::string::npos);
  // The address-space limit makes the same allocation fail instead.
  ProcessLimits l;
  l.address_space = rlim_t{100} << 20;
  const ProcessResult capped =
      run_process({"/bin/sh", "-c", "dd if=/dev/zero of=/dev/null bs=300M count=1"}, l);
  EXPECT_NE(capped.exit_code, 0);
  EXPECT_LT(capped.max_rss_kb, 100 * 1024);
}

TEST(HostileVerdict, ExitZeroWithGarbageFails) {
  const ProcessResult r = sh("echo garbage");
  Expect e;
  e.outcome = Outcome::success;
  e.success = [](const ProcessResult& p) {
    return p.out.find("0,99999") != std::string::npos ? "" : "no result";
  };
  EXPECT_NE(judge(r, e).find("wrong output"), std::string::npos);
  // Where an error was expected, any exit 0 fails.
  EXPECT_NE(judge(r, error("")).find("exit 0 where an error was expected"), std::string::npos);
  // The control: the right output passes.
  EXPECT_EQ(judge(sh("echo 0,99999"), e), "");
}

TEST(HostileVerdict, ErrorsOutsideTheOneLineFormFail) {
  // Another exit code, another prefix, a message after the error, two errors.
  EXPECT_NE(judge(sh("echo 'fp8rl: error: x' >&2; exit 104"), error("x")), "");
  EXPECT_NE(judge(sh("echo 'terminate called: x' >&2; exit 1"), error("x")), "");
  EXPECT_NE(judge(sh("echo 'fp8rl: error: x' >&2; echo more >&2; exit 1"), error("x")), "");
  EXPECT_NE(judge(sh("echo 'fp8rl: error: x' >&2; echo 'fp8rl: error: y' >&2; exit 1"), error("x")),
            "");
  // Not naming the problem.
  EXPECT_NE(judge(sh("echo 'fp8rl: error: something' >&2; exit 1"), error("nesting"))
                .find("does not name 'nesting'"),
            std::string::npos);
}

TEST(HostileVerdict, ChangedInputsFail) {
  const fs::path dir = fs::temp_directory_path() / ("fp8rl_verdict_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "model");
  hostile::write_bytes(dir / "model/a.json", "{}");
  hostile::make_fifo(dir / "fifo");
  fs::create_symlink("/dev/zero", dir / "zero");
  const Snapshot before = snapshot({dir});
  const std::string fail = "echo 'fp8rl: error: x' >&2; exit 1";
  // Untouched: passes (and the FIFO and the device link were not opened).
  EXPECT_EQ(verdict(sh(fail), error("x"), before, snapshot({dir})), "");
  // Each change is caught: a byte, a file added, a FIFO replaced by a file, a link retargeted.
  for (const std::string& change :
       {"printf '{ }' > " + (dir / "model/a.json").string(),
        "touch " + (dir / "model/b.json").string(),
        "rm " + (dir / "fifo").string() + " && touch " + (dir / "fifo").string(),
        "ln -sfn /dev/null " + (dir / "zero").string()}) {
    const ProcessResult r = sh(change + "; " + fail);
    EXPECT_NE(verdict(r, error("x"), before, snapshot({dir})).find("changed"), std::string::npos)
        << change;
    fs::remove_all(dir);
    fs::create_directories(dir / "model");
    hostile::write_bytes(dir / "model/a.json", "{}");
    hostile::make_fifo(dir / "fifo");
    fs::create_symlink("/dev/zero", dir / "zero");
    ASSERT_EQ(snapshot({dir}), before);
  }
  fs::remove_all(dir);
}

TEST(HostileVerdict, StdinIsDevNull) {
  const ProcessResult r = sh("cat; echo end");
  EXPECT_EQ(r.out, "end\n");
}

}  // namespace
}  // namespace fp8rl::test
