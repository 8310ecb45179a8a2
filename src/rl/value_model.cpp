#include "rl/value_model.h"

#include "core/check.h"
#include "ops/memory.h"

namespace fp8rl {

std::unique_ptr<LoraAdapter> make_value_adapter(const std::string& dir, const LoraAdapter& policy,
                                                const Model& model, Context& ctx, uint64_t seed) {
  std::unique_ptr<LoraAdapter> v;
  if (dir.empty()) {
    LoraConfig c = policy.config();
    c.sequence_classification = true;
    c.num_labels = 1;
    v = std::make_unique<LoraAdapter>(LoraAdapter::init(c, model, seed));
  } else {
    v = std::make_unique<LoraAdapter>(LoraAdapter::load_peft(dir, model));
    CHECK(v->has_score_head(),
          "value_adapter '{}' has no score head: it must be a reward model's adapter (PEFT "
          "task_type SEQ_CLS with the 'score' head, as fp8rl reward saves)",
          dir);
    const TensorView h = v->score_slice(v->master_params());
    CHECK(h.shape[0] == 1, "value_adapter '{}': its score head has {} labels; a value head has 1",
          dir, h.shape[0]);
    CHECK(v->config().r == policy.config().r,
          "value_adapter '{}': its rank r = {} differs from the policy adapter's lora_r = {} (the "
          "value adapter must have the policy's rank and target modules)",
          dir, v->config().r, policy.config().r);
    for (int64_t l = 0; l < policy.num_layers(); ++l)
      for (int p = 0; p < 7; ++p)
        CHECK(v->targeted(l, p) == policy.targeted(l, p),
              "value_adapter '{}': {} {} an adapter in the value adapter but {} in the policy's "
              "(the value adapter must have the policy's rank and target modules)",
              dir, projection_path(l, p), v->targeted(l, p) ? "has" : "has no",
              policy.targeted(l, p) ? "has one" : "none");
  }
  v->to_device(ctx);
  return v;
}

ValueModel::ValueModel(Context& ctx, const Model& model, const LoraAdapter& adapter,
                       StandbyRegion* region, bool checkpointing, bool offload)
    : ctx_(ctx),
      model_(model),
      adapter_(adapter),
      pass_(ctx, model, &adapter, region),
      checkpointing_(checkpointing),
      offload_(offload) {
  CHECK(adapter.has_score_head(), "the value adapter has no score head");
  CHECK(adapter.score_slice(adapter.master_params()).shape[0] == 1,
        "the value adapter's score head must have one label");
}

std::vector<float> ValueModel::head() const {
  const TensorView w = adapter_.score_slice(adapter_.master_params());
  std::vector<float> h(size_t(w.numel()));
  Context c = ctx_;
  ops::copy(c, w, TensorView(h.data(), DType::f32, w.shape));
  ops::synchronize(c);
  return h;
}

std::vector<double> ValueModel::values(const PackedSequences& batch,
                                       std::span<const int64_t> rows) {
  rows_.assign(rows.begin(), rows.end());
  head_ = head();
  pass_.forward(batch, options());
  const size_t h = size_t(model_.config().hidden_size);
  const std::span<const float> states = pass_.pooled();  // [S, H]
  std::vector<double> v(rows_.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double acc = 0;
    for (size_t k = 0; k < h; ++k) acc += double(states[i * h + k]) * double(head_[k]);
    v[i] = acc;
  }
  return v;
}

void ValueModel::backward(std::span<const double> dvalue, const TensorView& grads) {
  CHECK(dvalue.size() == rows_.size(), "value backward: {} derivatives for {} values",
        dvalue.size(), rows_.size());
  const size_t h = size_t(model_.config().hidden_size);
  const std::span<const float> states = pass_.pooled();
  std::vector<float> d_pooled(rows_.size() * h);
  std::vector<double> d_head(h, 0.0);
  for (size_t i = 0; i < rows_.size(); ++i)
    for (size_t k = 0; k < h; ++k) {
      d_pooled[i * h + k] = float(dvalue[i] * double(head_[k]));
      d_head[k] += dvalue[i] * double(states[i * h + k]);
    }
  pass_.backward_pooled(d_pooled, grads);
  // The head's gradient added on the host (H values).
  const TensorView g = adapter_.score_slice(grads);
  std::vector<float> host(size_t(g.numel()));
  ops::copy(ctx_, g, TensorView(host.data(), DType::f32, g.shape));
  ops::synchronize(ctx_);
  for (size_t k = 0; k < h; ++k) host[k] += float(d_head[k]);
  ops::copy(ctx_, TensorView(host.data(), DType::f32, g.shape), g);
  ops::synchronize(ctx_);
}

PassPlan ValueModel::plan(const PackedSequences& batch, std::span<const int64_t> rows) {
  rows_.assign(rows.begin(), rows.end());
  return pass_.plan(batch, options());
}

PassOptions ValueModel::options() const {
  PassOptions o;
  o.pooled_rows = rows_;
  o.checkpointing = checkpointing_;
  o.offload = offload_;
  return o;
}

}  // namespace fp8rl
