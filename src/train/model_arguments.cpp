#include "train/model_arguments.h"

#include "core/check.h"
#include "train/config_checks.h"

namespace fp8rl {

void ModelArguments::validate() const {
  namespace c = config_checks;
  CHECK(fp8 == "auto" || fp8 == "off" || fp8 == "row" || fp8 == "block" || fp8 == "tensor",
        "fp8 = '{}' is not one of auto, off, row, block, tensor", fp8);
  CHECK(device == "cpu" || device == "cuda", "device = '{}' is not one of cpu, cuda", device);
  c::at_least<int64_t>("lora_r", lora_r, 1);
  c::positive("lora_alpha", lora_alpha);
  c::in_half_open("lora_dropout", lora_dropout, 0.0, 1.0);
  CHECK(!lora_target_modules.empty(),
        "lora_target_modules is empty (name projections, e.g. "
        "q_proj, v_proj, or all-linear)");
  for (const std::string& m : lora_target_modules)
    CHECK(!m.empty(), "lora_target_modules holds an empty name");
  CHECK(init_lora_weights == "default" || init_lora_weights == "gaussian",
        "init_lora_weights = '{}' is not one of true (PEFT's default), gaussian",
        init_lora_weights);
  lora_config().validate();
}

LoraConfig ModelArguments::lora_config() const {
  LoraConfig l;
  l.r = lora_r;
  l.lora_alpha = lora_alpha;
  l.use_rslora = use_rslora;
  l.lora_dropout = lora_dropout;
  l.target_modules = lora_target_modules;
  l.init_lora_weights = init_lora_weights;
  return l;
}

}  // namespace fp8rl
