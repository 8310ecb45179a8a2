// Shape checks and backend dispatch for the backward ops (ops/backward.h). Operands are checked
// here once; device memory is never read (the CPU references validate their metadata).
#include "ops/backward.h"

#include "core/parallel.h"
#include "ops/cpu/backward_ops.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/dispatch.h"
#include "quant/fp8.h"
#if FP8RL_HAVE_CUDA
#include "ops/cuda/cuda_ops.h"
#endif

// A dry run's scratch of the CUDA implementation (the CPU versions of these ops take none);
// `bytes` is evaluated only for a CUDA context.
#if FP8RL_HAVE_CUDA
#define FP8RL_DRY_RUN_CUDA_SCRATCH(ctx, bytes)                     \
  do {                                                             \
    if ((ctx).device == Device::cuda) dry_run_scratch(ctx, bytes); \
  } while (0)
#else
#define FP8RL_DRY_RUN_CUDA_SCRATCH(ctx, bytes) \
  do {                                         \
  } while (0)
#endif

namespace fp8rl::ops {

namespace {

void check_backward_ctx(const Context& ctx, const char* what) {
  CHECK(!ctx.dry_run || ctx.scratch != nullptr, "a dry run needs a measuring scratch arena");
  CHECK(ctx.device != Device::cpu || ctx.scratch != nullptr, "{}: CPU Context has no scratch arena",
        what);
  // A dry run may plan for a CUDA device that is not there (it computes nothing).
  CHECK(ctx.device != Device::cuda || ctx.cuda != nullptr || ctx.dry_run,
        "{}: CUDA Context has no backend (use CudaDevice::context())", what);
  CHECK(!ctx.bf16_activations,
        "{}: the backward ops are the fp32 reference; bf16_activations is not emulated", what);
}

Arena& scratch_of(Context& ctx) {
  return *ctx.scratch;
}

void check_tensor(const Context& ctx, const TensorView& t, DType want, const char* what) {
  CHECK(t.dtype == want && t.is_contiguous() && t.device == ctx.device,
        "{}: expected a contiguous {} tensor on {}, got {} {} on {}", what, dtype_name(want),
        device_name(ctx.device), dtype_name(t.dtype), t.shape.str(), device_name(t.device));
}
void check_act(const Context& ctx, const TensorView& t, const char* what) {
  check_tensor(ctx, t, ctx.activation_dtype(), what);
}
void check_f32(const Context& ctx, const TensorView& t, const char* what) {
  check_tensor(ctx, t, DType::f32, what);
}
// An output gradient read by GEMMs: f32, or (CUDA) gemm_gradient's bf16.
void check_gemm_gradient(const Context& ctx, const TensorView& t, const char* what) {
  if (ctx.device == Device::cuda && t.dtype == DType::bf16)
    check_tensor(ctx, t, DType::bf16, what);
  else
    check_f32(ctx, t, what);
}
void check_shape(const TensorView& t, const Shape& s, const char* what) {
  CHECK(t.shape == s, "{}: expected shape {}, got {}", what, s.str(), t.shape.str());
}
void check_i32(const Context& ctx, const TensorView& t, int64_t n, const char* what) {
  check_tensor(ctx, t, DType::i32, what);
  check_shape(t, Shape{n}, what);
}
void check_param(const Context& ctx, const TensorView& t, int64_t n, const char* what) {
  CHECK(t.device == ctx.device && t.is_contiguous() && t.rank() == 1 && t.dim(0) == n,
        "{}: expected a contiguous [{}] tensor on {}, got {}", what, n, device_name(ctx.device),
        t.shape.str());
  if (ctx.device == Device::cuda) check_f32(ctx, t, what);
}
// Rows of D values: [R, D] or [T, heads, D].
int64_t norm_rows(const TensorView& x, const char* what) {
  CHECK(x.rank() == 2 || x.rank() == 3, "{}: expected [R, D] or [T, heads, D], got {}", what,
        x.shape.str());
  return x.numel() / std::max<int64_t>(x.dim(x.rank() - 1), 1);
}

void check_rope(const Context& ctx, const TensorView& x, const TensorView& positions,
                const TensorView& inv_freq, const char* what) {
  CHECK(x.rank() == 3 && x.dim(2) % 2 == 0, "{}: expected [T, heads, D] with D even, got {}", what,
        x.shape.str());
  check_i32(ctx, positions, x.dim(0), what);
  check_f32(ctx, inv_freq, what);
  check_shape(inv_freq, Shape{x.dim(2) / 2}, what);
}

void check_pools_and_batch(const Context& ctx, const TensorView& q, const TensorView& k_pool,
                           const TensorView& v_pool, const PagedBatch& b, const char* what) {
  check_act(ctx, q, what);
  check_act(ctx, k_pool, what);
  check_act(ctx, v_pool, what);
  CHECK(q.rank() == 3 && k_pool.rank() == 4 && k_pool.shape == v_pool.shape &&
            q.dim(2) == k_pool.dim(3) && k_pool.dim(2) > 0 && q.dim(1) % k_pool.dim(2) == 0 &&
            k_pool.dim(1) > 0,
        "{}: q {} pools {} {}", what, q.shape.str(), k_pool.shape.str(), v_pool.shape.str());
  CHECK(b.num_seqs >= 0, "{}: {} sequences", what, b.num_seqs);
  check_i32(ctx, b.cu_q, b.num_seqs + 1, what);
  check_i32(ctx, b.context_lens, b.num_seqs, what);
  const TensorView& t = b.block_tables;
  CHECK(
      t.dtype == DType::i32 && t.rank() == 2 && t.dim(0) == b.num_seqs && t.device == ctx.device &&
          t.strides[1] == 1 && (b.num_seqs <= 1 || t.strides[0] >= t.dim(1)),
      "{}: block_tables must be [S, blocks] i32 with contiguous rows, got {}", what, t.shape.str());
  CHECK(b.max_query_len >= 0 && b.max_context_len >= b.max_query_len &&
            b.max_context_len <= t.dim(1) * k_pool.dim(1),
        "{}: bounds of {} queries and {} tokens per sequence for tables of {} blocks of {}", what,
        b.max_query_len, b.max_context_len, t.dim(1), k_pool.dim(1));
}

void check_weight(const Context& ctx, const LinearWeight& w, const char* what) {
  CHECK(w.weight.rank() == 2 && w.weight.device == ctx.device && w.weight.is_contiguous(),
        "{}: weight {} on {}", what, w.weight.shape.str(), device_name(w.weight.device));
  CHECK(w.is_fp8() == (w.weight.dtype == DType::f8e4m3),
        "{}: scheme {} does not match weight dtype {}", what, scheme_name(w.scheme),
        dtype_name(w.weight.dtype));
  if (w.is_fp8()) {
    check_f32(ctx, w.scales, what);
    check_shape(w.scales, weight_scale_shape(w.scheme, w.out_features(), w.in_features()), what);
  } else {
    CHECK(w.weight.dtype == DType::f32 || w.weight.dtype == DType::bf16 ||
              w.weight.dtype == DType::f16,
          "{}: unquantized weights are f32, bf16 or f16, got {}", what, dtype_name(w.weight.dtype));
  }
}

void check_ce(Context& ctx, const TensorView& x, const LinearWeight& w, const TensorView& targets,
              const CrossEntropyParams& p, const char* what) {
  check_backward_ctx(ctx, what);
  check_act(ctx, x, what);
  check_weight(ctx, w, what);
  // CUDA runs the forward's linear on it: prepared as ops::linear requires.
  CHECK(ctx.device != Device::cuda || !w.is_fp8() || !w.gemm_scales.empty(),
        "{}: CUDA weight not prepared (ops::prepare_linear / Model::to_device)", what);
  CHECK(ctx.device != Device::cuda || w.is_fp8() || w.weight.dtype == DType::bf16,
        "{}: unquantized CUDA weights must be bf16, got {}", what, dtype_name(w.weight.dtype));
  CHECK(x.rank() == 2 && x.dim(1) == w.in_features(), "{}: x {} for an lm_head {}", what,
        x.shape.str(), w.weight.shape.str());
  check_i32(ctx, targets, x.dim(0), what);
  CHECK(p.temperature > 0 && p.softcap >= 0 && p.chunk_rows > 0,
        "{}: temperature {} softcap {} chunk_rows {}", what, p.temperature, p.softcap,
        p.chunk_rows);
}

// A dry run's scratch of the chunked cross-entropy on either device.
void ce_dry_run_scratch(Context& ctx, const LinearWeight& w, int64_t t,
                        const CrossEntropyParams& p) {
  if (ctx.device == Device::cpu)
    dry_run_scratch(ctx, lm_head_cross_entropy_scratch_bytes(w, t, p));
  else
    FP8RL_DRY_RUN_CUDA_SCRATCH(ctx, cuda::lm_head_cross_entropy_scratch_bytes(w, t, p));
}

}  // namespace

// ---- RMSNorm

void rms_norm_save(Context& ctx, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   const TensorView& out, const TensorView& inv_rms) {
  const char* what = "rms_norm_save";
  check_backward_ctx(ctx, what);
  check_act(ctx, x, what);
  check_act(ctx, out, what);
  check_shape(out, x.shape, what);
  const int64_t rows = norm_rows(x, what), d = x.dim(x.rank() - 1);
  check_param(ctx, w, d, what);
  check_f32(ctx, inv_rms, what);
  check_shape(inv_rms, Shape{rows}, what);
  FP8RL_DISPATCH(
      ctx, what,
      {
        cpu::inv_rms(x, eps, inv_rms);  // before out, which may be x
        cpu::rms_norm(x.reshape({rows, d}), w, eps, plus_one, out.reshape({rows, d}),
                      cpu::Rounding::none);
      },
      cuda::rms_norm_save(*ctx.cuda, x, w, eps, plus_one, out, inv_rms));
}

namespace {
// The operands every norm backward shares: x an activation, dy and dx f32 of x's shape, dx not
// x itself.
void check_norm_grads(const Context& ctx, const TensorView& x, const TensorView& dy,
                      const TensorView& dx, const char* what) {
  check_backward_ctx(ctx, what);
  check_act(ctx, x, what);
  check_f32(ctx, dy, what);
  check_f32(ctx, dx, what);
  check_shape(dy, x.shape, what);
  check_shape(dx, x.shape, what);
  CHECK(dx.data != x.data || x.numel() == 0, "{}: dx must not be x", what);
}
}  // namespace

void rms_norm_backward(Context& ctx, const TensorView& x, const TensorView& w,
                       const TensorView& inv_rms, bool plus_one, const TensorView& dy,
                       const TensorView& dx, const TensorView& dw) {
  const char* what = "rms_norm_backward";
  check_norm_grads(ctx, x, dy, dx, what);
  const int64_t rows = norm_rows(x, what), d = x.dim(x.rank() - 1);
  check_param(ctx, w, d, what);
  check_f32(ctx, inv_rms, what);
  check_shape(inv_rms, Shape{rows}, what);
  if (!dw.empty()) {
    check_f32(ctx, dw, what);
    check_shape(dw, Shape{d}, what);
  }
  if (!dw.empty()) FP8RL_DRY_RUN_CUDA_SCRATCH(ctx, cuda::rms_norm_backward_scratch_bytes(rows, d));
  FP8RL_DISPATCH(ctx, what, cpu::rms_norm_backward(x, w, inv_rms, plus_one, dy, dx, dw),
                 cuda::rms_norm_backward(*ctx.cuda, x, w, inv_rms, plus_one, dy, dx, dw));
}

// ---- RoPE and the per-head q/k norm

void rope_backward(Context& ctx, const TensorView& dy, const TensorView& positions,
                   const TensorView& inv_freq) {
  const char* what = "rope_backward";
  check_backward_ctx(ctx, what);
  check_f32(ctx, dy, what);
  check_rope(ctx, dy, positions, inv_freq, what);
  FP8RL_DISPATCH(ctx, what, cpu::rope_backward(dy, positions.ptr<const int32_t>(), inv_freq),
                 cuda::rope_backward(*ctx.cuda, dy, positions, inv_freq));
}

void rms_norm_rope_save(Context& ctx, const TensorView& x, const TensorView& w, float eps,
                        bool plus_one, const TensorView& positions, const TensorView& inv_freq,
                        const TensorView& out, const TensorView& inv_rms) {
  const char* what = "rms_norm_rope_save";
  check_backward_ctx(ctx, what);
  check_act(ctx, x, what);
  check_act(ctx, out, what);
  check_shape(out, x.shape, what);
  check_rope(ctx, x, positions, inv_freq, what);
  if (!w.empty()) {
    check_param(ctx, w, x.dim(2), what);
    check_f32(ctx, inv_rms, what);
    check_shape(inv_rms, Shape{x.dim(0) * x.dim(1)}, what);
  }
  FP8RL_DISPATCH(
      ctx, what,
      {
        if (!w.empty()) cpu::inv_rms(x, eps, inv_rms);
        cpu::rms_norm_rope(x, w, eps, plus_one,
                           {positions.ptr<const int32_t>(), size_t(positions.numel())}, inv_freq,
                           out, cpu::Rounding::none);
      },
      cuda::rms_norm_rope_save(*ctx.cuda, x, w, eps, plus_one, positions, inv_freq, out, inv_rms));
}

void rms_norm_rope_backward(Context& ctx, const TensorView& x, const TensorView& w,
                            const TensorView& inv_rms, bool plus_one, const TensorView& positions,
                            const TensorView& inv_freq, const TensorView& dy, const TensorView& dx,
                            const TensorView& dw) {
  const char* what = "rms_norm_rope_backward";
  check_norm_grads(ctx, x, dy, dx, what);
  check_rope(ctx, x, positions, inv_freq, what);
  if (!w.empty()) {
    check_param(ctx, w, x.dim(2), what);
    check_f32(ctx, inv_rms, what);
    check_shape(inv_rms, Shape{x.dim(0) * x.dim(1)}, what);
    if (!dw.empty()) {
      check_f32(ctx, dw, what);
      check_shape(dw, Shape{x.dim(2)}, what);
    }
  }
  if (!w.empty() && !dw.empty())
    FP8RL_DRY_RUN_CUDA_SCRATCH(
        ctx, cuda::rms_norm_backward_scratch_bytes(x.dim(0) * x.dim(1), x.dim(2)));
  FP8RL_DISPATCH(
      ctx, what,
      {
        if (dx.data != dy.data)
          std::copy(dy.ptr<const float>(), dy.ptr<const float>() + dy.numel(), dx.ptr<float>());
        cpu::rope_backward(dx, positions.ptr<const int32_t>(), inv_freq);
        if (!w.empty()) cpu::rms_norm_backward(x, w, inv_rms, plus_one, dx, dx, dw);
      },
      cuda::rms_norm_rope_backward(*ctx.cuda, x, w, inv_rms, plus_one, positions, inv_freq, dy, dx,
                                   dw));
}

// ---- Gated activations and softcap

namespace {
void check_gated_backward(Context& ctx, const TensorView& gate, const TensorView& up,
                          const TensorView& dout, const TensorView& dgate, const TensorView& dup,
                          const char* what) {
  check_backward_ctx(ctx, what);
  check_act(ctx, gate, what);
  check_act(ctx, up, what);
  check_f32(ctx, dout, what);
  check_f32(ctx, dgate, what);
  check_f32(ctx, dup, what);
  CHECK(gate.rank() >= 1 && up.shape == gate.shape && dout.shape == gate.shape &&
            dgate.shape == gate.shape && dup.shape == gate.shape && dgate.data != dup.data,
        "{}: gate {} up {} dout {} dgate {} dup {} (dgate and dup distinct)", what,
        gate.shape.str(), up.shape.str(), dout.shape.str(), dgate.shape.str(), dup.shape.str());
}
}  // namespace

void silu_mul_backward(Context& ctx, const TensorView& gate, const TensorView& up,
                       const TensorView& dout, const TensorView& dgate, const TensorView& dup) {
  check_gated_backward(ctx, gate, up, dout, dgate, dup, "silu_mul_backward");
  FP8RL_DISPATCH(ctx, "silu_mul_backward", cpu::silu_mul_backward(gate, up, dout, dgate, dup),
                 cuda::gated_backward(*ctx.cuda, gate, up, dout, 0, dgate, dup));
}

void gelu_tanh_mul_backward(Context& ctx, const TensorView& gate, const TensorView& up,
                            const TensorView& dout, const TensorView& dgate,
                            const TensorView& dup) {
  check_gated_backward(ctx, gate, up, dout, dgate, dup, "gelu_tanh_mul_backward");
  FP8RL_DISPATCH(ctx, "gelu_tanh_mul_backward",
                 cpu::gelu_tanh_mul_backward(gate, up, dout, dgate, dup),
                 cuda::gated_backward(*ctx.cuda, gate, up, dout, 1, dgate, dup));
}

void softcap_backward(Context& ctx, const TensorView& y, float cap, const TensorView& dy,
                      const TensorView& dx) {
  const char* what = "softcap_backward";
  check_backward_ctx(ctx, what);
  check_f32(ctx, y, what);
  check_f32(ctx, dy, what);
  check_f32(ctx, dx, what);
  CHECK(cap > 0 && y.rank() >= 1 && dy.shape == y.shape && dx.shape == y.shape,
        "{}: cap {} y {} dy {} dx {}", what, cap, y.shape.str(), dy.shape.str(), dx.shape.str());
  FP8RL_DISPATCH(ctx, what, cpu::softcap_backward(y, cap, dy, dx),
                 cuda::softcap_backward(*ctx.cuda, y, cap, dy, dx));
}

// ---- Attention

namespace {
// The operands of attention's saving forward and of its backward: pools and batch, the output
// [T,Hq,D] and its log-sum-exp [T,Hq] f32.
void check_attention_saved(const Context& ctx, const TensorView& q, const TensorView& k_pool,
                           const TensorView& v_pool, const PagedBatch& batch, const TensorView& out,
                           const TensorView& lse, const char* what) {
  check_backward_ctx(ctx, what);
  check_pools_and_batch(ctx, q, k_pool, v_pool, batch, what);
  check_act(ctx, out, what);
  check_shape(out, q.shape, what);
  check_f32(ctx, lse, what);
  check_shape(lse, Shape{q.dim(0), q.dim(1)}, what);
}
}  // namespace

void paged_attention_lse(Context& ctx, const TensorView& q, const TensorView& k_pool,
                         const TensorView& v_pool, const PagedBatch& batch,
                         const AttentionParams& p, const TensorView& out, const TensorView& lse) {
  const char* what = "paged_attention_lse";
  check_attention_saved(ctx, q, k_pool, v_pool, batch, out, lse, what);
  dry_run_scratch(
      ctx, paged_attention_scratch_bytes(ctx, q.dim(0), q.dim(1), q.dim(2), batch.max_context_len));
  FP8RL_DISPATCH(ctx, what,
                 cpu::paged_attention(scratch_of(ctx), q, k_pool, v_pool, batch, p, out,
                                      cpu::Rounding::none, lse),
                 cuda::paged_attention_lse(*ctx.cuda, q, k_pool, v_pool, batch, p, out, lse));
}

void paged_attention_backward(Context& ctx, const TensorView& q, const TensorView& k_pool,
                              const TensorView& v_pool, const PagedBatch& batch,
                              const AttentionParams& p, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, const TensorView& dq,
                              const TensorView& dk, const TensorView& dv) {
  const char* what = "paged_attention_backward";
  check_attention_saved(ctx, q, k_pool, v_pool, batch, out, lse, what);
  check_f32(ctx, dout, what);
  check_shape(dout, q.shape, what);
  check_f32(ctx, dq, what);
  check_shape(dq, q.shape, what);
  const Shape kv{q.dim(0), k_pool.dim(2), q.dim(2)};
  check_f32(ctx, dk, what);
  check_shape(dk, kv, what);
  check_f32(ctx, dv, what);
  check_shape(dv, kv, what);
  if (ctx.device == Device::cpu) dry_run_scratch(ctx, size_t(q.dim(0) * q.dim(1)) * 4 + 256);
  FP8RL_DRY_RUN_CUDA_SCRATCH(
      ctx, cuda::paged_attention_backward_scratch_bytes(q.dim(0), q.dim(1), q.dim(2)));
  FP8RL_DISPATCH(ctx, what,
                 cpu::paged_attention_backward(scratch_of(ctx), q, k_pool, v_pool, batch, p, out,
                                               lse, dout, dq, dk, dv),
                 cuda::paged_attention_backward(*ctx.cuda, q, k_pool, v_pool, batch, p, out, lse,
                                                dout, dq, dk, dv));
}

// ---- Linear layers and LoRA

void linear_backward_input(Context& ctx, const TensorView& dy, const LinearWeight& w,
                           const TensorView& dx, bool accumulate) {
  const char* what = "linear_backward_input";
  check_backward_ctx(ctx, what);
  check_weight(ctx, w, what);
  check_gemm_gradient(ctx, dy, what);
  check_f32(ctx, dx, what);
  CHECK(dy.rank() == 2 && dx.rank() == 2 && dy.dim(0) == dx.dim(0) &&
            dy.dim(1) == w.out_features() && dx.dim(1) == w.in_features(),
        "{}: dy {} weight {} dx {}", what, dy.shape.str(), w.weight.shape.str(), dx.shape.str());
  FP8RL_DRY_RUN_CUDA_SCRATCH(
      ctx, cuda::linear_backward_input_scratch_bytes(w, dy.dim(0), dy.dtype == DType::f32));
  FP8RL_DISPATCH(ctx, what, cpu::linear_backward_input(dy, w, dx, accumulate),
                 cuda::linear_backward_input(*ctx.cuda, dy, w, dx, accumulate));
}

TensorView gemm_gradient(Context& ctx, const TensorView& dy) {
  check_backward_ctx(ctx, "gemm_gradient");
  check_f32(ctx, dy, "gemm_gradient");
  if (ctx.device == Device::cpu) return dy;
  const TensorView out = scratch_alloc(ctx, dy.shape, DType::bf16);
  FP8RL_DISPATCH(ctx, "gemm_gradient", (void)0, cuda::round_to_bf16(*ctx.cuda, dy, out));
  return out;
}

void lora_dropout(Context& ctx, const TensorView& x, const LoraDropout& dropout,
                  const TensorView& out) {
  const char* what = "lora_dropout";
  check_backward_ctx(ctx, what);
  check_act(ctx, x, what);
  check_act(ctx, out, what);
  CHECK(x.rank() == 2 && out.shape == x.shape && dropout.p >= 0 && dropout.p < 1,
        "{}: x {} out {} p {}", what, x.shape.str(), out.shape.str(), dropout.p);
  FP8RL_DISPATCH(ctx, what, cpu::lora_dropout(x, dropout, out),
                 cuda::lora_dropout(*ctx.cuda, x, dropout, out));
}

void lora_backward(Context& ctx, const TensorView& x, const TensorView& a, const TensorView& b,
                   float scale, const LoraDropout& dropout, const TensorView& dy,
                   const TensorView& dx, const TensorView& da, const TensorView& db) {
  const char* what = "lora_backward";
  check_backward_ctx(ctx, what);
  check_act(ctx, x, what);
  for (const TensorView* t : {&a, &b, &da, &db}) check_f32(ctx, *t, what);
  check_gemm_gradient(ctx, dy, what);
  CHECK(x.rank() == 2 && a.rank() == 2 && b.rank() == 2 && a.dim(1) == x.dim(1) &&
            b.dim(1) == a.dim(0) && dy.shape == (Shape{x.dim(0), b.dim(0)}) &&
            da.shape == a.shape && db.shape == b.shape && dropout.p >= 0 && dropout.p < 1,
        "{}: x {} A {} B {} dy {} dA {} dB {} p {}", what, x.shape.str(), a.shape.str(),
        b.shape.str(), dy.shape.str(), da.shape.str(), db.shape.str(), dropout.p);
  if (!dx.empty()) {
    check_f32(ctx, dx, what);
    check_shape(dx, x.shape, what);
  }
  const int64_t m = x.dim(0), k = x.dim(1), r = a.dim(0);
  if (ctx.device == Device::cpu)
    dry_run_scratch(ctx, size_t(m * k + 2 * m * r) * 4 + 3 * 64);
  else
    FP8RL_DRY_RUN_CUDA_SCRATCH(ctx, cuda::lora_backward_scratch_bytes(
                                        m, k, b.dim(0), r, dropout.p > 0, dy.dtype == DType::f32));
  FP8RL_DISPATCH(ctx, what,
                 cpu::lora_backward(scratch_of(ctx), x, a, b, scale, dropout, dy, dx, da, db),
                 cuda::lora_backward(*ctx.cuda, x, a, b, scale, dropout, dy, dx, da, db));
}

// ---- lm_head and cross-entropy

size_t lm_head_cross_entropy_scratch_bytes(const LinearWeight& lm_head, int64_t t,
                                           const CrossEntropyParams& p) {
  const int64_t rows = std::min(t, p.chunk_rows);
  return size_t(rows * lm_head.out_features()) * 4 + 64 + linear_scratch_bytes(lm_head, rows);
}

void lm_head_cross_entropy(Context& ctx, const TensorView& x, const LinearWeight& lm_head,
                           const TensorView& targets, const CrossEntropyParams& p,
                           const TensorView& loss, const TensorView& logprob, const TensorView& lse,
                           const TensorView& entropy) {
  const char* what = "lm_head_cross_entropy";
  check_ce(ctx, x, lm_head, targets, p, what);
  for (const TensorView* t : {&loss, &logprob, &lse}) {
    check_f32(ctx, *t, what);
    check_shape(*t, Shape{x.dim(0)}, what);
  }
  if (!entropy.empty()) {
    check_f32(ctx, entropy, what);
    check_shape(entropy, Shape{x.dim(0)}, what);
  }
  ce_dry_run_scratch(ctx, lm_head, x.dim(0), p);
  FP8RL_DISPATCH(
      ctx, what,
      cpu::lm_head_cross_entropy(scratch_of(ctx), x, lm_head, targets, p, loss, logprob, lse,
                                 entropy),
      cuda::lm_head_cross_entropy(*ctx.cuda, x, lm_head, targets, p, loss, logprob, lse, entropy));
}

void lm_head_cross_entropy_backward(Context& ctx, const TensorView& x, const LinearWeight& lm_head,
                                    const TensorView& targets, const CrossEntropyParams& p,
                                    const TensorView& lse, const TensorView& dloss,
                                    const TensorView& dx) {
  const char* what = "lm_head_cross_entropy_backward";
  check_ce(ctx, x, lm_head, targets, p, what);
  for (const TensorView* t : {&lse, &dloss}) {
    check_f32(ctx, *t, what);
    check_shape(*t, Shape{x.dim(0)}, what);
  }
  check_f32(ctx, dx, what);
  check_shape(dx, x.shape, what);
  ce_dry_run_scratch(ctx, lm_head, x.dim(0), p);
  FP8RL_DISPATCH(
      ctx, what,
      cpu::lm_head_cross_entropy_backward(scratch_of(ctx), x, lm_head, targets, p, lse, dloss, dx),
      cuda::lm_head_cross_entropy_backward(*ctx.cuda, x, lm_head, targets, p, lse, dloss, dx));
}

}  // namespace fp8rl::ops
