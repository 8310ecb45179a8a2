#include "cli/commands.h"
#include "core/check.h"

namespace fp8rl::cli {
void add_chat_template_command(CLI::App& app) {
  app.add_subcommand("chat-template", "(being written)")->callback([] { RAISE("not built yet"); });
}
}  // namespace fp8rl::cli
