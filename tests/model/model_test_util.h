// Running the forward in tests.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "model/forward.h"
#include "test_util.h"

namespace fp8rl::test {

inline std::vector<int32_t> positions_from(size_t n, int32_t start = 0) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = start + int32_t(i);
  return p;
}

// The checkpoint in `dir`, as stored (nullopt) or with an on-the-fly FP8 scheme.
inline Model load_model(const std::string& dir, std::optional<Fp8Scheme> scheme = std::nullopt) {
  LoadOptions o;
  o.fp8 = scheme;
  return Model::load(dir, o);
}

// Logits of every token of one sequence run as a single prefill (bf16_activations: the CPU's
// emulation of CUDA's bf16 activations, Context::bf16_activations), with `adapter` if given.
inline Tensor prefill_logits(const Model& m, const std::vector<int32_t>& ids,
                             bool bf16_activations = false, const LoraAdapter* adapter = nullptr) {
  Arena arena;
  Context ctx{Device::cpu, &arena};
  ctx.bf16_activations = bf16_activations;
  KvCache cache(m.config(), int64_t(ids.size()));
  const std::vector<int32_t> pos = positions_from(ids.size());
  Tensor logits = Tensor::empty({int64_t(ids.size()), m.config().vocab_size}, DType::f32);
  SequenceInput seq{ids, pos, &cache};
  forward(ctx, m, adapter, {&seq, 1}, LogitRows::all, logits);
  return logits;
}

// The token ids of a golden: ids.json for fp32, ids_fp8_<scheme>.json for an FP8 scheme.
inline std::vector<int32_t> golden_ids(const std::string& arch, const std::string& scheme = "off") {
  std::ifstream f(golden_dir(arch) +
                  (scheme == "off" ? "/ids.json" : "/ids_fp8_" + scheme + ".json"));
  return nlohmann::json::parse(f).get<std::vector<int32_t>>();
}

}  // namespace fp8rl::test
