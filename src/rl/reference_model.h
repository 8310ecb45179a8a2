// Which model GRPO's KL term (beta != 0) and DPO's log-ratios compare the policy with.
#pragma once

#include <cstdint>
#include <memory>

#include "model/adapter.h"
#include "train/model_arguments.h"

namespace fp8rl {

enum class ReferenceModel : uint8_t {
  // The policy as the run starts, as TRL's reference is the starting model: the adapter the run
  // continues from (`adapter`), a frozen copy; for a fresh adapter the base model (PEFT's
  // initial B = 0 makes the two equal).
  start,
  // The base model without any adapter.
  base,
};

// The reference adapter of a run that starts from args.adapter: a second copy loaded from
// that directory onto ctx's device, never trained, for ReferenceModel::start; null (the base
// model) for ReferenceModel::base or a fresh adapter.
std::unique_ptr<LoraAdapter> starting_adapter(const ModelArguments& args, ReferenceModel which,
                                              const Model& model, Context& ctx);

}  // namespace fp8rl
