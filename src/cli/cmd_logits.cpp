// fp8rl logits MODEL --ids 1,2,3 [--adapter DIR] [--fp8 ...] [--device cpu|cuda]
//              [--activations f32|bf16] --out FILE.npy
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/model_session.h"
#include "cli/output_path.h"
#include "core/check.h"
#include "formats/npy.h"
#include "model/forward.h"

namespace fp8rl::cli {

namespace {
struct LogitsOptions {
  SessionOptions session;
  std::string ids, activations = "f32", out;
  bool activations_given = false;
};

void run_logits(LogitsOptions o) {
  check_output_file(o.out, {o.session.model});
  const std::vector<int32_t> ids = parse_ids(o.ids);
  o.session.bf16_activations =
      parse_activations(o.activations, parse_device(o.session.device), o.activations_given);
  // Before the weights load: config.json alone says how many positions the model has.
  ModelText text(o.session.model, o.session.chat_template_kwargs);
  check_context(text.config(), int64_t(ids.size()), "--ids");
  ModelSession session(o.session, std::move(text));
  Context& ctx = session.ctx();
  const Model& model = session.model();
  KvCache cache(model.config(), int64_t(ids.size()), ctx);
  const std::vector<int32_t> positions = iota(ids.size());
  Tensor logits = Tensor::empty({int64_t(ids.size()), model.config().vocab_size}, DType::f32);
  SequenceInput seq{ids, positions, &cache};
  forward(ctx, model, session.adapter(), {&seq, 1}, LogitRows::all, logits);
  write_npy(o.out, logits);
}
}  // namespace

void add_logits_command(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* c = app.add_subcommand(
      "logits", "Run the forward on token ids and save the logits of every position (.npy)");
  c->add_option("model", o->session.model, "Hugging Face model directory")->required();
  c->add_option("--ids", o->ids, "Comma-separated token ids, e.g. 1,2,3")->required();
  c->add_option("--adapter", o->session.adapter, kAdapterHelp);
  c->add_option("--fp8", o->session.fp8, kFp8Help)->capture_default_str();
  c->add_option("--device", o->session.device, "cpu or cuda")->capture_default_str();
  CLI::Option* act = c->add_option("--activations", o->activations, kActivationsHelp);
  act->capture_default_str();
  c->add_option("--out", o->out, "Output .npy file: float32 [T, vocab]")->required();
  c->callback([o, act] {
    o->activations_given = act->count() > 0;
    run_logits(*o);
  });
}

}  // namespace fp8rl::cli
