#include "cli/commands.h"
#include "core/check.h"

namespace fp8rl::cli {
void add_init_command(CLI::App& app) {
  app.add_subcommand("init", "(being written)")->callback([] { RAISE("init: not built yet"); });
}
}  // namespace fp8rl::cli
