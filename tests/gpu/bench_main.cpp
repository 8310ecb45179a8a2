// fp8rl_bench: the `fp8rl bench` subcommand (src/cli/cmd_bench.cpp) in a binary of its own, so
// tests/gpu/run.sh and engine.sh can carry a small executable.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "core/check.h"

namespace fp8rl::cli {
void add_bench_command(CLI::App& app);
}

int main(int argc, char** argv) {
  CLI::App app{"fp8rl benchmarks", "fp8rl_bench"};
  app.require_subcommand(1);
  fp8rl::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8rl_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
