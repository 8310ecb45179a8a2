#include "train/model_arguments.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "formats/json_read.h"
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

namespace {

template <class T>
std::string shown(const T& v) {
  if constexpr (std::is_same_v<T, bool>)
    return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return fmt::format("[{}]", fmt::join(v, ", "));
  else
    return fmt::format("{}", v);
}

}  // namespace

void ModelArguments::adopt_adapter_config(const std::set<std::string>& given) {
  if (adapter.empty()) return;
  const std::filesystem::path path = std::filesystem::path(adapter) / "adapter_config.json";
  if (!std::filesystem::exists(path)) return;  // loading the adapter names what is missing
  const LoraConfig a = LoraConfig::from_peft_json(read_json_file(path), path.string());
  auto adopt = [&](const char* key, auto& mine, const auto& theirs, const char* peft_key) {
    CHECK(!given.contains(key) || mine == theirs,
          "{} = {} contradicts the adapter's {} = {} ({}): leave the key out to continue with "
          "the adapter's settings",
          key, shown(mine), peft_key, shown(theirs), path.string());
    mine = theirs;
  };
  adopt("lora_r", lora_r, a.r, "r");
  adopt("lora_alpha", lora_alpha, a.lora_alpha, "lora_alpha");
  adopt("lora_dropout", lora_dropout, a.lora_dropout, "lora_dropout");
  adopt("use_rslora", use_rslora, a.use_rslora, "use_rslora");
  if (!a.target_regex.empty()) {
    CHECK(!given.contains("lora_target_modules"),
          "lora_target_modules = {} contradicts the adapter's target_modules, the regex '{}' "
          "({}): leave the key out to continue with the adapter's settings",
          shown(lora_target_modules), a.target_regex, path.string());
    return;
  }
  // The same projections in any order are the same adapter.
  std::vector<std::string> mine = lora_target_modules, theirs = a.target_modules;
  std::sort(mine.begin(), mine.end());
  std::sort(theirs.begin(), theirs.end());
  if (mine == theirs) return;
  CHECK(!given.contains("lora_target_modules"),
        "lora_target_modules = {} contradicts the adapter's target_modules = {} ({}): leave the "
        "key out to continue with the adapter's settings",
        shown(lora_target_modules), shown(a.target_modules), path.string());
  lora_target_modules = a.target_modules;
}

}  // namespace fp8rl
