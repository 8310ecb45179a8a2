// fp8rl init --arch ARCH --preset NAME --out DIR [--seed S]
#include <algorithm>
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "core/check.h"
#include "model/presets.h"

namespace fp8rl::cli {

namespace {
struct InitOptions {
  std::string arch, preset, out;
  uint64_t seed = 0;
  bool force = false;
};

void run_init(const InitOptions& o) {
  const std::vector<std::string> archs = {"llama", "qwen3", "qwen3-moe", "mistral", "gemma3"};
  CHECK(std::find(archs.begin(), archs.end(), o.arch) != archs.end(),
        "--arch: '{}' is not one of {}", o.arch, fmt::join(archs, ", "));
  // "--preset 8b" and "--preset qwen3-8b" both name qwen3-8b.
  const std::string name = o.preset.starts_with(o.arch + "-") ? o.preset : o.arch + "-" + o.preset;
  const nlohmann::json config = preset_config_json(name);
  check_output_dir(o.out, {}, o.force);
  write_random_checkpoint(config, o.out, o.seed);
  fmt::print("wrote random-initialized {} (bf16) to {}\n", name, o.out);
}
}  // namespace

void add_init_command(CLI::App& app) {
  auto o = std::make_shared<InitOptions>();
  CLI::App* c =
      app.add_subcommand("init", "Write a random-initialized bf16 checkpoint of a preset");
  c->add_option("--arch", o->arch, "llama, qwen3, qwen3-moe, mistral or gemma3")->required();
  c->add_option("--preset", o->preset,
                "tiny, small (~100M; not qwen3-moe), or a real config: qwen3 0.6b/1.7b/8b, llama "
                "3.2-1b/3.1-8b, mistral 7b, gemma3 1b")
      ->required();
  c->add_option("--out", o->out, "Output directory")->required();
  c->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  c->add_flag("--force", o->force, "Overwrite an output directory that already holds a model");
  c->callback([o] { run_init(*o); });
}

}  // namespace fp8rl::cli
