// Each fp8rl subcommand lives in its own cmd_*.cpp and adds itself to the CLI11 app here.
// A command's callback throws fp8rl::Error on bad input; main() turns it into a message and a
// non-zero exit.
#pragma once

#include <CLI/CLI.hpp>

namespace fp8rl::cli {

void add_info_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_init_command(CLI::App& app);
void add_schemes_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);  // tokenize, detokenize
void add_chat_template_command(CLI::App& app);
void add_bench_command(CLI::App& app);  // bench forward
void add_generate_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_merge_command(CLI::App& app);
void add_sft_command(CLI::App& app);
void add_grpo_command(CLI::App& app);
void add_rloo_command(CLI::App& app);        // grpo with RLOOConfig's defaults
void add_online_dpo_command(CLI::App& app);  // grpo's loop with online DPO's loss
void add_dpo_command(CLI::App& app);
void add_kto_command(CLI::App& app);
void add_reward_command(CLI::App& app);
void add_ppo_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace fp8rl::cli
