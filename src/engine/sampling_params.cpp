#include "engine/sampling_params.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "formats/json_read.h"

namespace fp8rl {

void SamplingParams::validate() const {
  CHECK(n >= 1, "sampling: n must be >= 1, got {}", n);
  CHECK(temperature >= 0.0, "sampling: temperature must be >= 0 (0 = greedy), got {}", temperature);
  CHECK(top_p > 0.0 && top_p <= 1.0, "sampling: top_p must be in (0, 1], got {}", top_p);
  CHECK(top_k >= -1, "sampling: top_k must be >= -1 (0 or -1 = off), got {}", top_k);
  CHECK(min_p >= 0.0 && min_p <= 1.0, "sampling: min_p must be in [0, 1], got {}", min_p);
  CHECK(repetition_penalty > 0.0, "sampling: repetition_penalty must be > 0, got {}",
        repetition_penalty);
  CHECK(max_tokens >= 1, "sampling: max_tokens must be >= 1, got {}", max_tokens);
  CHECK(min_tokens >= 0 && min_tokens <= max_tokens,
        "sampling: min_tokens must be in [0, max_tokens = {}], got {}", max_tokens, min_tokens);
  CHECK(logprobs >= 0 && logprobs <= 20, "sampling: logprobs must be in [0, 20], got {}", logprobs);
}

namespace {

using Json = nlohmann::json;

using Fields = JsonKeyReader<Json>;

void read_int(Fields& f, const char* key, int& out) {
  const Json* v = f.get(key);
  if (!v) return;
  CHECK(v->is_number_integer(), "sampling: '{}' must be an integer, got {}", key, v->dump());
  const int64_t x = v->get<int64_t>();
  CHECK(x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max(),
        "sampling: '{}' = {} does not fit an int", key, x);
  out = int(x);
}

void read_double(Fields& f, const char* key, double& out) {
  const Json* v = f.get(key);
  if (!v) return;
  CHECK(v->is_number(), "sampling: '{}' must be a number, got {}", key, v->dump());
  out = v->get<double>();
}

void read_bool(Fields& f, const char* key, bool& out) {
  const Json* v = f.get(key);
  if (!v) return;
  CHECK(v->is_boolean(), "sampling: '{}' must be true or false, got {}", key, v->dump());
  out = v->get<bool>();
}

// Every key into `p`; the keys asked for are f.asked.
void read_fields(Fields& f, SamplingParams& p) {
  read_int(f, "n", p.n);
  read_double(f, "temperature", p.temperature);
  read_int(f, "top_k", p.top_k);
  read_double(f, "top_p", p.top_p);
  read_double(f, "min_p", p.min_p);
  read_double(f, "repetition_penalty", p.repetition_penalty);
  read_int(f, "max_tokens", p.max_tokens);
  read_int(f, "min_tokens", p.min_tokens);
  read_bool(f, "ignore_eos", p.ignore_eos);
  read_int(f, "logprobs", p.logprobs);
  read_bool(f, "processed_logprobs", p.processed_logprobs);
  if (const Json* v = f.get("stop_token_ids")) {
    CHECK(v->is_array(), "sampling: 'stop_token_ids' must be an array of token ids");
    p.stop_token_ids.clear();
    for (const Json& id : *v) {
      CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                id.get<int64_t>() <= std::numeric_limits<int32_t>::max(),
            "sampling: 'stop_token_ids' entries must be non-negative token ids, got {}", id.dump());
      p.stop_token_ids.push_back(int32_t(id.get<int64_t>()));
    }
  }
  if (const Json* v = f.get("stop")) {
    // vLLM accepts one string or a list of strings.
    p.stop.clear();
    if (v->is_string()) {
      p.stop.push_back(v->get<std::string>());
    } else {
      CHECK(v->is_array(), "sampling: 'stop' must be a string or an array of strings");
      for (const Json& s : *v) {
        CHECK(s.is_string(), "sampling: 'stop' entries must be strings, got {}", s.dump());
        p.stop.push_back(s.get<std::string>());
      }
    }
  }
  if (const Json* v = f.get("seed")) {
    CHECK(v->is_number_integer() && (v->is_number_unsigned() || v->get<int64_t>() >= 0),
          "sampling: 'seed' must be a non-negative integer, got {}", v->dump());
    p.seed = v->get<uint64_t>();
  }
}

}  // namespace

SamplingParams sampling_params_from_json(const Json& j, const SamplingParams& defaults) {
  CHECK(j.is_object(), "sampling: expected a JSON object, got {}", j.dump());
  Fields f{j, {}};
  SamplingParams p = defaults;
  read_fields(f, p);
  f.check_all_read("sampling: unknown key ");
  return p;
}

const std::vector<std::string>& sampling_param_keys() {
  // What the reader asks for of an empty object: the list cannot drift from the reader.
  static const std::vector<std::string> keys = [] {
    const Json empty = Json::object();
    Fields f{empty, {}};
    SamplingParams p;
    read_fields(f, p);
    return f.asked;
  }();
  return keys;
}

}  // namespace fp8rl
