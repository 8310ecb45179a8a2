// The op interface: every computation of the model forward, on tensor views, with an explicit
// Context. Each op has a CPU reference in ops/cpu/ and a CUDA implementation in ops/cuda/
// behind the same signature; ops.cpp checks operands once and dispatches on ctx.device.
//
// Activations are [rows, features] row-major in ctx.activation_dtype(): f32 on the CPU, bf16
// on CUDA (fp32 math inside the kernels). Every tensor argument lives on ctx.device. Weights
// (norm weights, embedding tables, linears) are whatever the model holds on that device.
// A CPU context with bf16_activations rounds every value to bf16 where CUDA stores bf16
// (ops/cpu/cpu_ops.h), keeping the f32 tensors.
//
// Dimension letters: T tokens, H hidden size, V vocab, Hq/Hkv query/kv heads, D head dim,
// N/K out/in features, C cache capacity.
#pragma once

#include <cstdint>
#include <span>

#include "ops/context.h"
#include "ops/linear.h"
#include "ops/memory.h"

namespace fp8rl::ops {

// out[T,H] = table[ids[t], :] * scale. ids [T] i32, table [V,H] (any float dtype on the CPU,
// bf16 on CUDA). Ids outside [0, V) raise on the CPU and give NaN rows on CUDA (the forward
// checks ids on the host before they reach a device).
void embedding(Context& ctx, const TensorView& ids, const TensorView& table, float scale,
               const TensorView& out);
// Host ids: the CPU uses them in place, CUDA copies them to the device first.
void embedding(Context& ctx, std::span<const int32_t> ids, const TensorView& table, float scale,
               const TensorView& out);

// Row-wise RMSNorm: out = x / sqrt(mean(x^2) + eps) * (plus_one ? 1 + w : w).
// x, out [R,D] (may alias); w [D] (any float dtype on the CPU, f32 on CUDA).
void rms_norm(Context& ctx, const TensorView& x, const TensorView& w, float eps, bool plus_one,
              const TensorView& out);

// The residual add fused with the norm of the next block's input: x = x + delta (in place,
// rounded to the activation dtype exactly as add() rounds it), then out = rms_norm(x) of the
// updated x. x, delta, out [R,D]; out may alias delta but not x. Equals add(x, delta, x)
// followed by rms_norm(x, w, eps, plus_one, out) bit for bit on every backend.
void add_rms_norm(Context& ctx, const TensorView& x, const TensorView& delta, const TensorView& w,
                  float eps, bool plus_one, const TensorView& out);

// Rotary embedding in place, rotate-half (GPT-NeoX) layout: x [T, heads, D], positions [T]
// i32, inv_freq [D/2] f32.
void rope(Context& ctx, const TensorView& x, const TensorView& positions,
          const TensorView& inv_freq);
void rope(Context& ctx, const TensorView& x, std::span<const int32_t> positions,
          const TensorView& inv_freq);  // host positions (CPU only)

// Per-head RMSNorm (Qwen3 / Gemma q/k norm) and RoPE in one pass, written to `out`:
// out = rope(rms_norm(x) over each head's D values). w [D] (f32 on CUDA), or an empty view for
// RoPE alone. x, out [T, heads, D] in the activation dtype, each head's D values contiguous
// and the heads of a token contiguous; the token stride (strides[0]) of each is free, so out
// can be a slice of a KV cache (kc.slice_rows(first, first + T)). out may be x itself (in
// place) or must not overlap it. Equals rms_norm then rope (then a copy to out) bit for bit
// on the CPU, and on CUDA for D % 16 == 0 up to 256 with 16-byte aligned rows (the vector
// kernel of ops/cuda/rope.cu; other shapes sum the squares in another order).
void rms_norm_rope(Context& ctx, const TensorView& x, const TensorView& w, float eps, bool plus_one,
                   const TensorView& positions, const TensorView& inv_freq, const TensorView& out);

struct AttentionParams {
  float scale = 1.0f;    // multiplies q.k
  float softcap = 0.0f;  // > 0: scores = softcap * tanh(scores / softcap)
  int64_t window = 0;    // > 0: query at slot s sees slots (s - window, s]
};

// Causal grouped-query attention of T new queries against a sequence's KV cache.
// q [T,Hq,D]; k_cache, v_cache [C,Hkv,D] (activation dtype); query t sits at cache slot
// first_slot + t and sees slots [0, first_slot + t] (and the window); out [T,Hq,D].
// CUDA: a FlashAttention-2 style kernel (online softmax over key tiles, no [T,C] scores in
// memory) for D in {32, 64, 128, 256}; on Hopper, a wgmma kernel for D = 128.
// amax (optional, f32 [1] on ctx.device, zeroed by the caller before the first of a series of
// calls): the op also max-reduces |out| into it, so that a tensor-scaled linear reading out
// needs no amax pass of its own (linear(..., x_amax)).
void attention(Context& ctx, const TensorView& q, const TensorView& k_cache,
               const TensorView& v_cache, int64_t first_slot, const AttentionParams& p,
               const TensorView& out, const TensorView& amax = {});

// ---- Paged KV cache --------------------------------------------------------------------
//
// One layer's cache is a pool of blocks: k_pool, v_pool [num_blocks, block_size, Hkv, D] in the
// activation dtype (block_size is k_pool.dim(1)); physical slot s = block * block_size +
// offset. A sequence's logical position j lives in slot
// block_tables[seq][j / block_size] * block_size + j % block_size.

// The attention metadata of one forward step, on ctx.device (built by the engine before the
// step). Query rows at or beyond cu_q[S] (the padding of a captured batch) are written as zeros.
struct PagedBatch {
  TensorView cu_q;          // [S+1] i32: sequence s owns new-query rows cu_q[s] .. cu_q[s+1]
  TensorView context_lens;  // [S] i32: tokens of s in the cache after this step, its new ones
                            // included; new query i of s sits at position
                            // context_lens[s] - n_s + i (n_s = cu_q[s+1] - cu_q[s])
  TensorView block_tables;  // [S, max_blocks_per_seq] i32 physical block ids (row stride free)
  int64_t num_seqs = 0;     // S
  // Host-side bounds for launch shapes, never read from the device: max_query_len >= every
  // n_s, max_context_len >= every context_lens[s].
  int64_t max_query_len = 0, max_context_len = 0;
  // Shared prefixes of a decode step (optional: empty views, or a step with max_query_len > 1,
  // run the per-sequence path): groups of sequences whose block tables begin with the same
  // physical blocks (the n samples of a prompt), built on the host (engine/shared_prefix.h).
  // Group g's members are sequences prefix_members[prefix_cu_members[g] ..
  // prefix_cu_members[g+1]] and their keys [0, prefix_lens[g]) are whole blocks, identical in
  // every member's table and below every member's position. Capacities are fixed by S (a
  // captured step's shapes repeat): groups past the count are empty. The CUDA decode kernel
  // reads each shared K/V tile once for all members (layers without a sliding window; on
  // mma.sync with P rounded to bf16 on the prefix keys, or with CudaDeviceOptions::
  // shared_prefix_mma off on the CUDA cores with P in fp32), a grouped row's result then
  // depending on its group's prefix length; the CPU ignores the description (its row loops are
  // the reference).
  TensorView prefix_cu_members;  // [S/2 + 1] i32
  TensorView prefix_members;     // [S] i32 sequence indices (those past the last group unused)
  TensorView prefix_lens;        // [S/2] i32 shared keys of group g (0 past the count)
  TensorView prefix_len_of_seq;  // [S] i32 shared keys of sequence s's group, 0 if none
  bool has_prefixes() const { return !prefix_len_of_seq.empty(); }
};

// The scales of an FP8 KV pool (model/kv_cache.h): [num_blocks, block_size, Hkv] f32 each,
// one per slot and kv head. Empty for a pool in the activation dtype.
struct KvScales {
  TensorView k, v;
  bool empty() const { return k.empty(); }
};

// k_pool/v_pool[slot_mapping[t]] = k[t], v[t] for each new token t (slot < 0: padding,
// skipped; a slot past the pool raises on the CPU and is skipped on CUDA). k, v [T, Hkv, D]
// (token stride free, heads contiguous), slot_mapping [T] i32. With scales the pools are
// f8e4m3: each (token, kv head) row of D values is quantized with the FP8 recipe's dynamic
// scaling of one group (quant/fp8.h: scale = amax / 448, codes = e4m3(x / scale)), codes and
// scales bit-identical on both backends.
void store_kv(Context& ctx, const TensorView& k, const TensorView& v,
              const TensorView& slot_mapping, const TensorView& k_pool, const TensorView& v_pool,
              const KvScales& scales = {});

// The new tokens' q and k through their per-head norm and RoPE, and the keys and values into
// their pool slots: rms_norm_rope(q) into q_out, rms_norm_rope(k), store_kv(k, v) in one pass.
// q [T, Hq, D], k, v [T, Hkv, D] with free token strides (the column parts of the stacked q/k/v
// GEMM's output); q_out [T, Hq, D] is q itself (in place) or overlaps none of them; k and v
// are only read. RoPE is the
// position embedding of `positions` and `inv_freq`; qk.q_norm / qk.k_norm as w of
// rms_norm_rope. Equals those three ops bit for bit: on the CPU it is them (rms_norm_rope's k
// into scratch), and on CUDA one kernel for D % 16 == 0 up to 256 with rows whose token strides
// are multiples of 8 (the vector kernel of rms_norm_rope, then store_kv's copy or
// quantization), the three ops for other shapes.
struct QkRope {
  TensorView q_norm, k_norm;  // [D] f32 each, or empty: RoPE alone
  float eps = 0.0f;
  bool plus_one = false;
  TensorView positions;  // [T] i32
  TensorView inv_freq;   // [D / 2] f32
};
void rope_store_kv(Context& ctx, const TensorView& q, const TensorView& k, const TensorView& v,
                   const QkRope& qk, const TensorView& slot_mapping, const TensorView& k_pool,
                   const TensorView& v_pool, const KvScales& scales, const TensorView& q_out);

// Causal GQA attention of every sequence's new queries against its paged cache (keys and
// values of the new tokens already stored by store_kv): query i of s sees positions
// [0, its position] (and the sliding window p.window). q [T,Hq,D], out [T,Hq,D]; amax as in
// attention(). On the CPU a row equals attention() over the same values in a contiguous
// cache bit for bit (both roundings), whatever the block placement and the rest of the batch.
// CUDA: max_query_len > 1 (or a GQA group over 16 heads) runs the varlen FlashAttention-2
// kernels of attention() with keys fetched through the block table (same key tile order:
// equal to attention() on the same device, and to the CPU's bf16 emulation up to its exp2
// ulps); max_query_len == 1 runs a split-K decode kernel with P in fp32 (another summation
// order). Within either kernel a row depends only on its position and its sequence's cache,
// but which kernel runs depends on the step's max_query_len.
// With scales (an FP8 pool) every key/value element is read as code * scale in fp32, then,
// where the activations are bf16 (CUDA, and the CPU's bf16 rounding), rounded to bf16 like the
// values of a bf16 pool; the result equals paged_attention over a pool holding those values.
// Rows of out after the last sequence's (a captured batch's padding) are zeros. With out_q
// (token or group scaling, [T, Hq*D]) out is also quantized into it for the FP8 linear that
// reads it, as quantize(out) would (on CUDA the quantizing kernel writes the zero rows of both:
// one kernel fewer a layer).
struct QuantizedActivation;
void paged_attention(Context& ctx, const TensorView& q, const TensorView& k_pool,
                     const TensorView& v_pool, const PagedBatch& batch, const AttentionParams& p,
                     const TensorView& out, const TensorView& amax = {},
                     const KvScales& scales = {}, const QuantizedActivation* out_q = nullptr);

// out = act(gate) * up, act = SiLU or GELU (tanh approximation). [T,I], may alias.
void silu_mul(Context& ctx, const TensorView& gate, const TensorView& up, const TensorView& out);
void gelu_tanh_mul(Context& ctx, const TensorView& gate, const TensorView& up,
                   const TensorView& out);

// out = a + alpha * b (one fma per element, so alpha = 1 is exactly a + b), same shape, may
// alias. alpha != 1 adds a LoRA update scaled by lora_alpha / r. Activations, or f32 tensors
// on either backend (the backward's gradient sums).
void add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out,
         float alpha = 1.0f);

// What the output of a linear or softcap is: an activation, in the activation dtype (bf16 on
// CUDA; f32 on the CPU, rounded to bf16 values under Context::bf16_activations), or exact fp32
// (the lm_head's logits), never rounded. On CUDA `out` is f32 exactly for Output::f32; on the
// CPU both are f32 tensors and only this argument tells them apart.
enum class Output : uint8_t { activation, f32 };

// x = cap * tanh(x / cap), in place. x in the activation dtype, or f32 logits (Output::f32).
void softcap(Context& ctx, const TensorView& x, float cap, Output kind = Output::activation);

// ---- FP8 activations -------------------------------------------------------------------

// An activation quantized with the FP8 recipe (quant/fp8.h) for the linears that consume it:
// e4m3 codes and fp32 scales of granularity `act`. Produced by quantize(), or fused into the
// op that makes the activation (rms_norm_quant, silu_mul_quant) so it is never written in
// bf16 first; several linears with the same act scaling share one (q/k/v, gate/up).
//
// Storage is the backend's: CPU scales are act_scale_shape() row-major ([1], [M], [M,G]);
// CUDA keeps [1] and [M] but stores group scales token-fastest as [G, padded_rows] and pads
// the rows to a multiple of 4 (code 0, scale 1), the layout cuBLASLt's VEC128 scaling reads.
struct QuantizedActivation {
  ActScaling act = ActScaling::none;
  int64_t rows = 0, cols = 0;  // M, K
  int64_t padded_rows = 0;     // rows of `codes` storage (>= rows)
  TensorView codes;            // [padded_rows, K] f8e4m3
  TensorView scales;           // f32, layout above
};

// Scratch for a quantized [rows, cols] activation on ctx.device.
QuantizedActivation alloc_quantized(Context& ctx, ActScaling act, int64_t rows, int64_t cols);
// q = quantize(x) with q.act (static_tensor: with `static_scale`). x [M,K] activation dtype
// or f32. Codes and scales equal quantize_activation() of the same values bit for bit.
void quantize(Context& ctx, const TensorView& x, const QuantizedActivation& q,
              float static_scale = 0.0f);
// quantize(rms_norm(x)) in one pass over x (q.act must be a dynamic scaling). The fused
// quantizers below take an optional `plain` [M,K] (activation dtype) that also receives the
// op's plain output, equal to rms_norm's / silu_mul's bit for bit, for a LoRA adapter reading
// the same input as the FP8 linears; plain may be gate or up itself.
void rms_norm_quant(Context& ctx, const TensorView& x, const TensorView& w, float eps,
                    bool plus_one, const QuantizedActivation& q, const TensorView& plain = {});
// add_rms_norm with the normed x quantized into q instead of written out: x = x + delta (in
// place, as add()), then q = quantize(rms_norm(x)) as rms_norm_quant() makes it.
void add_rms_norm_quant(Context& ctx, const TensorView& x, const TensorView& delta,
                        const TensorView& w, float eps, bool plus_one, const QuantizedActivation& q,
                        const TensorView& plain = {});
// quantize(act(gate) * up) in one pass.
void silu_mul_quant(Context& ctx, const TensorView& gate, const TensorView& up,
                    const QuantizedActivation& q, const TensorView& plain = {});
void gelu_tanh_mul_quant(Context& ctx, const TensorView& gate, const TensorView& up,
                         const QuantizedActivation& q, const TensorView& plain = {});
// Dequantized values x_hat[M,K] = codes * scales (f32 on the CPU, bf16 values under
// bf16_activations; bf16 on CUDA). For tests.
void dequantize(Context& ctx, const QuantizedActivation& q, const TensorView& out);

// ---- Linear layers ---------------------------------------------------------------------

// out[M,N] = x[M,K] W^T (+ b) with the FP8 recipe when W is FP8 (fp32 accumulation); x is
// quantized here with w.act. out is an activation, or f32 logits with Output::f32 (CUDA: the
// lm_head's logits come out of the GEMM in fp32).
void linear(Context& ctx, const TensorView& x, const LinearWeight& w, const TensorView& out,
            Output kind = Output::activation);
// The same with max |x| already known: x_amax is f32 [1] on ctx.device (as attention() makes
// it) and w.act must be tensor, so x is quantized in one pass (CUDA; the CPU recomputes it).
void linear(Context& ctx, const TensorView& x, const LinearWeight& w, const TensorView& out,
            const TensorView& x_amax);
// The same with x already quantized: q.act must be w.act (a dynamic scaling).
void linear(Context& ctx, const QuantizedActivation& x, const LinearWeight& w,
            const TensorView& out, Output kind = Output::activation);

// out[M,N] += alpha * x[M,K] W^T for an unquantized weight without bias (LoRA's up projection
// into its base linear's output). CUDA: one GEMM with beta = 1, no [M,N] temporary and no
// separate add (cuBLASLt's epilogue may round the product to bf16 before adding out); the CPU
// rounds the fp32 sum once.
void linear_accumulate(Context& ctx, const TensorView& x, const LinearWeight& w, float alpha,
                       const TensorView& out);

// ---- The choke point of every decoder projection --------------------------------------

// The input of a group of projections: the activation x [M, K] (what adapters and unquantized
// weights read), and its FP8 quantization q when the group's FP8 weights share one dynamic
// scaling (q.act != none: the producer fused it, rms_norm_quant / silu_mul_quant). x may be
// empty when q is set and no projection has an adapter.
struct LinearInput {
  TensorView x;
  QuantizedActivation q;
  int64_t rows() const { return q.act != ActScaling::none ? q.rows : x.dim(0); }
  int64_t cols() const { return q.act != ActScaling::none ? q.cols : x.dim(1); }
};

// One projection of a group that reads the same input (q/k/v; gate/up; o; down): its frozen
// weight, its adapter (inactive: none), its output [M, N] (contiguous, activation dtype), and
// the dropout of the adapter's input (the training forward's; p = 0 elsewhere).
struct Projection {
  const LinearWeight* weight = nullptr;
  LoraWeights lora;
  TensorView out;
  LoraDropout dropout;
};

// out_i = x W_i^T (+ b_i) + scale_i * (dropout_i(x) A_i^T) B_i^T for every projection of the
// group (1 to 4), PEFT's unmerged LoRA over the frozen base: the one op through which every
// projection and its adapter run, so the backend chooses the kernels for the group as a whole.
// `stacked` (optional): the group's weights as one [sum N_i, K] linear in one buffer, in
// group order (LayerWeights::qkv). The CPU runs each projection's linear, then its adapter's
// two products (linear, linear_accumulate): the reference. CUDA: FP8 weights at a decode step's
// few rows on one weight-streaming launch for the whole group, which also computes the
// adapters' down products (A matrices side by side in memory, no dropout) and adds their up
// products in its epilogue; else the stacked GEMM (split into the outputs) or one GEMM per
// weight (two side by side on a second stream); the adapters' down products as one GEMM over
// their A matrices when those lie side by side, the up products as one launch.
void linear_group(Context& ctx, const LinearInput& in, std::span<const Projection> group,
                  const LinearWeight* stacked = nullptr);

// Scratch bytes linear() needs for this weight and M rows on a device.
size_t linear_scratch_bytes(const LinearWeight& w, int64_t m);  // CPU
size_t linear_scratch_bytes(const Context& ctx, const LinearWeight& w, int64_t m);
// Scratch bytes of one alloc_quantized(ctx, act, m, k).
size_t quantized_bytes(const Context& ctx, ActScaling act, int64_t m, int64_t k);
// Scratch bytes attention() needs for T queries against a cache of C slots.
size_t attention_scratch_bytes(int64_t t, int64_t heads, int64_t c);  // CPU
size_t attention_scratch_bytes(const Context& ctx, int64_t t, int64_t heads, int64_t c);
// Scratch bytes paged_attention() needs for up to t query rows of `heads` query heads of
// head_dim values and contexts up to max_context_len (the CUDA decode kernel's split-K partials).
size_t paged_attention_scratch_bytes(const Context& ctx, int64_t t, int64_t heads, int64_t head_dim,
                                     int64_t max_context_len);

// ---- Mixture of experts (Qwen3-MoE) ----------------------------------------------------
//
// Both backends. CUDA (ops/cuda/moe.*): the router's bf16 GEMM, then a warp per token; the
// experts' rows permuted by expert on the device (a counting sort), one grouped GEMM for gate
// and up and one for down over all experts (mma.sync, bf16 or e4m3 codes), the gated
// activation between, and the combine in the CPU's order. Launch shapes depend on T, k, E and
// the widths only: decode steps are graph-capturable. The backward ops (ops/backward.h) and
// the experts' adapter dropout are the CPU's only (a clear error on CUDA).

// Scratch bytes moe_route / moe_experts take for T tokens (k experts each) on a device.
size_t moe_route_scratch_bytes(const Context& ctx, const LinearWeight& router, int64_t t);
size_t moe_experts_scratch_bytes(const Context& ctx, const MoeWeights& w, int64_t t, int64_t k,
                                 int64_t lora_rank = 0);

// Each token's top-k experts, as transformers' Qwen3-MoE router picks them: logits
// x W_router^T [T, E] (router's linear, an activation: bf16 values where activations are bf16,
// as HF's router computes them in the model dtype), p = softmax(logits) in fp32, the k largest
// p in decreasing order (ties to the lower expert index), divided by their sum when
// `normalize`, then rounded to the activation dtype (HF casts them back to the model dtype).
// x [T, H] activation; router [E, H] unquantized; weights [T, k] f32; experts [T, k] i32.
// `replay`: experts is read instead (the ids an earlier pass chose, each in [0, E) and
// distinct per token, else an error) and only their weights are computed, p at those ids
// (renormalized when `normalize`): routing replay, the trainer using the engine's experts. A
// token whose first id is -1 (not recorded) takes its top-k as without replay. `chosen`
// (optional, [T, k] i32, with replay): the top-k the router picks itself, for counting the
// replayed choices it would have made differently. On CUDA the replayed ids are device memory
// and are not checked here (a check would sync): check_replayed_experts checks them on the
// host before they are uploaded (the forward does); a bad id that reaches the kernels weighs
// 0 and adds nothing to the token.
void moe_route(Context& ctx, const TensorView& x, const LinearWeight& router, bool normalize,
               const TensorView& weights, const TensorView& experts, bool replay = false,
               const TensorView& chosen = {});

// moe_route's check of replayed expert ids (host [T, k] i32), for a CUDA forward's upload.
void check_replayed_experts(const TensorView& host_experts, int64_t num_experts);

enum class GatedActivation : uint8_t { silu, gelu_tanh };

// out[t] = sum over j of weights[t, j] * down_e(act(gate_e(x[t])) * up_e(x[t])), e =
// experts[t, j]: transformers' expert loop, each expert hit in increasing index adding its
// weighted rows into a zeroed output, rounded to the activation dtype after each product and
// each sum. An expert's rows run as one batch through linear() and silu_mul / gelu_tanh_mul,
// so FP8 experts quantize their inputs per token (row, group scaling) or over the rows the
// expert got (tensor scaling). x, out [T, H] activations, distinct; weights, experts [T, k] as
// moe_route writes them (an expert id outside [0, E), or twice for one token, raises on the
// CPU; CUDA does not read ids on the host: a pair with an id outside [0, E) adds nothing).
// CUDA computes the same: each expert's rows in bf16 or quantized as the CPU quantizes them
// (the dense FP8 recipe, e4m3 products summed in fp32 and scaled per 128-wide K block), its
// gate, up, act and down outputs rounded to bf16, and the same ordered weighted sum.
// `lora`: each expert's adapter term added to its projection's output, y += scale (x A_e^T)
// B_e^T, as linear_group's CPU reference adds a dense projection's (A [E, r, K], B [E, N, r]:
// f32 on the CPU, the bf16 compute copy on CUDA, where ranks are multiples of 8 and p = 0).
void moe_experts(Context& ctx, const TensorView& x, const MoeWeights& w, GatedActivation act,
                 const TensorView& weights, const TensorView& experts, const TensorView& out,
                 const MoeLora& lora = {});

// ---- Weights on a device ---------------------------------------------------------------

// w (bf16 [N,K] on ctx.device) -> q [N,K] f8e4m3 and scales (f32, weight_scale_shape) with
// the recipe of quantize_weight() (quant/fp8.h). For random-initialized device models.
void quantize_weight(Context& ctx, const TensorView& w, Fp8Scheme scheme, const TensorView& q,
                     const TensorView& scales);

// Makes a linear whose weight, scales and bias live on ctx.device ready for linear(): adds
// the backend's derived tensors (CUDA: block scales repacked for cuBLASLt, a per-tensor weight
// scale broadcast to [N] where the GEMM needs a vector), allocated into `storage`.
void prepare_linear(Context& ctx, LinearWeight& w, std::vector<DeviceBuffer>& storage);

}  // namespace fp8rl::ops
