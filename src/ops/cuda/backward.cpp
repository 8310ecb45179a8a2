// Tensor views -> kernel launches and GEMMs for the backward ops on CUDA (ops/backward.h);
// the operands were checked by ops/backward.cpp. linear_backward_input lives with the linear
// layers (linear.cpp), whose dequantized-weight path it shares.
#include <algorithm>

#include "ops/cuda/attention_backward.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/view_pointers.h"

namespace fp8rl::cuda {

namespace {

// Rows of D values: [R, D] or [T, heads, D].
int64_t rows_of(const TensorView& x) {
  const int64_t d = x.dim(x.rank() - 1);
  return d == 0 ? 0 : x.numel() / d;
}

// The kernels' form of ops::LoraDropout: threshold and multiplier computed in fp32 exactly as
// ops/cpu/backward_norm.cpp dropout_mask computes them.
DropoutMask mask_of(const ops::LoraDropout& d) {
  DropoutMask m;
  m.on = d.p > 0.0f;
  if (m.on) {
    m.threshold = 2.0f * d.p - 1.0f;
    m.keep = 1.0f / (1.0f - d.p);
  }
  m.seed = d.seed;
  return m;
}

// A bf16 GEMM with fp32 accumulation, its output f32 (y_f32) or bf16.
GemmArgs bf16_gemm(GemmLayout layout, int64_t m, int64_t n, int64_t k, const bf16* x, const bf16* w,
                   void* y, bool y_f32, float alpha, bool accumulate) {
  GemmArgs g;
  g.layout = layout;
  g.y_f32 = y_f32;
  g.m = m;
  g.n = n;
  g.k = k;
  g.x = x;
  g.w = w;
  g.y = y;
  g.alpha = alpha;
  g.accumulate = accumulate;
  return g;
}

}  // namespace

// ---- RMSNorm

void rms_norm_save(Backend& b, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   const TensorView& out, const TensorView& inv_rms) {
  const int64_t rows = rows_of(x), d = x.dim(x.rank() - 1);
  // inv_rms first: out may be x. The norm itself is launch_rms_norm, so out is rms_norm's.
  launch_inv_rms(bf(x), rows, d, eps, f32(inv_rms), b.stream());
  launch_rms_norm(bf(x), {}, f32(w), rows, d, eps, plus_one, bf(out), nullptr, b.stream());
}

size_t rms_norm_backward_scratch_bytes(int64_t rows, int64_t d) {
  return arena_aligned(size_t(norm_dw_chunks(rows) * d) * 4);
}

void rms_norm_backward(Backend& b, const TensorView& x, const TensorView& w,
                       const TensorView& inv_rms, bool plus_one, const TensorView& dy,
                       const TensorView& dx, const TensorView& dw) {
  const int64_t rows = rows_of(x), d = x.dim(x.rank() - 1);
  const size_t mark = b.arena().mark();
  float* partial = nullptr;
  if (!dw.empty()) partial = f32(b.arena().alloc({norm_dw_chunks(rows), d}, DType::f32));
  launch_rms_norm_backward(bf(x), f32(w), f32(inv_rms), plus_one, f32(dy), f32(dx),
                           dw.empty() ? nullptr : f32(dw), partial, rows, d, b.stream());
  b.arena().rewind(mark);
}

// ---- RoPE and the per-head q/k norm

void rope_backward(Backend& b, const TensorView& dy, const TensorView& positions,
                   const TensorView& inv_freq) {
  launch_rope_backward(f32(dy), dy.dim(0), dy.dim(1), dy.dim(2), i32(positions), f32(inv_freq),
                       b.stream());
}

void rms_norm_rope_save(Backend& b, const TensorView& x, const TensorView& w, float eps,
                        bool plus_one, const TensorView& positions, const TensorView& inv_freq,
                        const TensorView& out, const TensorView& inv_rms) {
  const int64_t t = x.dim(0), heads = x.dim(1), d = x.dim(2);
  if (!w.empty()) launch_inv_rms(bf(x), t * heads, d, eps, f32(inv_rms), b.stream());
  // The forward's own launch (cuda::rms_norm_rope with contiguous rows): out is its bits.
  launch_rope(bf(x), heads * d, bf(out), heads * d, t, heads, d, w.empty() ? nullptr : f32(w), eps,
              plus_one, i32(positions), f32(inv_freq), b.stream());
}

void rms_norm_rope_backward(Backend& b, const TensorView& x, const TensorView& w,
                            const TensorView& inv_rms, bool plus_one, const TensorView& positions,
                            const TensorView& inv_freq, const TensorView& dy, const TensorView& dx,
                            const TensorView& dw) {
  if (dx.data != dy.data && dy.nbytes() > 0)
    CUDA_CHECK(
        cudaMemcpyAsync(dx.data, dy.data, dy.nbytes(), cudaMemcpyDeviceToDevice, b.stream()));
  rope_backward(b, dx, positions, inv_freq);
  if (!w.empty()) {
    const TensorView flat = dx.reshape({x.dim(0) * x.dim(1), x.dim(2)});
    rms_norm_backward(b, x.reshape({x.dim(0) * x.dim(1), x.dim(2)}), w, inv_rms, plus_one, flat,
                      flat, dw);
  }
}

// ---- gated activations and softcap

void gated_backward(Backend& b, const TensorView& gate, const TensorView& up,
                    const TensorView& dout, int act, const TensorView& dgate,
                    const TensorView& dup) {
  launch_gated_backward(bf(gate), bf(up), f32(dout), gate.numel(), act, f32(dgate), f32(dup),
                        b.stream());
}

void softcap_backward(Backend& b, const TensorView& y, float cap, const TensorView& dy,
                      const TensorView& dx) {
  launch_softcap_backward(f32(y), cap, f32(dy), f32(dx), y.numel(), b.stream());
}

// ---- LoRA

void lora_dropout(Backend& b, const TensorView& x, const ops::LoraDropout& dropout,
                  const TensorView& out) {
  launch_lora_dropout(bf(x), mask_of(dropout), x.numel(), bf(out), b.stream());
}

void round_to_bf16(Backend& b, const TensorView& dy, const TensorView& out) {
  launch_f32_to_bf16(f32(dy), dy.numel(), bf(out), b.stream());
}

const void* bf16_gradient(Backend& b, const TensorView& dy) {
  if (dy.dtype == DType::bf16) return dy.data;
  const TensorView t = b.arena().alloc(dy.shape, DType::bf16);
  round_to_bf16(b, dy, t);
  return t.data;
}

size_t lora_backward_scratch_bytes(int64_t m, int64_t k, int64_t n, int64_t r, bool dropout,
                                   bool dy_f32) {
  return (dy_f32 ? arena_aligned(size_t(m * n) * 2) : 0) + arena_aligned(size_t(r * k) * 2) +
         arena_aligned(size_t(n * r) * 2) + 2 * arena_aligned(size_t(m * r) * 2) +
         (dropout ? arena_aligned(size_t(m * k) * 2) + arena_aligned(size_t(m * k) * 4) : 0);
}

// As PEFT under bf16 autocast: bf16 operands (x as stored; dy, A and B rounded, the rounded A
// and B equal to the adapter's compute copies), fp32 accumulation, the low-rank intermediates
// u and du stored in bf16, the gradients accumulated in fp32:
//   x_drop = x * mask [M,K]; u = x_drop A^T [M,r]; du = s dy B [M,r];
//   dB += s dy^T u; dA += du^T x_drop; dx += mask * (du A).
// (The fp32 version of the same five GEMMs, with x widened to an [M,K] fp32 copy, took 0.7 ms a
// projection at 8 x 1024 tokens: a fifth of the whole backward.)
void lora_backward(Backend& b, const TensorView& x, const TensorView& a, const TensorView& bw,
                   float scale, const ops::LoraDropout& dropout, const TensorView& dy,
                   const TensorView& dx, const TensorView& da, const TensorView& db) {
  const int64_t m = x.dim(0), k = x.dim(1), r = a.dim(0), n = bw.dim(0);
  const size_t mark = b.arena().mark();
  const DropoutMask mask = mask_of(dropout);
  Gemm& gemm = b.gemm();
  cudaStream_t s = b.stream();
  Arena& arena = b.arena();
  const bf16* dy_bf = static_cast<const bf16*>(bf16_gradient(b, dy));  // [M,N]
  const TensorView a_bf = arena.alloc({r, k}, DType::bf16);
  const TensorView b_bf = arena.alloc({n, r}, DType::bf16);
  const TensorView u = arena.alloc({m, r}, DType::bf16);
  const TensorView du = arena.alloc({m, r}, DType::bf16);
  launch_f32_to_bf16(f32(a), r * k, bf(a_bf), s);
  launch_f32_to_bf16(f32(bw), n * r, bf(b_bf), s);
  const bf16* xd = bf(x);
  if (mask.on) {
    const TensorView x_drop = arena.alloc({m, k}, DType::bf16);
    launch_lora_dropout(bf(x), mask, m * k, bf(x_drop), s);
    xd = bf(x_drop);
  }
  gemm.run(bf16_gemm(GemmLayout::xwt, m, r, k, xd, bf(a_bf), u.data, false, 1.0f, false), s);
  gemm.run(bf16_gemm(GemmLayout::xw, m, r, n, dy_bf, bf(b_bf), du.data, false, scale, false), s);
  gemm.run(bf16_gemm(GemmLayout::xtw, n, r, m, dy_bf, bf(u), db.data, true, scale, true), s);
  gemm.run(bf16_gemm(GemmLayout::xtw, r, k, m, bf(du), xd, da.data, true, 1.0f, true), s);
  if (!dx.empty()) {
    if (!mask.on) {
      gemm.run(bf16_gemm(GemmLayout::xw, m, k, r, bf(du), bf(a_bf), dx.data, true, 1.0f, true), s);
    } else {  // du A into fp32 scratch, then masked into dx
      float* t = f32(arena.alloc({m, k}, DType::f32));
      gemm.run(bf16_gemm(GemmLayout::xw, m, k, r, bf(du), bf(a_bf), t, true, 1.0f, false), s);
      launch_dropout_accumulate(t, mask, m * k, f32(dx), s);
    }
  }
  arena.rewind(mark);
}

// ---- attention

namespace {
AttentionBackwardArgs attention_args(const TensorView& q, const TensorView& k_pool,
                                     const TensorView& v_pool, const ops::PagedBatch& batch,
                                     const ops::AttentionParams& p) {
  CHECK(q.dim(2) <= kAttentionBackwardMaxD, "CUDA attention backward: head_dim {} > {}", q.dim(2),
        kAttentionBackwardMaxD);
  AttentionBackwardArgs a{};
  a.q = bf(q);
  a.k_pool = bf(k_pool);
  a.v_pool = bf(v_pool);
  a.cu_q = i32(batch.cu_q);
  a.context_lens = i32(batch.context_lens);
  a.block_tables = i32(batch.block_tables);
  a.table_stride = batch.block_tables.strides[0];
  a.num_seqs = batch.num_seqs;
  a.block_size = k_pool.dim(1);
  a.t = q.dim(0);
  a.hq = q.dim(1);
  a.hkv = k_pool.dim(2);
  a.d = q.dim(2);
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.window = p.window;
  return a;
}
}  // namespace

// out from the forward's own kernel (bit for bit). A prefill kernel writes lse from its own
// running max and sum (rows it does not write, beyond the batch's, stay 0); a decode step
// (every sequence one new token) runs the split-K decode kernel, and lse comes from a second
// pass over the keys (in batch-invariant mode, the prefill kernel runs decode steps too).
void paged_attention_lse(Backend& b, const TensorView& q, const TensorView& k_pool,
                         const TensorView& v_pool, const ops::PagedBatch& batch,
                         const ops::AttentionParams& p, const TensorView& out,
                         const TensorView& lse) {
  if (batch.max_query_len > 1 || b.batch_invariant()) {
    launch_fill_f32(f32(lse), lse.numel(), 0.0f, b.stream());
    paged_attention(b, q, k_pool, v_pool, batch, p, out, nullptr, {}, f32(lse));
    return;
  }
  const AttentionBackwardArgs a = attention_args(q, k_pool, v_pool, batch, p);
  paged_attention(b, q, k_pool, v_pool, batch, p, out, nullptr, {});
  launch_paged_attention_lse(a, f32(lse), b.stream());
}

size_t paged_attention_backward_scratch_bytes(int64_t t, int64_t hq, int64_t d) {
  return arena_aligned(size_t(t * hq) * 4) + arena_aligned(size_t(t * hq * d) * 2);
}

// The tiled kernels where they apply (head dim, 16-slot blocks, aligned operands, a known
// longest sequence); the reference kernels otherwise or when the device options ask for them.
void paged_attention_backward(Backend& b, const TensorView& q, const TensorView& k_pool,
                              const TensorView& v_pool, const ops::PagedBatch& batch,
                              const ops::AttentionParams& p, const TensorView& out,
                              const TensorView& lse, const TensorView& dout, const TensorView& dq,
                              const TensorView& dk, const TensorView& dv) {
  const AttentionBackwardArgs a = attention_args(q, k_pool, v_pool, batch, p);
  bool aligned16 = true;
  for (const TensorView* x : {&q, &k_pool, &v_pool, &out, &dout, &dq, &dk, &dv})
    aligned16 = aligned16 && (reinterpret_cast<uintptr_t>(x->data) & 15) == 0;
  const bool tiled =
      b.caps().attention_backward_tiled && aligned16 &&
      attention_backward_mma_supports(b.caps().attention_backward_dims, a.d, a.block_size) &&
      batch.max_query_len > 0 && batch.num_seqs <= 65535;
  const size_t mark = b.arena().mark();
  float* delta = f32(b.arena().alloc({a.t * a.hq}, DType::f32));
  if (tiled) {
    bf16* dout_bf = bf(b.arena().alloc({a.t, a.hq, a.d}, DType::bf16));
    launch_paged_attention_backward_mma(a, batch.max_query_len, bf(out), f32(dout), f32(lse),
                                        dout_bf, delta, f32(dq), f32(dk), f32(dv), b.stream());
  } else {
    launch_paged_attention_backward(a, bf(out), f32(dout), f32(lse), delta, f32(dq), f32(dk),
                                    f32(dv), b.stream());
  }
  b.arena().rewind(mark);
}

// ---- lm_head and cross-entropy

static_assert(kCrossEntropyIgnore == ops::kIgnoreIndex);

size_t lm_head_cross_entropy_scratch_bytes(const LinearWeight& lm_head, int64_t t,
                                           const ops::CrossEntropyParams& p) {
  const int64_t rows = std::min(t, p.chunk_rows);
  return arena_aligned(size_t(rows * lm_head.out_features()) * 4) +
         std::max(linear_scratch_bytes(lm_head, rows),
                  linear_backward_input_scratch_bytes(lm_head, rows, true));
}

namespace {
// Rows [r0, r1) of the raw logits x W^T [r1 - r0, V] f32 in the arena (the caller's scope),
// computed by the forward's own CUDA linear.
TensorView chunk_logits(Backend& b, const TensorView& x, const LinearWeight& w, int64_t r0,
                        int64_t r1) {
  TensorView logits = b.arena().alloc({r1 - r0, w.out_features()}, DType::f32);
  linear(b, x.slice_rows(r0, r1), w, logits);
  return logits;
}
}  // namespace

void lm_head_cross_entropy(Backend& b, const TensorView& x, const LinearWeight& lm_head,
                           const TensorView& targets, const ops::CrossEntropyParams& p,
                           const TensorView& loss, const TensorView& logprob, const TensorView& lse,
                           const TensorView& entropy) {
  const int64_t t = x.dim(0), v = lm_head.out_features();
  for (int64_t r0 = 0; r0 < t; r0 += p.chunk_rows) {
    const int64_t r1 = std::min(t, r0 + p.chunk_rows);
    const size_t mark = b.arena().mark();
    const TensorView logits = chunk_logits(b, x, lm_head, r0, r1);
    launch_cross_entropy_rows(f32(logits), i32(targets) + r0, r1 - r0, v, p.temperature, p.softcap,
                              f32(loss) + r0, f32(logprob) + r0, f32(lse) + r0,
                              entropy.empty() ? nullptr : f32(entropy) + r0, b.stream());
    b.arena().rewind(mark);
  }
}

void lm_head_cross_entropy_backward(Backend& b, const TensorView& x, const LinearWeight& lm_head,
                                    const TensorView& targets, const ops::CrossEntropyParams& p,
                                    const TensorView& lse, const TensorView& dloss,
                                    const TensorView& dx) {
  const int64_t t = x.dim(0), v = lm_head.out_features();
  for (int64_t r0 = 0; r0 < t; r0 += p.chunk_rows) {
    const int64_t r1 = std::min(t, r0 + p.chunk_rows);
    const size_t mark = b.arena().mark();
    const TensorView logits = chunk_logits(b, x, lm_head, r0, r1);
    launch_cross_entropy_grad(f32(logits), i32(targets) + r0, r1 - r0, v, p.temperature, p.softcap,
                              f32(lse) + r0, f32(dloss) + r0, b.stream());
    linear_backward_input(b, logits, lm_head, dx.slice_rows(r0, r1), false);
    b.arena().rewind(mark);
  }
}

}  // namespace fp8rl::cuda
