#include "cli/commands.h"
#include "core/check.h"

namespace fp8rl::cli {
void add_quantize_command(CLI::App& app) {
  app.add_subcommand("quantize", "(being written)")->callback([] { RAISE("quantize: not built yet"); });
}
}  // namespace fp8rl::cli
