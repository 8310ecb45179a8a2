#include "cli/commands.h"
#include "core/check.h"

namespace fp8rl::cli {
void add_info_command(CLI::App& app) {
  app.add_subcommand("info", "(being written)")->callback([] { RAISE("info: not built yet"); });
}
}  // namespace fp8rl::cli
