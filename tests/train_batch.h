// The training goldens' batch and HF's loss with its LoRA gradients, for the CPU golden test
// (tests/train/test_train_goldens.cpp) and the CUDA-vs-CPU test (tests/gpu/test_train_gpu.cpp).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "model/adapter.h"
#include "ops/backward.h"
#include "train/logprob_pass.h"

namespace fp8rl::test {

// HF's batch (input_ids [S, L], labels [S, L], shifted inside the model) as packed sequences:
// position t of a sequence targets labels[t + 1]; without the label mask, input_ids[t + 1].
struct TrainBatch {
  std::vector<int32_t> ids, targets;
  std::vector<int64_t> cu{0};
  int64_t counted = 0;
  PackedSequences packed() const { return {ids, targets, cu}; }
};

inline TrainBatch train_batch_of(const nlohmann::json& b, bool use_label_mask = true) {
  TrainBatch out;
  for (size_t s = 0; s < b["input_ids"].size(); ++s) {
    const auto ids = b["input_ids"][s].get<std::vector<int32_t>>();
    const auto labels = b["labels"][s].get<std::vector<int32_t>>();
    for (size_t t = 0; t < ids.size(); ++t) {
      out.ids.push_back(ids[t]);
      int32_t target = t + 1 < ids.size() ? labels[t + 1] : ops::kIgnoreIndex;
      if (!use_label_mask && t + 1 < ids.size()) target = ids[t + 1];
      out.targets.push_back(target);
      out.counted += target != ops::kIgnoreIndex;
    }
    out.cu.push_back(int64_t(out.ids.size()));
  }
  return out;
}

struct LossAndGrads {
  double loss = 0;
  std::vector<float> grads;  // [P] like adapter.master_params()
};

// HF's loss (mean cross-entropy over the counted tokens) and its LoRA gradients, on ctx.
inline LossAndGrads loss_and_grads(Context& ctx, const Model& m, const LoraAdapter& adapter,
                                   const TrainBatch& b, bool checkpointing = false,
                                   bool offload = false) {
  LogprobPass pass(ctx, m, &adapter);
  PassOptions o;
  o.checkpointing = checkpointing;
  o.offload = offload;
  pass.forward(b.packed(), o);
  LossAndGrads r;
  std::vector<float> dlogprob(b.ids.size(), 0.0f);
  for (size_t t = 0; t < b.ids.size(); ++t)
    if (b.targets[t] != ops::kIgnoreIndex) {
      r.loss -= pass.logprobs()[t];
      dlogprob[t] = -1.0f / float(b.counted);
    }
  r.loss /= double(b.counted);
  r.grads.assign(size_t(adapter.master_params().numel()), 0.0f);
  pass.backward(dlogprob, TensorView(r.grads.data(), DType::f32, {int64_t(r.grads.size())}));
  return r;
}

}  // namespace fp8rl::test
