#include "rl/tools_environment.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <cstdio>
#include <regex>

#include "core/check.h"
#include "rl/child_process.h"

namespace fp8rl {

namespace {

// Imports the helper and builds the toolbox as the helper does; prints one line saying what
// failed. Exit 3: fp8rl_reward itself cannot be imported; 4: a tool cannot be served.
constexpr const char* kCheckScript =
    "import sys\n"
    "try:\n"
    "    from fp8rl_reward.tools import Toolbox\n"
    "    from fp8rl_reward.serve import load_function\n"
    "except ImportError as e:\n"
    "    print(e); sys.exit(3)\n"
    "try:\n"
    "    Toolbox([load_function(s) for s in sys.argv[1:]])\n"
    "except BaseException as e:\n"
    "    print(e if isinstance(e, SystemExit) else f\"{type(e).__name__}: {e}\"); sys.exit(4)\n";

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of("\r\n \t");
  if (end == std::string::npos) return "";
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end + 1 - (start == std::string::npos ? 0 : start + 1));
}

}  // namespace

void check_tool_specs(const std::vector<std::string>& specs) {
  static const std::regex spec(R"([A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*)");
  for (const std::string& s : specs)
    CHECK(std::regex_match(s, spec),
          "tools: '{}' is not MODULE:FUNCTION (a Python module and a function in it, e.g. "
          "my_tools:search)",
          s);
}

std::string tools_command(const std::vector<std::string>& specs) {
  check_tool_specs(specs);
  CHECK(!specs.empty(), "tools: the list is empty");
  return fmt::format("exec python3 -m fp8rl_reward.tools {}", fmt::join(specs, " "));
}

void check_tools_helper(const std::vector<std::string>& specs) {
  check_tool_specs(specs);
  // The script as one argument: it holds no single quote.
  const std::string check =
      fmt::format("python3 -c '{}' {} 2>&1 </dev/null", kCheckScript, fmt::join(specs, " "));
  FILE* pipe = ::popen(check.c_str(), "r");
  CHECK(pipe != nullptr, "tools: could not run python3 to check the tools helper");
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
  const int status = ::pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return;
  const std::string why = printable_excerpt(last_line(output), 300);
  CHECK(code != 3,
        "tools: python3 cannot import the tools helper fp8rl_reward ({}): install it with `pip "
        "install ./python` from the fp8rl repository, or put that python/ folder on PYTHONPATH",
        why);
  CHECK(code != 127, "tools: python3 was not found (the tools helper needs it)");
  RAISE("tools: `python3 -m fp8rl_reward.tools {}` cannot serve the tools: {}",
        fmt::join(specs, " "), why);
}

}  // namespace fp8rl
