// A run config (YAML, `--config`) -> the keys' typed values (cli/run_config.h): yaml-cpp's
// parse, then the conversion of every kind of key, the json keys' YAML-to-JSON copy with its
// budget (aliases, cycles, complex keys), and the dump that reads back to the same values.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/run_config.h"
#include "fuzz_input.h"

namespace {

using fp8rl::cli::KeyTable;

// One key of every type (the targets do not link the commands' tables, which pull in the
// trainers).
struct Config {
  int64_t steps = 1;
  double rate = 0.5;
  bool flag = false;
  std::string name = "x";
  std::string mode = "a";
  std::vector<std::string> modules;
  std::vector<double> weights;
  std::optional<int64_t> limit;
  nlohmann::json rewards;
};

KeyTable<Config> table() {
  KeyTable<Config> t;
  t.add("max_steps", &Config::steps, "an integer").alias("steps");
  t.add("learning_rate", &Config::rate, "a number").alias("lr");
  t.add("flag", &Config::flag, "a boolean");
  t.add("name", &Config::name, "a string");
  t.add_choice("mode", &Config::mode, {"a", "b"}, "a choice");
  t.add("modules", &Config::modules, "a list of strings");
  t.add("weights", &Config::weights, "a list of numbers");
  t.add("limit", &Config::limit, "a nullable integer");
  t.add("rewards", &Config::rewards, "any value");
  t.ignore("report_to", "ignored here");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const KeyTable<Config> keys = table();
  return fp8rl::fuzz::run([&] {
    Config c;
    keys.load_yaml_text(std::string(fp8rl::fuzz::as_text(data, size)), "fuzz.yaml", c);
    // An accepted config dumps to YAML that reads back to the same values.
    const std::string dumped = keys.dump_yaml(c);
    Config again;
    keys.load_yaml_text(dumped, "dumped.yaml", again);
    if (keys.to_json(again) != keys.to_json(c)) __builtin_trap();
  });
}
