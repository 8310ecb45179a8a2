// fp8rl merge MODEL ADAPTER OUT [--fp8 row|block|tensor] [--dtype bf16|f32]
#include <memory>

#include "cli/commands.h"
#include "core/check.h"
#include "model/adapter.h"
#include "model/merge.h"

namespace fp8rl::cli {

namespace {
struct MergeCommandOptions {
  std::string model, adapter, out, fp8, dtype = "bf16";
};

void run_merge(const MergeCommandOptions& o) {
  MergeOptions merge;
  CHECK(o.dtype == "bf16" || o.dtype == "f32", "--dtype: choose bf16 or f32, not '{}'", o.dtype);
  merge.dtype = o.dtype == "f32" ? DType::f32 : DType::bf16;
  if (!o.fp8.empty()) {
    const Fp8Scheme scheme = parse_scheme(o.fp8);
    CHECK(scheme != Fp8Scheme::off, "--fp8: choose row, block or tensor (omit it for {})", o.dtype);
    merge.fp8 = scheme;
  }
  const Model model = Model::load(o.model);
  const LoraAdapter adapter = LoraAdapter::load_peft(o.adapter, model);
  write_merged_checkpoint(model, adapter, o.out, merge);
  if (merge.fp8)
    fmt::print("wrote {} merged with {} as FP8 ({} scaling, compressed-tensors) to {}\n",
               model.config().architecture, o.adapter, scheme_name(*merge.fp8), o.out);
  else
    fmt::print("wrote {} merged with {} as {} to {}\n", model.config().architecture, o.adapter,
               o.dtype, o.out);
}
}  // namespace

void add_merge_command(CLI::App& app) {
  auto o = std::make_shared<MergeCommandOptions>();
  CLI::App* c = app.add_subcommand(
      "merge", "Merge a PEFT LoRA adapter into the model's weights and write a new checkpoint");
  c->add_option("model", o->model, "Hugging Face model directory (bf16/f16/f32 or FP8)")
      ->required();
  c->add_option("adapter", o->adapter,
                "PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors)")
      ->required();
  c->add_option("out", o->out, "Output directory (new; not the model directory or inside it)")
      ->required();
  c->add_option("--fp8", o->fp8,
                "Re-quantize the merged linears: row, block (128x128) or tensor, written in the "
                "compressed-tensors format of `fp8rl quantize`");
  c->add_option("--dtype", o->dtype,
                "bf16 or f32: the unquantized tensors of the output (f32 keeps the fp32 merge "
                "exact)")
      ->capture_default_str();
  c->callback([o] { run_merge(*o); });
}

}  // namespace fp8rl::cli
