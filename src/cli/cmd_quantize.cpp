// fp8rl quantize MODEL OUT --scheme row|block|tensor [--format compressed-tensors|fp8]
#include <memory>

#include "cli/commands.h"
#include "cli/output_path.h"
#include "core/check.h"
#include "model/quantize.h"

namespace fp8rl::cli {

namespace {
struct QuantizeOptions {
  std::string model, out, scheme, format = "compressed-tensors";
  bool force = false;
};

void run_quantize(const QuantizeOptions& o) {
  const Fp8Scheme scheme = parse_scheme(o.scheme);
  CHECK(scheme != Fp8Scheme::off, "--scheme: choose row, block or tensor");
  const Fp8Format format = parse_fp8_format(o.format);
  make_quantization_config(scheme, format);  // rejects scheme/format pairs before any work
  check_output_dir(o.out, {o.model}, o.force);
  LoadOptions load;
  load.fp8 = scheme;
  const Model model = Model::load(o.model, load);
  write_fp8_checkpoint(model, o.out, format);
  fmt::print("wrote {} FP8 ({} scaling, {} format) to {}\n", model.config().architecture,
             scheme_name(scheme), o.format, o.out);
}
}  // namespace

void add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* c = app.add_subcommand(
      "quantize", "Write an FP8 checkpoint that vLLM, SGLang and transformers load");
  c->add_option("model", o->model, "Hugging Face model directory (bf16/f16/f32)")->required();
  c->add_option("out", o->out, "Output directory")->required();
  c->add_option("--scheme", o->scheme, "Weight scaling: row, block (128x128) or tensor")
      ->required();
  c->add_option("--format", o->format,
                "compressed-tensors (weight_scale) or fp8 (weight_scale_inv, block only)")
      ->capture_default_str();
  c->add_flag("--force", o->force, "Overwrite an output directory that already holds a model");
  c->callback([o] { run_quantize(*o); });
}

}  // namespace fp8rl::cli
