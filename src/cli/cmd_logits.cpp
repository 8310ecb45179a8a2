#include "cli/commands.h"
#include "core/check.h"

namespace fp8rl::cli {
void add_logits_command(CLI::App& app) {
  app.add_subcommand("logits", "(being written)")->callback([] { RAISE("logits: not built yet"); });
}
}  // namespace fp8rl::cli
