// TRL's `tools` for multi-turn GRPO: Python functions served by the repository's helper,
// `python3 -m fp8rl_reward.tools MODULE:FUNCTION ...` (python/fp8rl_reward/tools.py), which
// speaks the environment protocol (rl/environment_process.h): its reset gives the tools' JSON
// schemas, its steps run the calls of each turn and answer with `tool` messages.
#pragma once

#include <string>
#include <vector>

namespace fp8rl {

// Each spec must be MODULE:FUNCTION of Python identifiers (dotted): an fp8rl::Error naming the
// first that is not.
void check_tool_specs(const std::vector<std::string>& specs);

// The helper's command line for `specs` (checked: no quoting needed).
std::string tools_command(const std::vector<std::string>& specs);

// Runs python3 once to import the helper and build the tools' schemas, before the run starts:
// an fp8rl::Error saying how to install fp8rl_reward when it cannot be imported, else naming
// what the helper rejected (an unknown module or function, a function without a docstring).
void check_tools_helper(const std::vector<std::string>& specs);

}  // namespace fp8rl
