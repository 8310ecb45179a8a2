#include "train/model_arguments.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"
#include "formats/json_read.h"
#include "ops/memory_budget.h"
#include "train/config_checks.h"

namespace fp8rl {

void ModelArguments::validate() const {
  namespace c = config_checks;
  CHECK(fp8 == "auto" || fp8 == "off" || fp8 == "row" || fp8 == "block" || fp8 == "tensor",
        "fp8 = '{}' is not one of auto, off, row, block, tensor", fp8);
  CHECK(device == "cpu" || device == "cuda", "device = '{}' is not one of cpu, cuda", device);
  if (gpu_memory) {
    gpu_memory_bytes("gpu_memory", *gpu_memory);
    CHECK(device == "cuda",
          "gpu_memory = {} applies to device cuda only (the CPU runs in host memory)", *gpu_memory);
  }
  c::at_least<int64_t>("lora_r", lora_r, 1);
  c::positive("lora_alpha", lora_alpha);
  c::in_half_open("lora_dropout", lora_dropout, 0.0, 1.0);
  if (lora_target_modules) {
    CHECK(!lora_target_modules->empty(),
          "lora_target_modules is empty (name projections, e.g. "
          "q_proj, v_proj, or all-linear; null: PEFT's default for the architecture)");
    for (const std::string& m : *lora_target_modules)
      CHECK(!m.empty(), "lora_target_modules holds an empty name");
  }
  CHECK(init_lora_weights == "default" || init_lora_weights == "gaussian",
        "init_lora_weights = '{}' is not one of true (PEFT's default), gaussian",
        init_lora_weights);
  if (random_state) c::at_least<int64_t>("random_state", *random_state, 0);
  if (max_lora_rank) {
    c::at_least<int64_t>("max_lora_rank", *max_lora_rank, 1);
    CHECK(lora_r <= *max_lora_rank, "lora_r = {} is above max_lora_rank = {}", lora_r,
          *max_lora_rank);
  }
  LoraConfig l = lora_config_unchecked();
  if (l.target_modules.empty()) l.target_modules = {"q_proj"};  // unresolved yet: ranges only
  l.validate();
}

std::optional<std::vector<std::string>> peft_default_target_modules(const std::string& model_type) {
  // PEFT main's mapping has the same two projections for each of these; gemma3_text is what
  // Gemma3ForCausalLM's config.json says ("gemma3", the multimodal wrapper, has no entry).
  static const char* const kQv[] = {"llama", "qwen2", "qwen3", "mistral", "gemma3_text"};
  for (const char* t : kQv)
    if (model_type == t) return std::vector<std::string>{"q_proj", "v_proj"};
  return std::nullopt;
}

void ModelArguments::resolve_target_modules() {
  if (lora_target_modules || !adapter.empty()) return;
  const std::filesystem::path path = std::filesystem::path(model) / "config.json";
  if (model.empty() || !std::filesystem::is_regular_file(path)) return;
  nlohmann::json j;
  try {
    j = read_json_file(path);
  } catch (const Error&) {
    return;  // loading the model names what is wrong with it
  }
  const std::string type = j.is_object() && j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>()
                               : std::string();
  lora_target_modules = peft_default_target_modules(type);
  CHECK(lora_target_modules.has_value(),
        "lora_target_modules is unset and PEFT has no default for model_type '{}' ({}): set it, "
        "e.g. lora_target_modules: all-linear",
        type, path.string());
}

LoraConfig ModelArguments::lora_config() const {
  CHECK(lora_target_modules.has_value(),
        "lora_target_modules is unset (null) and was not resolved from the model's config.json");
  return lora_config_unchecked();
}

LoraConfig ModelArguments::lora_config_unchecked() const {
  LoraConfig l;
  l.r = lora_r;
  l.lora_alpha = lora_alpha;
  l.use_rslora = use_rslora;
  l.lora_dropout = lora_dropout;
  if (lora_target_modules) l.target_modules = *lora_target_modules;
  l.init_lora_weights = init_lora_weights;
  l.sequence_classification = sequence_classification;
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
  // null given means "PEFT's default", which a continued adapter's own list replaces.
  const bool targets_given = given.contains("lora_target_modules") && lora_target_modules;
  const std::vector<std::string> mine_given =
      lora_target_modules.value_or(std::vector<std::string>{});
  if (!a.target_regex.empty()) {
    CHECK(!targets_given,
          "lora_target_modules = {} contradicts the adapter's target_modules, the regex '{}' "
          "({}): leave the key out to continue with the adapter's settings",
          shown(mine_given), a.target_regex, path.string());
    return;
  }
  // The same projections in any order are the same adapter.
  std::vector<std::string> mine = mine_given, theirs = a.target_modules;
  std::sort(mine.begin(), mine.end());
  std::sort(theirs.begin(), theirs.end());
  if (mine == theirs) return;
  CHECK(!targets_given,
        "lora_target_modules = {} contradicts the adapter's target_modules = {} ({}): leave the "
        "key out to continue with the adapter's settings",
        shown(mine_given), shown(a.target_modules), path.string());
  lora_target_modules = a.target_modules;
}

}  // namespace fp8rl
