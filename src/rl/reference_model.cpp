#include "rl/reference_model.h"

namespace fp8rl {

std::unique_ptr<LoraAdapter> starting_adapter(const ModelArguments& args, ReferenceModel which,
                                              const Model& model, Context& ctx) {
  if (which == ReferenceModel::base || args.adapter.empty()) return nullptr;
  auto a = std::make_unique<LoraAdapter>(LoraAdapter::load_peft(args.adapter, model));
  a->to_device(ctx);
  return a;
}

}  // namespace fp8rl
