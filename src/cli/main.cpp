// The fp8rl binary: one subcommand per job.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/check.h"
#include "core/tensor.h"
#include "train/run_dir.h"

namespace {

// OpenMP's idle threads spin before they sleep (libgomp: some 300,000 polls after each parallel
// region). When another process holds a core, the spinning threads take the time the working
// ones need: the CPU demo's GRPO steps ran several times slower beside one busy process, and
// passive waiting costs nothing measurable when the cores are free (docs/PERFORMANCE.md).
// libgomp reads OMP_WAIT_POLICY once, while it is loaded, before main, so setting it here would
// be too late and a constructor cannot be ordered before the library's own. Instead the program
// executes itself once more with the variable set; that it is set is what stops the second run
// from doing it again. A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is left as it is, and where
// the program cannot execute itself (no /proc) it runs on with the default.
void use_passive_openmp_waiting(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure
  unsetenv("OMP_WAIT_POLICY");
}

// The command line that continues an interrupted run: this one with --resume (the newest
// checkpoint of output_dir) in place of any resume option it had.
std::string resume_command(int argc, char** argv) {
  std::string cmd = "fp8rl";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--resume" || a == "--resume-from-checkpoint" || a == "--resume_from_checkpoint") {
      if (i + 1 < argc && argv[i + 1][0] != '-') ++i;  // its value
      continue;
    }
    if (a.rfind("--resume=", 0) == 0 || a.rfind("--resume-from-checkpoint=", 0) == 0 ||
        a.rfind("--resume_from_checkpoint=", 0) == 0)
      continue;
    const bool plain = a.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789-_=./:,+@%") == std::string::npos;
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " " + (plain && !a.empty() ? a : quoted + "'");
  }
  return cmd + " --resume";
}

// TRL's and transformers' command lines spell flags with underscores (--learning_rate), fp8rl's
// flags have dashes: every long option's name (up to an '=') is read with '-' for '_' before
// CLI11 parses, so that both spellings work for every flag of every command and --help lists
// the dashed one. What follows a bare "--" is values, left as written.
std::vector<std::string> dashed_flags(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) continue;
    std::replace(a.begin(), a.begin() + std::ptrdiff_t(std::min(a.find('='), a.size())), '_', '-');
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  use_passive_openmp_waiting(argv);
  // A file-size limit (ulimit -f, RLIMIT_FSIZE) is hit like a full disk: write() fails with
  // EFBIG and fp8rl reports it naming the file, as it does ENOSPC. SIGXFSZ's default action
  // would instead kill the process mid-write with no message.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fp8rl: LoRA reinforcement learning over frozen FP8 weights", "fp8rl"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fp8rl 0.1.0");
  app.footer(fp8rl::cli::kDebugHelp);
  fp8rl::cli::add_info_command(app);
  fp8rl::cli::add_logits_command(app);
  fp8rl::cli::add_quantize_command(app);
  fp8rl::cli::add_init_command(app);
  fp8rl::cli::add_schemes_command(app);
  fp8rl::cli::add_tokenize_commands(app);
  fp8rl::cli::add_chat_template_command(app);
  fp8rl::cli::add_bench_command(app);
  fp8rl::cli::add_generate_command(app);
  fp8rl::cli::add_chat_command(app);
  fp8rl::cli::add_merge_command(app);
  fp8rl::cli::add_sft_command(app);
  fp8rl::cli::add_grpo_command(app);
  fp8rl::cli::add_rloo_command(app);
  fp8rl::cli::add_ppo_command(app);
  fp8rl::cli::add_online_dpo_command(app);
  fp8rl::cli::add_dpo_command(app);
  fp8rl::cli::add_kto_command(app);
  fp8rl::cli::add_reward_command(app);
  fp8rl::cli::add_report_command(app);
  fp8rl::cli::add_serve_command(app);
  // CLI11 would only say "A subcommand is required" for a mistyped command name.
  bool known = argc < 2 || argv[1][0] == '-';
  std::string valid;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    known = known || sub->check_name(argv[1]);
    valid += (valid.empty() ? "" : ", ") + sub->get_name();
  }
  if (!known) {
    std::fprintf(stderr, "fp8rl: error: unknown command '%s' (valid: %s)\n", argv[1],
                 valid.c_str());
    return 1;
  }
  const std::vector<std::string> args = dashed_flags(argc, argv);
  std::vector<const char*> arg_pointers;
  for (const std::string& a : args) arg_pointers.push_back(a.c_str());
  try {
    app.parse(argc, arg_pointers.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as "errors" with exit code 0: CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    // Every other argument error in the one-line form of all fp8rl errors, exit code 1.
    std::string message = e.what();
    for (char& c : message)
      if (c == '\n') c = ' ';
    const std::string help = known && argc >= 2 && argv[1][0] != '-'
                                 ? std::string("fp8rl ") + argv[1] + " --help"
                                 : std::string("fp8rl --help");
    std::fprintf(stderr, "fp8rl: error: %s (see %s)\n", message.c_str(), help.c_str());
    return 1;
  } catch (const fp8rl::RunInterrupted& e) {
    // Exit status 128 + the signal, as a shell reports a process the signal ended.
    const char* name = e.signal == SIGTERM ? "SIGTERM" : e.signal == SIGINT ? "SIGINT" : "a signal";
    if (e.checkpoint.empty())
      std::fprintf(stderr, "fp8rl: interrupted by %s before the first step; nothing saved\n", name);
    else
      std::fprintf(stderr,
                   "fp8rl: interrupted by %s at step %lld of %lld; the run is saved in %s\n"
                   "fp8rl: to continue it: %s\n",
                   name, static_cast<long long>(e.step), static_cast<long long>(e.total_steps),
                   e.checkpoint.c_str(), resume_command(argc, argv).c_str());
    return 128 + e.signal;
  } catch (const fp8rl::Error& e) {
    std::fprintf(stderr, "fp8rl: error: %s\n", fp8rl::cli::error_message(e).c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    // The sizes that could not be checked before allocating (the checked ones name their
    // setting): say what bounds them.
    std::fprintf(stderr,
                 "fp8rl: error: out of memory (this process can have %s of host memory; lower "
                 "the sizes given: batch sizes, lengths, lora_r)\n",
                 fp8rl::bytes_text(fp8rl::host_memory_limit()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp8rl: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
