// PPO's value model: a second LoRA adapter with a one-label score head (PEFT's SEQ_CLS, what
// fp8rl reward trains) over the policy's own frozen base, run by a LogprobPass in its scoring
// mode. value(row) = head . h(row), h the final normed hidden state at that packed row (every
// value position of a response, where a reward model reads one row); its gradient goes back
// through backward_pooled with d h = dvalue x head, plus the head's own, dvalue x h.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/adapter.h"
#include "model/model.h"
#include "ops/context.h"
#include "train/logprob_pass.h"

namespace fp8rl {

// The value adapter of a run whose policy adapter is `policy`, on ctx's device: loaded from
// `dir` (a reward model's SEQ_CLS adapter, with its head) when given, else fresh with the
// policy's LoRA settings (A as PEFT initializes it, B = 0, the head normal with the model's
// initializer_range, transformers' classifier init) from `seed`. A loaded adapter must have a
// one-label head and the policy adapter's rank and target modules: an error names the one that
// differs.
std::unique_ptr<LoraAdapter> make_value_adapter(const std::string& dir, const LoraAdapter& policy,
                                                const Model& model, Context& ctx, uint64_t seed);

class ValueModel {
 public:
  // `adapter` must have a one-label score head and fit the model; both must outlive this.
  // region: the standby region the pass takes turns in (null: a region of its own).
  // checkpointing / offload: the pass's, as the policy's (PassOptions): without them a pass
  // keeps every layer's activations of all its tokens for the backward.
  ValueModel(Context& ctx, const Model& model, const LoraAdapter& adapter,
             StandbyRegion* region = nullptr, bool checkpointing = false, bool offload = false);
  // The values at packed rows `rows` of `batch` (its targets are ignored), with the adapter as
  // it is now; keeps what backward() needs.
  std::vector<double> values(const PackedSequences& batch, std::span<const int64_t> rows);
  // grads (f32 [P] on the context's device, laid out like the adapter's masters) +=
  // d/d(adapter) sum_i dvalue[i] value[i], for the last values().
  void backward(std::span<const double> dvalue, const TensorView& grads);
  // The pass's plan over `batch` with `rows` as its value rows.
  PassPlan plan(const PackedSequences& batch, std::span<const int64_t> rows);

 private:
  std::vector<float> head() const;  // the head's masters on the host, f32 [H]

  Context& ctx_;
  const Model& model_;
  const LoraAdapter& adapter_;
  LogprobPass pass_;
  std::vector<int64_t> rows_;  // the last forward's (the pass reads them during it)
  std::vector<float> head_;    // the head the last forward used
  bool checkpointing_ = false, offload_ = false;
  PassOptions options() const;  // the pass's options at the rows of the last values() or plan()
};

}  // namespace fp8rl
