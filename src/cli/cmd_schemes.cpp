#include "cli/commands.h"
#include "core/check.h"

namespace fp8rl::cli {
void add_schemes_command(CLI::App& app) {
  app.add_subcommand("schemes", "(being written)")->callback([] { RAISE("schemes: not built yet"); });
}
}  // namespace fp8rl::cli
