// config.json's quantization_config -> CheckpointQuant: the object itself, or a whole
// config.json holding one.
#include "formats/json_read.h"
#include "formats/quant_config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fp8rl::fuzz::run([&] {
    const nlohmann::json j =
        fp8rl::parse_json_text(fp8rl::fuzz::as_text(data, size), "quantization_config");
    const bool whole_config = j.is_object() && j.contains("quantization_config");
    const fp8rl::CheckpointQuant q =
        fp8rl::parse_quantization_config(whole_config ? j["quantization_config"] : j);
    (void)fp8rl::scheme_name(q.weight);
    (void)fp8rl::act_scaling_name(q.act);
  });
}
