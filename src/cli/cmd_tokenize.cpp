#include "cli/commands.h"
#include "core/check.h"

namespace fp8rl::cli {
void add_tokenize_commands(CLI::App& app) {
  app.add_subcommand("tokenize", "(being written)")->callback([] { RAISE("not built yet"); });
  app.add_subcommand("detokenize", "(being written)")->callback([] { RAISE("not built yet"); });
}
}  // namespace fp8rl::cli
