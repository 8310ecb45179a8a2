// The sampling parameters of one request, named as vLLM's SamplingParams and TRL's GRPOConfig
// so that a config written for either reads the same here. The engine turns them into
// per-row ops::SampleRow values for the sampler op (ops/sampling.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace fp8rl {

struct SamplingParams {
  int n = 1;                        // samples per prompt
  double temperature = 1.0;         // 0: greedy
  int top_k = 0;                    // 0 or -1: off
  double top_p = 1.0;               // 1: off
  double min_p = 0.0;               // 0: off
  double repetition_penalty = 1.0;  // 1: off
  int max_tokens = 16;
  int min_tokens = 0;  // eos and stop_token_ids are banned before this many tokens
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings
  std::optional<uint64_t> seed;   // absent: the engine's seed
  bool ignore_eos = false;
  int logprobs = 0;                 // top logprobs per sampled token, 0..20
  bool processed_logprobs = false;  // also report log_softmax(logits / T) of the sampled token

  // Raises fp8rl::Error naming the key and its allowed range.
  void validate() const;
};

// `defaults` with the keys of `j` (a JSON object) applied. A key not named above raises,
// naming it (with the nearest key when it looks like a typo), as does a key of the wrong type;
// null leaves the default. The result is not validated.
SamplingParams sampling_params_from_json(const nlohmann::json& j, const SamplingParams& defaults);
// The keys sampling_params_from_json reads, in its order (for callers that check a JSON object
// holding other keys too before reading it).
const std::vector<std::string>& sampling_param_keys();

}  // namespace fp8rl
