#include "train/logprob_pass.h"

#include <algorithm>

#include "model/backward.h"
#include "model/forward.h"
#include "ops/backward.h"
#include "ops/memory.h"

namespace fp8rl {

struct LogprobPass::Buffers {
  StepInput in;
  StepBatch step;
  TensorView targets;  // [T] i32
  TensorView record;   // [L, T, k] i32 the experts used (PassOptions::record_routing)
  TensorView chosen;   // [L, T, k] i32 the layers' own top-k (with replay)
  Tape tape;
  std::vector<int32_t> rows_host;          // [S] a scoring pass's pooled rows
  TensorView rows;                         // [S] i32 on the device
  TensorView pooled;                       // [S, H] activation dtype
  TensorView loss, logprob, lse, entropy;  // [T] f32
  ops::CrossEntropyParams ce;
};

namespace {

size_t arena_alignment(Device d) {
  return d == Device::cuda ? 256 : 64;
}

size_t align_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

int64_t blocks_for(const PackedSequences& b) {
  int64_t n = 0;
  for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s)
    n += (b.cu_seqlens[s + 1] - b.cu_seqlens[s] + kKvBlockSize - 1) / kKvBlockSize;
  return n;
}

void check_batch(const PackedSequences& b) {
  CHECK(b.cu_seqlens.size() >= 2 && b.cu_seqlens.front() == 0 &&
            b.cu_seqlens.back() == int64_t(b.ids.size()) && b.targets.size() == b.ids.size(),
        "training pass: {} ids, {} targets and sequence bounds [{} .. {}] do not fit together",
        b.ids.size(), b.targets.size(), b.cu_seqlens.empty() ? -1 : b.cu_seqlens.front(),
        b.cu_seqlens.empty() ? -1 : b.cu_seqlens.back());
  for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s)
    CHECK(b.cu_seqlens[s + 1] > b.cu_seqlens[s], "training pass: sequence {} is empty", s);
}

}  // namespace

size_t PassPlan::region_bytes() const {
  return align_up(saved_bytes, 256) + kv_bytes;
}

LogprobPass::LogprobPass(Context& ctx, const Model& model, const LoraAdapter* adapter,
                         StandbyRegion* region)
    : ctx_(ctx), model_(model), adapter_(adapter), region_(region) {
  CHECK(model.device() == ctx.device, "training pass: the model is on {}, the context on {}",
        device_name(model.device()), device_name(ctx.device));
  if (adapter_ != nullptr) adapter_->check_fits(model);
  if (region_ == nullptr) {
    own_region_ = std::make_unique<StandbyRegion>(ctx);
    region_ = own_region_.get();
  }
}

void LogprobPass::hold_region(const PassPlan& p, int64_t kv_blocks) {
  const bool was_holder = region_->holder() == this;
  char* base = static_cast<char*>(region_->acquire(this, p.region_bytes()));
  const size_t saved = align_up(p.saved_bytes, 256);
  arena_ = std::make_unique<Arena>(ctx_.device, arena_alignment(ctx_.device));
  arena_->attach(base, saved);
  char* kv_at = base + saved;
  // Another holder (the engine's KV pool) wrote over the pool since the last pass, or the
  // region moved, or the pool no longer lies after the arena: lay it out (and zero it) again.
  if (!was_holder || base != held_base_ || kv_ == nullptr || kv_->num_blocks() < kv_blocks ||
      kv_->k(0).data != static_cast<void*>(kv_at))
    kv_ = std::make_unique<KvPool>(model_.config(), kv_blocks, ctx_, KvDType::activation, kv_at);
  held_base_ = base;
}

LogprobPass::~LogprobPass() = default;

void LogprobPass::run(Context& ctx, Arena& arena, Arena& host, KvPool& kv,
                      const PackedSequences& batch, const PassOptions& opt, Buffers& b) {
  const ModelConfig& c = model_.config();
  const int64_t t = int64_t(batch.ids.size());
  int32_t next_block = 0;
  for (size_t s = 0; s + 1 < batch.cu_seqlens.size(); ++s) {
    const int64_t first = batch.cu_seqlens[s], n = batch.cu_seqlens[s + 1] - first;
    std::vector<int32_t> table(size_t((n + kKvBlockSize - 1) / kKvBlockSize));
    for (int32_t& id : table) id = next_block++;
    b.in.add_sequence(batch.ids.subspan(size_t(first), size_t(n)), 0, table, kKvBlockSize,
                      StepInput::Logits::none);
  }
  if (!ctx.dry_run) b.in.validate(c, kv.num_blocks(), kv.block_size());
  b.in.pack_block_tables();
  b.step = upload_step(ctx, b.in, arena.alloc({step_elements(b.in)}, DType::i32));
  if (!batch.routing.empty() || opt.record_routing) {
    // [T, L, k] as the engine records it, [L, T, k] as the layers read it; host memory (MoE
    // layers run on the CPU only).
    const int64_t layers = c.num_layers, k = c.moe.top_k;
    CHECK(c.has_moe() && ctx.device == Device::cpu,
          "training pass: routing replay and recording need an MoE model on the CPU");
    if (!batch.routing.empty()) {
      CHECK(int64_t(batch.routing.size()) == t * layers * k,
            "training pass: {} routing ids for {} tokens, {} layers and top-{}",
            batch.routing.size(), t, layers, k);
      b.step.routing_replay = arena.alloc({layers, t, k}, DType::i32);
      if (!ctx.dry_run)
        for (int64_t i = 0; i < t; ++i)
          for (int64_t l = 0; l < layers; ++l)
            std::copy_n(batch.routing.data() + (i * layers + l) * k, k,
                        b.step.routing_replay.ptr<int32_t>() + (l * t + i) * k);
      b.chosen = arena.alloc({layers, t, k}, DType::i32);
      b.step.routing_chosen = b.chosen;
    }
    if (opt.record_routing) {
      b.record = arena.alloc({layers, t, k}, DType::i32);
      if (!ctx.dry_run) std::fill_n(b.record.ptr<int32_t>(), t * layers * k, -1);
      b.step.routing_record = b.record;
    }
  }
  b.targets = arena.alloc({t}, DType::i32);
  ops::copy(ctx, TensorView(const_cast<int32_t*>(batch.targets.data()), DType::i32, {t}),
            b.targets);
  b.tape = alloc_tape(arena, c, t, ctx.activation_dtype(), opt.checkpointing,
                      opt.offload ? &host : nullptr);
  b.tape.dropout_p = opt.lora_dropout;
  b.tape.dropout_seed = opt.dropout_seed;
  if (!opt.pooled_rows.empty()) {
    const int64_t s = int64_t(opt.pooled_rows.size());
    for (int64_t r : opt.pooled_rows)
      CHECK(r >= 0 && r < t, "training pass: pooled row {} outside the {} tokens", r, t);
    b.rows_host.assign(opt.pooled_rows.begin(), opt.pooled_rows.end());
    b.rows = arena.alloc({s}, DType::i32);
    ops::copy(ctx, TensorView(b.rows_host.data(), DType::i32, {s}), b.rows);
    b.pooled = arena.alloc({s, c.hidden_size}, ctx.activation_dtype());
    fp8rl::forward(ctx, model_, opt.reference ? reference_ : adapter_, kv, b.step, b.tape);
    ops::embedding(ctx, b.rows, b.tape.h_final, 1.0f, b.pooled);  // a row gather, exact
    return;
  }
  b.loss = arena.alloc({t}, DType::f32);
  b.logprob = arena.alloc({t}, DType::f32);
  b.lse = arena.alloc({t}, DType::f32);
  if (opt.entropy) b.entropy = arena.alloc({t}, DType::f32);
  b.ce.temperature = opt.temperature;
  b.ce.softcap = float(c.final_logit_softcapping);
  fp8rl::forward(ctx, model_, opt.reference ? reference_ : adapter_, kv, b.step, b.tape);
  ops::lm_head_cross_entropy(ctx, b.tape.h_final, model_.lm_head, b.targets, b.ce, b.loss,
                             b.logprob, b.lse, b.entropy);
}

void LogprobPass::backward_on(Context& ctx, const Buffers& b, const KvPool& kv,
                              const TensorView& dlogprob, const TensorView& grads) {
  const int64_t t = b.step.num_tokens();
  ops::ScratchScope scope(ctx);
  const TensorView dloss = ops::scratch_alloc(ctx, {t}, DType::f32);
  ops::copy(ctx, dlogprob, dloss);
  const TensorView d_hidden = ops::scratch_alloc(ctx, {t, model_.config().hidden_size}, DType::f32);
  ops::lm_head_cross_entropy_backward(ctx, b.tape.h_final, model_.lm_head, b.targets, b.ce, b.lse,
                                      dloss, d_hidden);
  Tape tape = b.tape;
  fp8rl::backward(ctx, model_, kv, b.step, tape, d_hidden, *adapter_, grads);
}

void LogprobPass::set_reference(const LoraAdapter* reference) {
  if (reference != nullptr) reference->check_fits(model_);
  reference_ = reference;
}

PassPlan LogprobPass::plan(const PackedSequences& batch, const PassOptions& opt) {
  check_batch(batch);
  const Device dev = ctx_.device;
  Arena scratch = Arena::measuring(dev, arena_alignment(dev));
  Arena saved = Arena::measuring(dev, arena_alignment(dev));
  Arena host = Arena::measuring(Device::cpu, 64);
  Context dry = ctx_;
  dry.dry_run = true;
  dry.scratch = &scratch;
  if (probe_kv_ == nullptr) probe_kv_ = std::make_unique<KvPool>(model_.config(), 1, ctx_);
  KvPool& kv = *probe_kv_;
  Buffers b;
  run(dry, saved, host, kv, batch, opt, b);
  if (adapter_ != nullptr && !opt.reference) {
    const int64_t t = int64_t(batch.ids.size());
    const TensorView dlogprob(scratch.base(), DType::f32, {t}, dev);
    const TensorView grads(scratch.base(), DType::f32, {adapter_->master_params().numel()}, dev);
    if (opt.pooled_rows.empty())
      backward_on(dry, b, kv, dlogprob, grads);
    else
      backward_pooled_on(dry, b, kv, nullptr, grads);
  }
  PassPlan p;
  p.saved_bytes = saved.high_water();
  p.scratch_bytes = scratch.high_water();
  p.host_bytes = host.high_water();
  p.kv_bytes = size_t(blocks_for(batch)) * KvPool::block_bytes(model_.config(), ctx_);
  return p;
}

void LogprobPass::forward(const PackedSequences& batch, const PassOptions& opt) {
  CHECK(!model_.config().sequence_classification || !opt.pooled_rows.empty(),
        "training pass: '{}' is a sequence classifier ({}), it has no lm_head to train a "
        "policy with; train a reward model with fp8rl reward",
        model_.dir(), model_.config().architecture);
  const PassPlan p = plan(batch, opt);
  last_.reset();
  hold_region(p, blocks_for(batch));
  ops::scratch_reserve(ctx_, p.scratch_bytes);
  if (host_storage_.size() < p.host_bytes) {
    host_arena_.reset();
    host_storage_ = DeviceBuffer();
    host_storage_ = DeviceBuffer::pinned_host(ctx_, p.host_bytes);
  }
  host_arena_ = std::make_unique<Arena>(Device::cpu, 64);
  if (host_storage_.size() > 0) host_arena_->attach(host_storage_.data(), host_storage_.size());
  auto b = std::make_unique<Buffers>();
  run(ctx_, *arena_, *host_arena_, *kv_, batch, opt, *b);
  const int64_t t = int64_t(batch.ids.size());
  if (!opt.pooled_rows.empty()) {
    // The states in the activation dtype to the host, then to f32.
    const TensorView& pv = b->pooled;
    std::vector<char> raw(pv.nbytes());
    ops::copy(ctx_, pv, TensorView(raw.data(), pv.dtype, pv.shape));
    ops::synchronize(ctx_);
    pooled_.resize(size_t(pv.numel()));
    convert(raw.data(), pv.dtype, pooled_.data(), DType::f32, pooled_.size());
    logprobs_.clear();
    entropies_.clear();
    routing_.clear();
    replay_changes_ = {};
    last_ = std::move(b);
    last_options_ = opt;
    return;
  }
  logprobs_.assign(size_t(t), 0.0f);
  ops::copy(ctx_, b->logprob, TensorView(logprobs_.data(), DType::f32, {t}));
  ops::synchronize(ctx_);
  replay_changes_ = {};
  if (!batch.routing.empty()) {
    const ModelConfig& c = model_.config();
    const int64_t layers = c.num_layers, k = c.moe.top_k;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t l = 0; l < layers; ++l) {
        const int32_t* replayed = batch.routing.data() + (i * layers + l) * k;
        if (!c.layers[size_t(l)].moe || replayed[0] < 0) continue;
        std::vector<int32_t> a(replayed, replayed + k);
        std::vector<int32_t> own(b->chosen.ptr<const int32_t>() + (l * t + i) * k,
                                 b->chosen.ptr<const int32_t>() + (l * t + i + 1) * k);
        std::sort(a.begin(), a.end());  // a set: the experts are summed in index order
        std::sort(own.begin(), own.end());
        replay_changes_.changed += a != own;
        ++replay_changes_.replayed;
      }
  }
  routing_.clear();
  if (opt.record_routing) {
    const int64_t layers = model_.config().num_layers, k = model_.config().moe.top_k;
    routing_.resize(size_t(t * layers * k));
    for (int64_t i = 0; i < t; ++i)
      for (int64_t l = 0; l < layers; ++l)
        std::copy_n(b->record.ptr<const int32_t>() + (l * t + i) * k, k,
                    routing_.data() + (i * layers + l) * k);
  }
  entropies_.clear();
  if (opt.entropy) {
    entropies_.assign(size_t(t), 0.0f);
    ops::copy(ctx_, b->entropy, TensorView(entropies_.data(), DType::f32, {t}));
  }
  last_ = std::move(b);
  last_options_ = opt;
}

void LogprobPass::check_backward() const {
  CHECK(last_ != nullptr, "training pass: backward() without a forward()");
  CHECK(adapter_ != nullptr, "training pass: no adapter to take gradients");
  CHECK(!last_options_.reference,
        "training pass: backward() after a reference forward (which ran without the adapter)");
  CHECK(region_->holder() == this && region_->data() == held_base_,
        "training pass: backward() after another phase (the engine) took the standby region "
        "back: the forward's saved activations are gone");
}

void LogprobPass::backward_pooled_on(Context& ctx, const Buffers& b, const KvPool& kv,
                                     const float* d_pooled, const TensorView& grads) {
  const int64_t t = b.step.num_tokens(), h = model_.config().hidden_size;
  ops::ScratchScope scope(ctx);
  const TensorView d_hidden = ops::scratch_alloc(ctx, {t, h}, DType::f32);
  ops::fill_zero(ctx, d_hidden);
  if (!ctx.dry_run)
    for (size_t s = 0; s < b.rows_host.size(); ++s) {
      const int64_t r = b.rows_host[s];
      ops::copy(ctx, TensorView(const_cast<float*>(d_pooled) + s * size_t(h), DType::f32, {1, h}),
                d_hidden.slice_rows(r, r + 1));
    }
  Tape tape = b.tape;
  fp8rl::backward(ctx, model_, kv, b.step, tape, d_hidden, *adapter_, grads);
}

void LogprobPass::backward_pooled(std::span<const float> d_pooled, const TensorView& grads) {
  check_backward();
  CHECK(!last_->rows_host.empty(), "training pass: backward_pooled() after a log-prob forward");
  const int64_t s = int64_t(last_->rows_host.size()), h = model_.config().hidden_size;
  CHECK(int64_t(d_pooled.size()) == s * h, "training pass: {} gradients for {} pooled states of {}",
        d_pooled.size(), s, h);
  CHECK(grads.device == ctx_.device, "training pass: the gradients must be on {}",
        device_name(ctx_.device));
  backward_pooled_on(ctx_, *last_, *kv_, d_pooled.data(), grads);
  ops::synchronize(ctx_);  // d_pooled is the caller's host memory
}

void LogprobPass::backward(std::span<const float> dlogprob, const TensorView& grads) {
  check_backward();
  CHECK(last_->rows_host.empty(), "training pass: backward() after a scoring forward");
  const int64_t t = last_->step.num_tokens();
  CHECK(int64_t(dlogprob.size()) == t, "training pass: {} gradients for {} tokens", dlogprob.size(),
        t);
  // The cross-entropy backward takes the gradient of loss = -logprob.
  std::vector<float> dloss(dlogprob.size());
  std::transform(dlogprob.begin(), dlogprob.end(), dloss.begin(), [](float g) { return -g; });
  const TensorView host_dloss(dloss.data(), DType::f32, {t});
  if (ctx_.device == Device::cpu || grads.device == ctx_.device) {
    backward_on(ctx_, *last_, *kv_, host_dloss, grads);
    return;
  }
  const int64_t n = grads.numel();
  if (device_grads_.size() != size_t(n) * 4) device_grads_ = DeviceBuffer(ctx_, size_t(n) * 4);
  const TensorView dev = device_grads_.view({n}, DType::f32);
  ops::fill_zero(ctx_, dev);
  backward_on(ctx_, *last_, *kv_, host_dloss, dev);
  std::vector<float> host(static_cast<size_t>(n));
  ops::copy(ctx_, dev, TensorView(host.data(), DType::f32, {n}));
  ops::synchronize(ctx_);
  float* g = grads.ptr<float>();
  for (int64_t i = 0; i < n; ++i) g[i] += host[size_t(i)];
}

}  // namespace fp8rl
