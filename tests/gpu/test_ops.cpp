// test_ops [--list] [--perf] [--quick] [--no-wgmma] [--reference-attention-backward]
//          [--exhaustive] [--op NAME[,NAME...]] [--filter TEXT] [--json FILE]
//
// Runs every op case of op_cases.cpp on the CPU reference and on CUDA and compares (exit 1 on
// any failure), or with --perf times the CUDA ops at prefill sizes and prints GB/s or
// TFLOP/s. Without a CUDA device it prints "SKIPPED: no CUDA device" and exits 77 (CTest's
// skip code), so CI, which has no GPU, shows the skip instead of a pass. --no-wgmma runs
// attention on the mma.sync kernel (the path of non-Hopper GPUs) on a Hopper GPU too.
// --reference-attention-backward runs the attention backward on its reference kernels (a warp
// per row) instead of the tiled tensor-core ones.
// --exhaustive makes cases that sample a large input space cover all of it (fp8_quotient).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "harness.h"

using namespace fp8rl;
using namespace fp8rl::gpu_test;

int main(int argc, char** argv) {
  bool perf = false, quick = false, list = false, wgmma = true, exhaustive = false;
  bool tiled_backward = true;
  std::string filter, op, json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--perf")
      perf = true;
    else if (a == "--list")
      list = true;
    else if (a == "--quick")
      quick = true;
    else if (a == "--no-wgmma")
      wgmma = false;
    else if (a == "--reference-attention-backward")
      tiled_backward = false;
    else if (a == "--exhaustive")
      exhaustive = true;
    else if (a == "--filter" && i + 1 < argc)
      filter = argv[++i];
    else if (a == "--op" && i + 1 < argc)
      op = argv[++i];
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: test_ops [--perf] [--quick] [--no-wgmma] "
                   "[--reference-attention-backward] [--exhaustive] [--op NAME] "
                   "[--filter TEXT] "
                   "[--json FILE]\n");
      return 2;
    }
  }
  std::vector<std::string> ops_wanted;  // --op takes a comma-separated list of op names
  for (size_t b = 0; !op.empty() && b <= op.size();) {
    const size_t e = std::min(op.find(',', b), op.size());
    ops_wanted.push_back(op.substr(b, e - b));
    b = e + 1;
  }
  if (list) {  // the registry, without a device
    for (const OpCase& c : perf ? perf_cases() : correctness_cases())
      std::printf("%s%s\n", c.name.c_str(), c.quick ? "  (quick)" : "");
    return 0;
  }
  if (CudaDevice::count() == 0) {
    std::printf("SKIPPED: no CUDA device%s\n",
                CudaDevice::built() ? "" : " (and this build has no CUDA backend)");
    return 77;
  }
  try {
    Harness h(perf, wgmma, tiled_backward);
    h.exhaustive = exhaustive;
    std::printf("%s\n", CudaDevice::describe(0).c_str());
    if (!wgmma) std::printf("--no-wgmma: attention runs the mma.sync kernel for every head dim\n");
    if (!tiled_backward)
      std::printf(
          "--reference-attention-backward: the attention backward runs its reference "
          "kernels\n");
    std::ofstream json;
    if (!json_path.empty()) json.open(json_path);
    int passed = 0, failed = 0;
    for (const OpCase& c : perf ? perf_cases() : correctness_cases()) {
      if (quick && !c.quick) continue;
      if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
      if (!ops_wanted.empty() && std::find(ops_wanted.begin(), ops_wanted.end(),
                                           c.name.substr(0, c.name.find(' '))) == ops_wanted.end())
        continue;
      Outcome o;
      std::string error;
      try {
        ops::ScratchScope scope(h.gpu);
        ArenaScope cpu_scope(h.arena);
        c.run(h, o);
        ops::synchronize(h.gpu);
      } catch (const std::exception& e) {
        error = e.what();
      }
      bool ok = error.empty();
      double worst = 0;
      std::string worst_what;
      for (const Check& k : o.checks) {
        ok = ok && k.ok;
        const double ratio = k.bound > 0 ? k.err / k.bound : (k.err > 0 ? INFINITY : 0);
        if (!k.ok || ratio >= worst) {
          worst = ratio;
          worst_what = fmt::format("{} {:.3g} (bound {:.3g})", k.what, k.err, k.bound);
        }
      }
      ok ? ++passed : ++failed;
      if (perf) {
        const std::string rate = o.flops > 0
                                     ? fmt::format("{:8.1f} TFLOP/s", o.flops / o.seconds * 1e-12)
                                     : fmt::format("{:8.1f} GB/s", o.bytes / o.seconds * 1e-9);
        std::printf("%-4s %-58s %9.3f ms %s  %s%s\n", ok ? "OK" : "FAIL", c.name.c_str(),
                    o.seconds * 1e3, rate.c_str(), o.info.c_str(), error.c_str());
      } else {
        std::printf("%-4s %-78s %s%s%s\n", ok ? "PASS" : "FAIL", c.name.c_str(), worst_what.c_str(),
                    o.info.empty() ? "" : ("  [" + o.info + "]").c_str(),
                    error.empty() ? "" : (" ERROR: " + error).c_str());
        if (!ok)
          for (const Check& k : o.checks)
            if (!k.ok) std::printf("       %s: %.4g > %.4g\n", k.what.c_str(), k.err, k.bound);
      }
      std::fflush(stdout);
      if (json.is_open()) {
        // Every check with its error and bound: what a tolerance is ratcheted against.
        std::string checks;
        for (const Check& k : o.checks)
          checks += fmt::format(
              "{}{{\"what\": \"{}\", \"err\": {:.6g}, \"bound\": {:.6g}, "
              "\"ok\": {}}}",
              checks.empty() ? "" : ", ", k.what, k.err, k.bound, k.ok ? "true" : "false");
        json << fmt::format(
            "{{\"case\": \"{}\", \"ok\": {}, \"seconds\": {}, \"bytes\": {}, \"flops\": {}, "
            "\"worst\": \"{}\", \"error\": \"{}\", \"info\": \"{}\", \"checks\": [{}]}}\n",
            c.name, ok ? "true" : "false", o.seconds, o.bytes, o.flops, worst_what,
            error.empty() ? "" : "see log", o.info, checks);
      }
    }
    std::printf("%s: %d passed, %d failed\n", perf ? "perf" : "op harness", passed, failed);
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_ops: %s\n", e.what());
    return 1;
  }
}
